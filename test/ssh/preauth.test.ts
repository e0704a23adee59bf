import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, addMember, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import { clusterRow } from '../../control-plane/src/testing/cluster-row.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';
import { type Keypair, keygen, runTool } from './fixtures.ts';

/**
 * Before a client proves it holds a key, the relay must not tell apart a cluster that does not exist from
 * one it may not reach: the real OpenSSH client, verbose, sees the same conversation for both.
 */
describe('SSH relay before authentication', () => {
  let t: TestApp;
  let dir: string;
  let port: number;
  let clusterId: string;
  let mate: TestMember;
  let mateKey: Keypair;
  let strangerKey: Keypair;

  const addKey = async (member: TestMember, key: Keypair) => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/ssh-keys',
      headers: member.headers,
      payload: { name: 'laptop', public_key: key.pub },
    });
    expect(res.statusCode, res.body).toBe(201);
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'anvil-ssh-preauth-'));
    t = await createTestApp({
      env: { ANVIL_DATA_DIR: join(dir, 'data'), ANVIL_SSH_HOST: 'ssh.example.test' },
    });
    port = (await t.context.ssh.listen(0, '127.0.0.1')).port;
    clusterId = newId('cluster');
    await t.context.db.prisma.cluster.create({
      data: clusterRow({
        id: clusterId,
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'preauth',
        sshEnabled: true,
      }),
    });
    await t.context.db.prisma.resource.create({
      data: { id: clusterId, accountId: t.accountId, type: 'cluster', name: 'preauth', ownerId: t.userId },
    });
    // A teammate without write on the cluster, whose key is registered in the cluster's account.
    mate = await addMember(t, { role: 'viewer' });
    mateKey = keygen(dir, 'mate');
    await addKey(mate, mateKey);
    const stranger = await addAccount(t, 'Stranger');
    strangerKey = keygen(dir, 'stranger');
    await addKey(stranger, strangerKey);
  }, 240_000);

  afterAll(async () => {
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The authentication conversation as the client logs it, with names that differ between runs removed. */
  const conversation = async (key: Keypair, user: string) => {
    const run = await runTool('ssh', [
      '-v',
      '-p',
      String(port),
      '-i',
      key.path,
      '-o',
      'StrictHostKeyChecking=no',
      '-o',
      'UserKnownHostsFile=/dev/null',
      '-o',
      'BatchMode=yes',
      '-o',
      'IdentitiesOnly=yes',
      '-o',
      'IdentityAgent=none',
      '-F',
      '/dev/null',
      `${user}@127.0.0.1`,
      'true',
    ]);
    expect(run.code, run.stderr).toBe(255);
    expect(run.stderr).toMatch(/Permission denied \(publickey\)/);
    return run.stderr
      .split('\n')
      .filter((line) =>
        /Server accepts key|Authentications that can continue|No more authentication|Permission denied/.test(
          line,
        ),
      )
      .map((line) => line.replaceAll(key.path, '<key>').replaceAll(user, '<user>').trim());
  };

  it.each([
    ['a known cluster, key of a teammate without write', () => [mateKey, clusterId] as const],
    ['an unknown cluster, the same key', () => [mateKey, newId('cluster')] as const],
    ['a known cluster, key of another account', () => [strangerKey, clusterId] as const],
    ['an unknown cluster, key of another account', () => [strangerKey, newId('cluster')] as const],
    ['a login name that is no cluster id', () => [mateKey, 'root'] as const],
  ])(
    'answers %s the same way',
    async (_label, args) => {
      const [key, user] = args();
      const reference = await conversation(key, newId('cluster'));
      expect(reference.some((line) => line.includes('Server accepts key'))).toBe(true);
      expect(await conversation(key, user)).toEqual(reference);
    },
    120_000,
  );
});
