import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTar } from './tar.ts';

const run = promisify(execFile);

/** The archive is checked by the system's GNU tar, not by a reader of our own. */
describe('buildTar', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'anvil-tar-'));
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  it('writes files that tar extracts with their content, mode and nested paths', async () => {
    const long = `${'d'.repeat(90)}/${'e'.repeat(60)}/secret.txt`;
    const big = Buffer.alloc(1500, 'x');
    const archive = buildTar([
      { name: 'run/secrets/token', mode: 0o400, content: Buffer.from('s3cret\n') },
      { name: 'etc/app/empty', mode: 0o644, content: Buffer.alloc(0) },
      { name: long, mode: 0o440, content: big },
    ]);
    expect(archive.length % 512).toBe(0);
    const file = join(dir, 'a.tar');
    await writeFile(file, archive);
    const out = join(dir, 'out');
    await run('mkdir', ['-p', out]);
    await run('tar', ['-xpf', file, '-C', out]);
    expect(await readFile(join(out, 'run/secrets/token'), 'utf8')).toBe('s3cret\n');
    expect((await stat(join(out, 'run/secrets/token'))).mode & 0o777).toBe(0o400);
    expect((await stat(join(out, 'etc/app/empty'))).size).toBe(0);
    expect((await stat(join(out, 'etc/app/empty'))).mode & 0o777).toBe(0o644);
    expect(await readFile(join(out, long))).toEqual(big);
    const { stdout } = await run('tar', ['-tvf', file]);
    expect(stdout).toContain('run/secrets/token');
  });

  it('refuses absolute and parent paths', () => {
    expect(() => buildTar([{ name: '/etc/x', mode: 0o400, content: Buffer.from('x') }])).toThrow(/refusing/);
    expect(() => buildTar([{ name: 'a/../x', mode: 0o400, content: Buffer.from('x') }])).toThrow(/refusing/);
  });
});
