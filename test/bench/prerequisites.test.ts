import { describe, expect, it } from 'vitest';
import { installed, missingPrerequisites } from '../../bench/prerequisites.ts';

describe('benchmark prerequisites', () => {
  it('finds programs on PATH and by absolute path', () => {
    expect(installed('sh')).toBe(true);
    expect(installed(process.execPath)).toBe(true);
    expect(installed('anvil-no-such-program')).toBe(false);
  });

  it('names what is missing and the Debian package to install, instead of failing with ENOENT', () => {
    expect(
      missingPrerequisites('ssh-scp', {
        programs: [
          { command: '/nonexistent/sbin/sshd', debianPackage: 'openssh-server' },
          { command: 'sh', debianPackage: 'dash' },
          { command: 'anvil-no-such-ssh', debianPackage: 'openssh-client' },
          { command: 'anvil-no-such-scp', debianPackage: 'openssh-client' },
        ],
      }),
    ).toBe(
      'ssh-scp: skipped (/nonexistent/sbin/sshd, anvil-no-such-ssh, anvil-no-such-scp missing: ' +
        'apt-get install openssh-server openssh-client)\n',
    );
    expect(missingPrerequisites('x', { programs: [{ command: 'sh', debianPackage: 'dash' }] })).toBeNull();
  });
});
