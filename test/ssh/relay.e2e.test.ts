import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { Client } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sshViewPart } from '../../control-plane/src/ssh/index.ts';
import { addAccount, addMember } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/index.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import {
  clientOptions,
  freePort,
  insertCluster,
  type Keypair,
  keygen,
  runTool,
  type SshWorld,
  startSshWorld,
  waitFor,
} from './fixtures.ts';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

describe.skipIf(!dockerOrFail('test/ssh/relay.e2e.test.ts'))(
  'SSH relay with the real OpenSSH client and real Docker',
  () => {
    let t: TestApp;
    let docker: Dockerode;
    let dir: string;
    let port: number;
    let cluster: { id: string };
    let world: SshWorld;
    let owner: Keypair;

    const addKey = async (headers: { authorization: string }, key: Keypair, name: string) => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/v2/accounts/profile/ssh-keys',
        headers,
        payload: { name, public_key: key.pub },
      });
      expect(res.statusCode, res.body).toBe(201);
    };
    const ssh = (key: Keypair, args: string[], stdin?: string, user = cluster.id) =>
      runTool('ssh', ['-p', String(port), ...clientOptions(key), `${user}@127.0.0.1`, ...args], stdin);

    beforeAll(async () => {
      docker = testDocker();
      dir = mkdtempSync(join(tmpdir(), 'anvil-ssh-'));
      world = await startSshWorld(docker, join(dir, 'data'));
      t = world.t;
      port = world.port;
      owner = keygen(dir, 'owner');
      await addKey(t.auth(), owner, 'owner laptop');
      cluster = await insertCluster(t, { ownerId: t.userId, accountId: t.accountId, hostId: world.hostId });
    }, 300_000);

    afterAll(async () => {
      await world?.close();
      rmSync(dir, { recursive: true, force: true });
    }, 240_000);

    it('keeps one host key in the data directory, mode 0600, and reports ssh_connection truthfully', async () => {
      const path = join(dir, 'data', 'ssh_host_ed25519_key');
      expect(statSync(path).mode & 0o777).toBe(0o600);
      const view = sshViewPart(t.context.ssh);
      expect(view({ id: cluster.id, sshEnabled: true } as never)).toEqual({
        host: 'ssh.example.test',
        port,
        username: cluster.id,
      });
      expect(view({ id: cluster.id, sshEnabled: false } as never)).toBeNull();
      // The fingerprint clients see is the stored key's.
      const scan = await runTool('ssh-keyscan', ['-t', 'ed25519', '-p', String(port), '127.0.0.1']);
      const line = scan.stdout.toString().trim().split(' ').slice(1).join(' ');
      expect(readFileSync(`${path}.pub`, 'utf8')).toContain(line.split(' ')[1]!);
    }, 240_000);

    it('runs commands with their exit status and separate stdout and stderr', async () => {
      const run = await ssh(owner, ['echo out; echo err >&2; exit 7']);
      expect(run.code, run.stderr).toBe(7);
      expect(run.stdout.toString()).toBe('out\n');
      expect(run.stderr).toBe('err\n');
      const stdin = await ssh(owner, ['wc -c'], 'x'.repeat(100_000));
      expect(stdin.code).toBe(0);
      expect(stdin.stdout.toString().trim()).toBe('100000');
    }, 240_000);

    it('gives an interactive PTY shell', async () => {
      const run = await ssh(owner, ['-tt'], 'tty; echo "term=$TERM"; exit 3\n');
      expect(run.code).toBe(3);
      const out = run.stdout.toString();
      expect(out).toMatch(/\/dev\/pts\/\d+/);
      expect(out).toContain('term=');
    }, 240_000);

    it('forwards window changes and signals (ssh2 client, which can send both)', async () => {
      const client = new Client();
      await new Promise<void>((resolve, reject) => {
        client.on('ready', resolve).on('error', reject);
        client.connect({
          host: '127.0.0.1',
          port,
          username: cluster.id,
          privateKey: readFileSync(owner.path),
        });
      });
      try {
        const stream = await new Promise<import('ssh2').ClientChannel>((resolve, reject) =>
          client.shell({ term: 'xterm', cols: 80, rows: 24 }, (err, s) => (err ? reject(err) : resolve(s))),
        );
        let output = '';
        stream.on('data', (d: Buffer) => {
          output += d.toString();
        });
        stream.write('stty size\n');
        await waitFor('initial size', async () => output.includes('24 80'));
        stream.setWindow(40, 132, 0, 0);
        // Asks again on each poll until the new size shows.
        await waitFor('resized', async () => {
          if (output.includes('40 132')) return true;
          stream.write('stty size\n');
          return false;
        });
        const exit = new Promise<number>((resolve) => stream.on('exit', (code: number) => resolve(code)));
        // The interactive shell ignores TERM: it is replaced by a non-interactive one, which says when it
        // runs (the quotes keep the typed line's echo from matching), then by sleep. TERM ends either.
        stream.write(`exec sh -c 'echo "in-sh""-now"; exec sleep 300'\n`);
        await waitFor('the shell replaced', async () => output.includes('in-sh-now'));
        stream.signal('TERM');
        expect(await exit).toBe(143);
      } finally {
        client.end();
      }
    }, 240_000);

    it('copies binary files both ways with scp (SFTP mode) and sftp, checksums equal', async () => {
      const data = randomBytes(3 * 1024 * 1024 + 12345);
      const local = join(dir, 'up.bin');
      writeFileSync(local, data);
      const common = ['-P', String(port), ...clientOptions(owner)];

      const up = await runTool('scp', [...common, local, `${cluster.id}@127.0.0.1:/tmp/up.bin`]);
      expect(up.code, up.stderr).toBe(0);
      const remoteSum = await ssh(owner, ['sha256sum /tmp/up.bin']);
      expect(remoteSum.stdout.toString().split(' ')[0]).toBe(sha256(data));
      const back = join(dir, 'back.bin');
      const down = await runTool('scp', [...common, `${cluster.id}@127.0.0.1:/tmp/up.bin`, back]);
      expect(down.code, down.stderr).toBe(0);
      expect(sha256(readFileSync(back))).toBe(sha256(data));

      const small = randomBytes(70_001);
      writeFileSync(join(dir, 'small.bin'), small);
      const batch = [
        'mkdir /tmp/sftpdir',
        `put ${join(dir, 'small.bin')} /tmp/sftpdir/a.bin`,
        'rename /tmp/sftpdir/a.bin /tmp/sftpdir/b.bin',
        'ls -l /tmp/sftpdir',
        `get /tmp/sftpdir/b.bin ${join(dir, 'small.back')}`,
        `get /tmp/up.bin ${join(dir, 'big.back')}`,
        'rm /tmp/sftpdir/b.bin',
        'rmdir /tmp/sftpdir',
      ].join('\n');
      const sftp = await runTool('sftp', ['-b', '-', ...common, `${cluster.id}@127.0.0.1`], `${batch}\n`);
      expect(sftp.code, sftp.stderr).toBe(0);
      expect(sftp.stdout.toString()).toMatch(/-rw-r--r--\s+1 0\s+0\s+70001 .* b\.bin/);
      expect(sha256(readFileSync(join(dir, 'small.back')))).toBe(sha256(small));
      expect(sha256(readFileSync(join(dir, 'big.back')))).toBe(sha256(data));
      const gone = await ssh(owner, ['ls /tmp/sftpdir']);
      expect(gone.code).not.toBe(0);

      const missing = await runTool('scp', [
        ...common,
        `${cluster.id}@127.0.0.1:/tmp/nope.bin`,
        join(dir, 'x'),
      ]);
      expect(missing.code).not.toBe(0);
      expect(missing.stderr).toMatch(/No such file/i);
    }, 240_000);

    it('forwards a local port to a port of the container (ssh -L) carrying HTTP', async () => {
      const local = await freePort();
      const child = spawn(
        'ssh',
        [
          '-p',
          String(port),
          ...clientOptions(owner),
          '-N',
          '-o',
          'ExitOnForwardFailure=yes',
          '-L',
          `${local}:localhost:8080`,
          `${cluster.id}@127.0.0.1`,
        ],
        { stdio: 'ignore' },
      );
      try {
        const body = await waitFor(
          'HTTP through the forward',
          () =>
            new Promise<string>((resolve, reject) => {
              get({ host: '127.0.0.1', port: local, path: '/index.html' }, (res) => {
                let text = '';
                res.on('data', (c: Buffer) => {
                  text += c.toString();
                });
                res.on('end', () => resolve(res.statusCode === 200 ? text : ''));
              }).on('error', reject);
            }),
        );
        expect(body).toBe('hello-from-httpd\n');
      } finally {
        child.kill();
      }
    }, 240_000);

    it('refuses a wrong key, a stranger, a teammate without write, a stopped cluster and ssh_enabled false', async () => {
      const denied = (run: { code: number | null; stderr: string }) => {
        expect(run.code).toBe(255);
        expect(run.stderr).toMatch(/Permission denied/);
      };
      denied(await ssh(keygen(dir, 'unregistered'), ['true']));

      const stranger = await addAccount(t, 'Stranger');
      const strangerKey = keygen(dir, 'stranger');
      await addKey(stranger.headers, strangerKey, 'stranger');
      denied(await ssh(strangerKey, ['true']));
      // Even the owner's key registered by the stranger as well does not open another account's cluster for them.
      await addKey(stranger.headers, owner, 'copied');
      expect((await ssh(owner, ['true'])).code).toBe(0);

      const mate = await addMember(t, { role: 'developer' });
      const mateKey = keygen(dir, 'mate');
      await addKey(mate.headers, mateKey, 'mate');
      denied(await ssh(mateKey, ['true']));
      const audit = await t.context.db.prisma.auditEvent.findFirst({
        where: { accountId: t.accountId, action: 'ssh_connect_attempt', actorId: mate.userId },
      });
      expect(audit).not.toBeNull();
      const share = await t.app.inject({
        method: 'POST',
        url: `/v2/accounts/permissions/resources/${cluster.id}/share`,
        headers: t.auth(),
        payload: { users: [mate.userId], permissions: ['read', 'write'] },
      });
      expect(share.statusCode, share.body).toBeLessThan(300);
      const shared = await ssh(mateKey, ['echo shared-in']);
      expect(shared.stdout.toString()).toBe('shared-in\n');

      await t.context.db.prisma.cluster.update({ where: { id: cluster.id }, data: { sshEnabled: false } });
      denied(await ssh(owner, ['true']));
      await t.context.db.prisma.cluster.update({
        where: { id: cluster.id },
        data: { sshEnabled: true, status: 'stopped' },
      });
      denied(await ssh(owner, ['true']));
      await t.context.db.prisma.cluster.update({ where: { id: cluster.id }, data: { status: 'running' } });
      expect((await ssh(owner, ['true'])).code).toBe(0);
    }, 240_000);
  },
);
