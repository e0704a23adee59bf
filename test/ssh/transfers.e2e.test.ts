import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, type SFTPWrapper } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import {
  clientOptions,
  insertCluster,
  type Keypair,
  keygen,
  runTool,
  type SshWorld,
  startSshWorld,
  waitFor,
} from './fixtures.ts';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * File transfers through the SSH relay with the real OpenSSH tools: the legacy SCP protocol (`scp -O`,
 * served by the relay itself), SFTP overwrites, resumed transfers and writes at arbitrary offsets, and a
 * large download, all checked by checksums against what the container holds.
 */
describe.skipIf(!dockerOrFail('test/ssh/transfers.e2e.test.ts'))('SSH relay file transfers', () => {
  let world: SshWorld;
  let dir: string;
  let key: Keypair;
  let cluster: { id: string };
  let target: string;

  const ssh = (command: string) =>
    runTool('ssh', ['-p', String(world.port), ...clientOptions(key), target, command]);
  const scp = (...args: string[]) =>
    runTool('scp', ['-P', String(world.port), ...clientOptions(key), ...args]);
  const sftp = (batch: string[]) =>
    runTool(
      'sftp',
      ['-b', '-', '-P', String(world.port), ...clientOptions(key), target],
      `${batch.join('\n')}\n`,
    );
  /** An ssh2 SFTP client (it can name any path, and send requests the OpenSSH tools never do). */
  const connectSftp = async () => {
    const client = new Client();
    await new Promise<void>((resolve, reject) => {
      client.on('ready', resolve).on('error', reject);
      client.connect({
        host: '127.0.0.1',
        port: world.port,
        username: cluster.id,
        privateKey: readFileSync(key.path),
      });
    });
    const sftp = await new Promise<SFTPWrapper>((resolve, reject) =>
      client.sftp((err, s) => (err ? reject(err) : resolve(s))),
    );
    return { client, sftp };
  };
  const call = <T>(fn: (cb: (err: Error | null | undefined, value: T) => void) => void) =>
    new Promise<T>((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))));
  /** Processes in the container running the relay's helper shell or a spare exec. */
  const helperProcesses = async () => {
    const run = await ssh('grep -l anvil_[d]ecode /proc/[0-9]*/cmdline 2>/dev/null | wc -l');
    expect(run.code, run.stderr).toBe(0);
    return Number(run.stdout.toString().trim());
  };
  const remoteSha = async (path: string) => {
    const run = await ssh(`sha256sum '${path}'`);
    expect(run.code, run.stderr).toBe(0);
    return run.stdout.toString().split(' ')[0];
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'anvil-ssh-transfers-'));
    world = await startSshWorld(testDocker(), join(dir, 'data'));
    key = keygen(dir, 'owner');
    const added = await world.t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/ssh-keys',
      headers: world.t.auth(),
      payload: { name: 'owner', public_key: key.pub },
    });
    expect(added.statusCode, added.body).toBe(201);
    cluster = await insertCluster(world.t, {
      ownerId: world.t.userId,
      accountId: world.t.accountId,
      hostId: world.hostId,
    });
    target = `${cluster.id}@127.0.0.1`;
  }, 300_000);

  afterAll(async () => {
    await world?.close();
    rmSync(dir, { recursive: true, force: true });
  }, 240_000);

  it('copies a file both ways with scp -O (the SCP protocol), into a directory target too', async () => {
    const data = randomBytes(2 * 1024 * 1024 + 4321);
    const local = join(dir, 'legacy.bin');
    writeFileSync(local, data);

    const up = await scp('-O', local, `${target}:/tmp/legacy.bin`);
    expect(up.code, up.stderr).toBe(0);
    expect(await remoteSha('/tmp/legacy.bin')).toBe(sha256(data));

    const back = join(dir, 'legacy.back');
    const down = await scp('-O', `${target}:/tmp/legacy.bin`, back);
    expect(down.code, down.stderr).toBe(0);
    expect(sha256(readFileSync(back))).toBe(sha256(data));

    // Several sources: the target must be a directory (-d on the remote end), each lands by its name.
    const small = randomBytes(1000);
    writeFileSync(join(dir, 'small one.bin'), small);
    expect((await ssh('mkdir -p /tmp/into')).code).toBe(0);
    const many = await scp('-O', local, join(dir, 'small one.bin'), `${target}:/tmp/into`);
    expect(many.code, many.stderr).toBe(0);
    expect(await remoteSha('/tmp/into/legacy.bin')).toBe(sha256(data));
    expect(await remoteSha('/tmp/into/small one.bin')).toBe(sha256(small));
    const notDir = await scp('-O', local, join(dir, 'small one.bin'), `${target}:/tmp/legacy.bin`);
    expect(notDir.code).not.toBe(0);
    expect(notDir.stderr).toMatch(/Not a directory/);

    // The remote shell expands the path, as sshd's would: a glob and a home-relative name.
    expect((await ssh('cp /tmp/legacy.bin ~/in-home.bin')).code).toBe(0);
    const globbed = await scp('-O', `${target}:/tmp/into/small*`, join(dir, 'globbed.bin'));
    expect(globbed.code, globbed.stderr).toBe(0);
    expect(sha256(readFileSync(join(dir, 'globbed.bin')))).toBe(sha256(small));
    mkdirSync(join(dir, 'all'));
    const all = await scp('-O', `${target}:/tmp/into/*`, join(dir, 'all'));
    expect(all.code, all.stderr).toBe(0);
    expect(sha256(readFileSync(join(dir, 'all', 'legacy.bin')))).toBe(sha256(data));
    expect(sha256(readFileSync(join(dir, 'all', 'small one.bin')))).toBe(sha256(small));
    const relative = await scp('-O', `${target}:in-home.bin`, join(dir, 'home.back'));
    expect(relative.code, relative.stderr).toBe(0);
    expect(sha256(readFileSync(join(dir, 'home.back')))).toBe(sha256(data));
  }, 240_000);

  it('reports scp -O errors the way scp does, with a non-zero exit', async () => {
    const missing = await scp('-O', `${target}:/tmp/no-such-file.bin`, join(dir, 'x'));
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/\/tmp\/no-such-file\.bin: No such file or directory/);

    const directory = await scp('-O', `${target}:/tmp`, join(dir, 'y'));
    expect(directory.code).not.toBe(0);
    expect(directory.stderr).toMatch(/\/tmp: not a regular file/);

    writeFileSync(join(dir, 'z.bin'), 'z');
    const badTarget = await scp('-O', join(dir, 'z.bin'), `${target}:/no/such/dir/z.bin`);
    expect(badTarget.code).not.toBe(0);
    expect(badTarget.stderr).toMatch(/\/no\/such\/dir\/z\.bin: No such file or directory/);

    // One bad source among good ones: the good one still arrives, the exit says something failed.
    mkdirSync(join(dir, 'mixed'));
    const mixed = await scp('-O', `${target}:/tmp/legacy.bin`, `${target}:/tmp/nope.bin`, join(dir, 'mixed'));
    expect(mixed.code).not.toBe(0);
    expect(mixed.stderr).toMatch(/nope\.bin: No such file or directory/);
    expect(statSync(join(dir, 'mixed', 'legacy.bin')).size).toBe(2 * 1024 * 1024 + 4321);
  }, 240_000);

  it('copies a directory tree with scp -O -r -p both ways: contents, modes and times', async () => {
    const tree = join(dir, 'tree');
    mkdirSync(join(tree, 'sub', 'deeper'), { recursive: true });
    mkdirSync(join(tree, 'empty dir'));
    const files: Record<string, Buffer> = {
      'a.bin': randomBytes(300_000),
      'with space.txt': Buffer.from('spaces survive\n'),
      'sub/b.bin': randomBytes(70_000),
      'sub/deeper/c.bin': randomBytes(5),
      'sub/empty.txt': Buffer.alloc(0),
    };
    for (const [name, data] of Object.entries(files)) writeFileSync(join(tree, name), data);
    writeFileSync(join(tree, 'run.sh'), '#!/bin/sh\necho hi\n');
    chmodSync(join(tree, 'run.sh'), 0o750);
    files['run.sh'] = readFileSync(join(tree, 'run.sh'));
    const mtime = new Date('2021-06-01T12:00:00Z');
    utimesSync(join(tree, 'sub', 'b.bin'), mtime, mtime);

    const up = await scp('-O', '-r', '-p', tree, `${target}:/tmp/tree-up`);
    expect(up.code, up.stderr).toBe(0);
    for (const [name, data] of Object.entries(files)) {
      expect(await remoteSha(`/tmp/tree-up/${name}`), name).toBe(sha256(data));
    }
    const modes = await ssh(
      "stat -c '%a %Y %n' /tmp/tree-up/run.sh /tmp/tree-up/sub/b.bin '/tmp/tree-up/empty dir'",
    );
    expect(modes.stdout.toString()).toContain(`750 `);
    expect(modes.stdout.toString()).toContain(`${mtime.getTime() / 1000} /tmp/tree-up/sub/b.bin`);
    expect(modes.stdout.toString()).toContain('/tmp/tree-up/empty dir');

    // Into an existing directory, the tree lands under its own name.
    expect((await ssh('mkdir -p /tmp/parent')).code).toBe(0);
    const into = await scp('-O', '-r', tree, `${target}:/tmp/parent`);
    expect(into.code, into.stderr).toBe(0);
    expect(await remoteSha('/tmp/parent/tree/sub/deeper/c.bin')).toBe(sha256(files['sub/deeper/c.bin']!));

    const back = join(dir, 'tree-back');
    const down = await scp('-O', '-r', '-p', `${target}:/tmp/tree-up`, back);
    expect(down.code, down.stderr).toBe(0);
    for (const [name, data] of Object.entries(files)) {
      expect(sha256(readFileSync(join(back, name))), name).toBe(sha256(data));
    }
    expect(statSync(join(back, 'run.sh')).mode & 0o777).toBe(0o750);
    expect(statSync(join(back, 'sub', 'b.bin')).mtimeMs).toBe(mtime.getTime());
    expect(statSync(join(back, 'empty dir')).isDirectory()).toBe(true);
  }, 240_000);

  it('overwrites with sftp put, and resumes uploads and downloads (reput, reget)', async () => {
    const first = randomBytes(600_000);
    const second = randomBytes(200_000);
    writeFileSync(join(dir, 'first.bin'), first);
    writeFileSync(join(dir, 'second.bin'), second);
    const full = randomBytes(1_500_000);
    writeFileSync(join(dir, 'full.bin'), full);
    writeFileSync(join(dir, 'head.bin'), full.subarray(0, 512_345));
    writeFileSync(join(dir, 'partial.bin'), full.subarray(0, 700_001));

    const run = await sftp([
      `put ${join(dir, 'first.bin')} /tmp/over.bin`,
      `put ${join(dir, 'second.bin')} /tmp/over.bin`,
      // An interrupted upload (its first part) resumed: the rest is written from where the file ends.
      `put ${join(dir, 'head.bin')} /tmp/resumed.bin`,
      `reput ${join(dir, 'full.bin')} /tmp/resumed.bin`,
      `put ${join(dir, 'full.bin')} /tmp/full.bin`,
      `reget /tmp/full.bin ${join(dir, 'partial.bin')}`,
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(await remoteSha('/tmp/over.bin')).toBe(sha256(second));
    expect(await remoteSha('/tmp/resumed.bin')).toBe(sha256(full));
    expect(sha256(readFileSync(join(dir, 'partial.bin')))).toBe(sha256(full));
  }, 240_000);

  it('writes and reads at arbitrary offsets through SFTP (rewrites, gaps, out of order)', async () => {
    const { client, sftp } = await connectSftp();
    try {
      const write = (handle: Buffer, data: Buffer, position: number) =>
        call<void>((cb) => sftp.write(handle, data, 0, data.length, position, (err) => cb(err, undefined)));

      // Expected content built alongside: a write past the end leaves zeros, a rewrite replaces bytes.
      const expected = Buffer.alloc(300_000);
      const handle = await call<Buffer>((cb) => sftp.open('/tmp/random.bin', 'w', cb));
      const parts: [number, Buffer][] = [
        [0, randomBytes(100_000)],
        [250_000, randomBytes(50_000)],
        [40_000, randomBytes(30_000)],
        [100_000, randomBytes(10)],
        [0, Buffer.from('rewritten')],
      ];
      for (const [at, data] of parts) {
        await write(handle, data, at);
        data.copy(expected, at);
      }
      const size = await call<{ size: number }>((cb) => sftp.fstat(handle, cb));
      expect(size.size).toBe(300_000);
      await call<void>((cb) => sftp.close(handle, (err) => cb(err, undefined)));
      expect(await remoteSha('/tmp/random.bin')).toBe(sha256(expected));

      // An existing file opened without truncation keeps its bytes around a write in its middle.
      const again = await call<Buffer>((cb) => sftp.open('/tmp/random.bin', 'r+', cb));
      const patch = randomBytes(1234);
      await write(again, patch, 200_000);
      patch.copy(expected, 200_000);
      await call<void>((cb) => sftp.close(again, (err) => cb(err, undefined)));
      expect(await remoteSha('/tmp/random.bin')).toBe(sha256(expected));

      // Reads in any order, and past the end.
      const reader = await call<Buffer>((cb) => sftp.open('/tmp/random.bin', 'r', cb));
      const read = (position: number, length: number) =>
        new Promise<Buffer>((resolve, reject) =>
          sftp.read(reader, Buffer.alloc(length), 0, length, position, (err, bytes, buf) =>
            err ? reject(err) : resolve(buf.subarray(0, bytes)),
          ),
        );
      const reads = await Promise.all([
        read(250_000, 40_000),
        read(10, 5_000),
        read(280_000, 40_000),
        read(120_000, 1),
        read(300_000, 10),
      ]);
      expect(reads[0]).toEqual(expected.subarray(250_000, 290_000));
      expect(reads[1]).toEqual(expected.subarray(10, 5_010));
      expect(reads[2]).toEqual(expected.subarray(280_000, 300_000));
      expect(reads[3]).toEqual(expected.subarray(120_000, 120_001));
      // Past the end: EOF, which ssh2 reports as 0 bytes.
      expect(reads[4]!.length).toBe(0);
      expect(await read(0, 100)).toEqual(expected.subarray(0, 100));
      await call<void>((cb) => sftp.close(reader, (err) => cb(err, undefined)));
    } finally {
      client.end();
    }
  }, 240_000);

  it('uploads a large file intact with scp (SFTP mode) and scp -O', async () => {
    // Large enough for many batches of pipelined writes: an answer out of order makes OpenSSH's client
    // truncate the file to what was acknowledged in order, and still exit 0.
    const data = randomBytes(48 * 1024 * 1024 + 5);
    const local = join(dir, 'large-up.bin');
    writeFileSync(local, data);
    for (const flags of [[], ['-O']]) {
      const up = await scp(...flags, local, `${target}:/tmp/large-up.bin`);
      expect(up.code, up.stderr).toBe(0);
      expect(await remoteSha('/tmp/large-up.bin'), flags.join(' ')).toBe(sha256(data));
    }
  }, 240_000);

  it('downloads a large file intact with scp (SFTP mode) and scp -O', async () => {
    const made = await ssh(
      'dd if=/dev/urandom of=/tmp/large.bin bs=1048576 count=24 2>/dev/null && sha256sum /tmp/large.bin',
    );
    expect(made.code, made.stderr).toBe(0);
    const sum = made.stdout.toString().split(' ')[0];
    const viaSftp = join(dir, 'large.sftp');
    const down = await scp(`${target}:/tmp/large.bin`, viaSftp);
    expect(down.code, down.stderr).toBe(0);
    expect(sha256(readFileSync(viaSftp))).toBe(sum);
    const viaScp = join(dir, 'large.scp');
    const legacy = await scp('-O', `${target}:/tmp/large.bin`, viaScp);
    expect(legacy.code, legacy.stderr).toBe(0);
    expect(sha256(readFileSync(viaScp))).toBe(sum);
    // Resumed far into the file: the relay's reader starts at that offset rather than reading up to it.
    truncateSync(viaSftp, 9 * 1024 * 1024 + 1);
    const resumed = await sftp([`reget /tmp/large.bin ${viaSftp}`]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(sha256(readFileSync(viaSftp))).toBe(sum);
  }, 240_000);
  it('serves names holding newlines, quotes, $, backslashes and a leading dash, byte for byte', async () => {
    // Names hold no `/`: run, these would make `anvil-pwned` in the working directory.
    const dirName = `/tmp/nasty\n$HOME 'dir'`;
    const names = [
      'new\nline.bin',
      `quotes ' and ".bin`,
      '$(touch anvil-pwned).bin',
      '`touch anvil-pwned`',
      '; touch anvil-pwned',
      'back\\slash \\n \\0101.bin',
      '-leading-dash',
      'trailing newline\n',
      '*',
    ];
    const { client, sftp } = await connectSftp();
    try {
      await call<void>((cb) => sftp.mkdir(dirName, (err) => cb(err, undefined)));
      const contents = new Map(names.map((name) => [name, randomBytes(1000 + name.length)]));
      for (const [name, data] of contents) {
        await call<void>((cb) => sftp.writeFile(`${dirName}/${name}`, data, (err) => cb(err, undefined)));
      }
      const listed = await call<{ filename: string; attrs: { size: number } }[]>((cb) =>
        sftp.readdir(dirName, cb),
      );
      expect(listed.map((e) => e.filename).sort()).toEqual([...names].sort());
      for (const entry of listed) expect(entry.attrs.size).toBe(contents.get(entry.filename)!.length);
      for (const [name, data] of contents) {
        const stat = await call<{ size: number }>((cb) => sftp.stat(`${dirName}/${name}`, cb));
        expect(stat.size, name).toBe(data.length);
        const back = await call<Buffer>((cb) => sftp.readFile(`${dirName}/${name}`, cb));
        expect(sha256(back), name).toBe(sha256(data));
      }
      await call<void>((cb) =>
        sftp.rename(`${dirName}/new\nline.bin`, `${dirName}/re\nnamed`, (err) => cb(err, undefined)),
      );
      await call<void>((cb) => sftp.unlink(`${dirName}/-leading-dash`, (err) => cb(err, undefined)));
      const after = await call<{ filename: string }[]>((cb) => sftp.readdir(dirName, cb));
      expect(after.map((e) => e.filename)).toContain('re\nnamed');
      expect(after.map((e) => e.filename)).not.toContain('-leading-dash');
    } finally {
      client.end();
    }
    // OpenSSH's scp (SFTP mode) fetches a name with a newline in it.
    const local = join(dir, 'newline.back');
    const down = await scp(`${target}:${dirName}/re\nnamed`, local);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(local).length).toBe(1000 + 'new\nline.bin'.length);
    const pwned = await ssh('find / -xdev -name anvil-pwned 2>/dev/null | wc -l');
    expect(pwned.stdout.toString().trim()).toBe('0');
  }, 240_000);

  it('leaves no helper or spare processes in the container once a session ends, however it ends', async () => {
    expect(await helperProcesses()).toBe(0);
    const data = randomBytes(3 * 1024 * 1024);
    writeFileSync(join(dir, 'helpers.bin'), data);
    const up = await scp(join(dir, 'helpers.bin'), `${target}:/tmp/helpers.bin`);
    expect(up.code, up.stderr).toBe(0);
    await waitFor('no helpers after scp', async () => (await helperProcesses()) === 0, 15_000);

    // While a session lasts, its helper and spare run; ending it (EOF, or the connection cut) ends them.
    for (const end of ['end', 'destroy'] as const) {
      const { client, sftp } = await connectSftp();
      const back = await call<Buffer>((cb) => sftp.readFile('/tmp/helpers.bin', cb));
      expect(sha256(back)).toBe(sha256(data));
      await call<void>((cb) => sftp.mkdir(`/tmp/helpers-${end}`, (err) => cb(err, undefined)));
      expect(await helperProcesses()).toBeGreaterThanOrEqual(2);
      if (end === 'end') client.end();
      else client.destroy();
      await waitFor(`no helpers after ${end}`, async () => (await helperProcesses()) === 0, 15_000);
    }
    const leftovers = await ssh('ls -A /tmp | grep -c "^tmp\\." || true');
    expect(leftovers.stdout.toString().trim()).toBe('0');
  }, 240_000);
});
