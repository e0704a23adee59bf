import { describe, expect, it } from 'vitest';
import { parseScpCommand } from './scp-command.ts';

describe('parseScpCommand', () => {
  it('recognises what OpenSSH scp -O runs on the remote end', () => {
    expect(parseScpCommand('scp -t /tmp/a b/c*d')).toEqual({
      role: 'sink',
      recursive: false,
      preserve: false,
      targetIsDirectory: false,
      words: '/tmp/a b/c*d',
    });
    expect(parseScpCommand('scp -v -r -p -f ~/x')).toEqual({
      role: 'source',
      recursive: true,
      preserve: true,
      targetIsDirectory: false,
      words: '~/x',
    });
    expect(parseScpCommand('scp -d -t -- -dir')).toMatchObject({
      role: 'sink',
      targetIsDirectory: true,
      words: '-dir',
    });
    expect(parseScpCommand('/usr/bin/scp -rf "/tmp/with space"')).toMatchObject({
      role: 'source',
      recursive: true,
      words: '"/tmp/with space"',
    });
  });

  it('leaves every other command to run as a command', () => {
    for (const command of [
      'scp',
      'scp -t',
      'scp -f -t x',
      'scp -r x',
      'scp -3 -t x',
      'ls -t x',
      'echo scp -t x',
      'scpx -t x',
    ]) {
      expect(parseScpCommand(command), command).toBeNull();
    }
  });
});
