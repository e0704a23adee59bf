import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  encodeField,
  encodeRequest,
  HELPER_SCRIPT,
  ReplyError,
  ReplyReader,
  type ShellReply,
  SPARE_SCRIPT,
} from './shell-protocol.ts';

/** Names that break naive quoting, framing or decoding. */
const NASTY: Buffer[] = [
  'plain.txt',
  'with space',
  'new\nline',
  'trailing newlines\n\n',
  '\nleading newline',
  `quotes ' and "`,
  '$HOME and $(touch /tmp/anvil-pwned) and `id`',
  'back\\slash \\n \\0101 \\c',
  '-n',
  '-e',
  '--',
  '%s %b %%',
  'tab\tand\rcr',
  '*',
  '',
  'ünïcødé ✓',
].map((s) => Buffer.from(s, 'utf8'));
NASTY.push(Buffer.from([0x66, 0xff, 0xfe, 0x80, 0x0a, 0x5c, 0x30])); // not UTF-8

/** The shells the scripts must work in: the system sh (dash on Debian), and busybox as images have it. */
const SHELLS: string[][] = [['/bin/sh']];
if (spawnSync('busybox', ['true']).status === 0) SHELLS.push(['busybox', 'sh']);

/** Runs the helper in a shell, sends `requests`, collects the replies until its stdin ends. */
async function throughHelper(
  shell: string[],
  requests: Buffer[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<ShellReply[]> {
  const child = spawn(shell[0]!, [...shell.slice(1), '-c', HELPER_SCRIPT], { stdio: 'pipe', env });
  const reader = new ReplyReader();
  const replies: ShellReply[] = [];
  child.stdout.on('data', (chunk: Buffer) => replies.push(...reader.push(chunk)));
  for (const request of requests) child.stdin.write(request);
  child.stdin.end();
  await new Promise((resolve) => child.on('close', resolve));
  return replies;
}

function runSpare(shell: string[], input: Buffer): { code: number | null; stdout: Buffer } {
  const run = spawnSync(shell[0]!, [...shell.slice(1), '-c', SPARE_SCRIPT], { input });
  return { code: run.status, stdout: run.stdout };
}

describe('encodeField', () => {
  it('keeps safe bytes, escapes the rest as \\0ooo, and marks every field', () => {
    expect(encodeField('/tmp/a-b_c.txt')).toBe('x/tmp/a-b_c.txt');
    expect(encodeField('')).toBe('x');
    expect(encodeField('a b\n$')).toBe('xa\\0040b\\0012\\0044');
    expect(encodeField(Buffer.from([0xff]))).toBe('x\\0377');
  });

  it('never puts a space, newline or lone backslash in a line', () => {
    for (const name of NASTY) {
      const field = encodeField(name);
      expect(field).not.toMatch(/[\s'"$`*]/);
      expect(field.replace(/\\0[0-7]{3}/g, '')).not.toContain('\\');
    }
  });

  it('refuses a NUL byte, which no path or argument can hold', () => {
    expect(() => encodeField('a\0b')).toThrow(/NUL/);
    expect(() => encodeRequest('true', ['ok', 'a\0b'])).toThrow(/NUL/);
  });
});

describe.each(SHELLS)('the helper in %s', (...shell) => {
  it('hands every argument to the script byte for byte, and answers in order', async () => {
    const script = `for a; do printf '%s' "$a" | od -An -v -tx1 | tr -d ' \\n'; printf '/'; done`;
    const requests = NASTY.map((name) => encodeRequest(script, [name, 'second']));
    const replies = await throughHelper(shell, requests);
    expect(replies).toHaveLength(NASTY.length);
    replies.forEach((reply, i) => {
      expect(reply.code).toBe(0);
      expect(reply.stdout.toString()).toBe(
        `${NASTY[i]!.toString('hex')}/${Buffer.from('second').toString('hex')}/`,
      );
    });
  });

  it('returns exit status, stdout and stderr apart, binary output and trailing newlines intact', async () => {
    const replies = await throughHelper(shell, [
      encodeRequest(`printf 'a\\0b\\n\\n'; echo oops >&2; exit 3`, []),
      encodeRequest('printf "%s" "$1"; cd /; exit 0', ['keeps\nnewlines\n\n']),
      // The subshell's cd and variables do not reach the next request.
      encodeRequest('pwd; echo "[$anvil_x]"', []),
      encodeRequest('cat; echo "read: $?"', []),
      encodeRequest('true', []),
    ]);
    expect(replies.map((r) => r.code)).toEqual([3, 0, 0, 0, 0]);
    expect(replies[0]!.stdout).toEqual(Buffer.from('a\0b\n\n'));
    expect(replies[0]!.stderr.toString()).toBe('oops\n');
    expect(replies[1]!.stdout.toString()).toBe('keeps\nnewlines\n\n');
    expect(replies[2]!.stdout.toString()).toBe(`${process.cwd()}\n[]\n`);
    // A script reading stdin gets /dev/null, not the requests that follow it.
    expect(replies[3]!.stdout.toString()).toBe('read: 0\n');
    expect(replies[4]!.stdout.length + replies[4]!.stderr.length).toBe(0);
  });

  it('does not run what an argument says', async () => {
    const marker = `/tmp/anvil-shell-protocol-${process.pid}`;
    const replies = await throughHelper(shell, [
      encodeRequest('ls -d -- "$1" 2>/dev/null; echo "$#"', [`$(touch ${marker})`]),
      encodeRequest('echo "$1"', [`\`touch ${marker}\`; touch ${marker}`]),
    ]);
    expect(replies.map((r) => r.stdout.toString())).toEqual([
      '1\n',
      `\`touch ${marker}\`; touch ${marker}\n`,
    ]);
    expect(spawnSync('test', ['-e', marker]).status).not.toBe(0);
  });

  it('leaves no temporary files, whatever the output', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'anvil-helper-'));
    try {
      const big = encodeRequest('head -c 9000000 /dev/zero; ls -A "$TMPDIR" >&2', []);
      const replies = await throughHelper(shell, [big, big, big, encodeRequest('echo "$1"', ['ok'])], {
        ...process.env,
        TMPDIR: tmp,
      });
      expect(replies.map((r) => [r.code, r.stdout.length, r.stderr.toString()])).toEqual([
        [0, 9_000_000, ''],
        [0, 9_000_000, ''],
        [0, 9_000_000, ''],
        [0, 3, ''],
      ]);
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('answers a line that is no request with 127 and stays in step', async () => {
    const replies = await throughHelper(shell, [Buffer.from('\n'), encodeRequest('echo next', [])]);
    expect(replies.map((r) => r.code)).toEqual([127, 0]);
    expect(replies[1]!.stdout.toString()).toBe('next\n');
  });
});

describe.each(SHELLS)('a spare exec in %s', (...shell) => {
  it('becomes the script it is sent, with what follows the line as its stdin', () => {
    const input = Buffer.concat([
      encodeRequest('printf "%s|" "$1"; exec cat', ['new\nline -n $x']),
      Buffer.from('content\nafter the line'),
    ]);
    const run = runSpare(shell, input);
    expect(run.code).toBe(0);
    expect(run.stdout.toString()).toBe('new\nline -n $x|content\nafter the line');
  });

  it("exits with the script's status, and quietly when never used", () => {
    expect(runSpare(shell, encodeRequest('exit 5', [])).code).toBe(5);
    expect(runSpare(shell, Buffer.alloc(0)).code).toBe(0);
  });
});

describe('ReplyReader', () => {
  const stream = Buffer.concat([
    Buffer.from('0 5 0\nhello'),
    Buffer.from('1 0 4\nbad\n'),
    Buffer.from(' 2   3  2 \na\nbcd'),
  ]);

  it('cuts replies wherever the chunks break', () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const reader = new ReplyReader();
      const replies = [...reader.push(stream.subarray(0, cut)), ...reader.push(stream.subarray(cut))];
      expect(replies.map((r) => [r.code, r.stdout.toString(), r.stderr.toString()])).toEqual([
        [0, 'hello', ''],
        [1, '', 'bad\n'],
        [2, 'a\nb', 'cd'],
      ]);
    }
  });

  it('takes one byte at a time', () => {
    const reader = new ReplyReader();
    const replies: ShellReply[] = [];
    for (const byte of stream) replies.push(...reader.push(Buffer.of(byte)));
    expect(replies).toHaveLength(3);
  });

  it('refuses output that is not a reply', () => {
    expect(() => new ReplyReader().push(Buffer.from('sh: oops\n'))).toThrow(ReplyError);
    expect(() => new ReplyReader().push(Buffer.alloc(100, 0x31))).toThrow(ReplyError);
  });
});
