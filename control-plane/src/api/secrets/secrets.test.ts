import { Writable } from 'node:stream';
import { newId } from '@anvil/shared';
import type { WorkloadSpec } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterAccess } from '../../clusters/access.ts';
import { SecretBox } from '../../crypto/secret-box.ts';
import { createLogger } from '../../logger.ts';
import { secretSpecResolver } from '../../secrets/injection.ts';
import { SecretService } from '../../secrets/secrets.ts';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { clusterRow, createTestApp, ManualClock, type TestApp, testLogger } from '../../testing/index.ts';

const KEY_A = 'a'.repeat(64);
const KEY_B = 'b'.repeat(64);

/** A cluster row as the clusters area writes it (the secrets API only needs it to exist). */
async function addCluster(t: TestApp, accountId: string, ownerId: string): Promise<string> {
  const id = newId('cluster');
  await t.context.db.prisma.cluster.create({
    data: clusterRow({ id, accountId, ownerId, name: `c-${id.slice(-6)}`, status: 'pending' }),
  });
  return id;
}

describe('cluster secrets API', () => {
  let t: TestApp;
  let clock: ManualClock;
  let cluster: string;
  let dev: TestMember;
  let revealer: TestMember;
  let stranger: TestMember;
  const base = () => `/v1/clusters/${cluster}/secrets`;

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-11-24T10:00:00Z'));
    t = await createTestApp({ clock, env: { ANVIL_SECRET_KEY: KEY_A } });
    cluster = await addCluster(t, t.accountId, t.userId);
    dev = await addMember(t, { role: 'developer' });
    revealer = await addMember(t, { role: 'developer' });
    const grant = await call(t, {
      method: 'POST',
      url: `/v2/accounts/permissions/${revealer.userId}/grant`,
      payload: { permissions: ['manage_security'], scopes: ['security'], reason: 'secret reveal test' },
    });
    expect(grant.statusCode).toBe(201);
    stranger = await addAccount(t, 'Stranger');
  });
  afterAll(async () => t.close());

  const create = (payload: Record<string, unknown>, key?: TestMember) =>
    call(t, { method: 'POST', url: base(), payload, ...(key ? { key } : {}) });

  it('creates a secret, answers it without the value and stores only ciphertext', async () => {
    const value = 'hf_live_0123456789abcdef';
    const res = await create({
      name: 'hf-token',
      description: 'Hugging Face token',
      type: 'api_key',
      category: 'ml_services',
      value,
      environment_variable: 'HF_TOKEN',
      tags: ['ml', 'hf'],
      rotation_policy: { enabled: true, rotation_interval_days: 30, notification_days_before: 7 },
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body.success).toBe(true);
    expect(body.meta.request_id).toBeTruthy();
    expect(body.data).not.toHaveProperty('value');
    expect(res.body).not.toContain(value);
    expect(body.data).toMatchObject({
      name: 'hf-token',
      type: 'api_key',
      category: 'ml_services',
      environment_variable: 'HF_TOKEN',
      file_path: null,
      encrypted: true,
      permissions: { read_only: true, allowed_users: [], allowed_roles: [], file_mode: '0400' },
      usage_statistics: { last_accessed: null, access_count: 0 },
      rotation_policy: {
        enabled: true,
        rotation_interval_days: 30,
        notification_days_before: 7,
        last_rotation: null,
        next_rotation: '2026-12-24T10:00:00.000Z',
      },
      tags: ['ml', 'hf'],
    });

    const rows = await t.context.db.sql.query<{ sealed_value: string }>(
      'SELECT sealed_value FROM cluster_secrets WHERE cluster_id = $1 AND name = $2',
      [cluster, 'hf-token'],
    );
    const raw = rows[0]!.sealed_value;
    expect(raw).not.toBe(value);
    expect(raw).not.toContain(value);
    expect(raw).not.toContain(Buffer.from(value).toString('base64').slice(0, 12));
    expect(SecretBox.isSealed(raw)).toBe(true);
  });

  it('refuses a second secret with the same name, and clashing variables or files', async () => {
    const again = await create({ name: 'hf-token', type: 'api_key', value: 'x' });
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ success: false, error: { code: 'SECRET_ALREADY_EXISTS' } });
    const sameVar = await create({
      name: 'other',
      type: 'generic',
      value: 'x',
      environment_variable: 'HF_TOKEN',
    });
    expect(sameVar.statusCode).toBe(409);
    expect(sameVar.json().error).toMatchObject({
      code: 'CONFLICT',
      details: { field: 'environment_variable' },
    });
  });

  it('validates paths, modes, rotation and required fields', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ name: 'f', type: 'file', value: 'x', file_path: 'relative/path' }, 'file_path'],
      [{ name: 'f', type: 'file', value: 'x', file_path: '/etc/../shadow' }, 'file_path'],
      [{ name: 'f', type: 'file', value: 'x', file_path: '/run/secrets/' }, 'file_path'],
      [{ name: 'f', type: 'file', value: 'x', permissions: { file_mode: '0999' } }, 'permissions.file_mode'],
      [{ name: 'f', type: 'file', value: 'x', rotation_policy: { enabled: true } }, 'rotation_policy'],
      [{ name: 'f', type: 'file' }, 'value'],
      [{ name: 'f', value: 'x' }, 'type'],
      [{ type: 'generic', value: 'x' }, 'name'],
      [{ name: 'f', type: 'generic', value: 'x', environment_variable: 'BAD-NAME' }, 'environment_variable'],
      [
        { name: 'f', type: 'generic', value: 'x', environment_variable: 'NVIDIA_VISIBLE_DEVICES' },
        'environment_variable',
      ],
      [{ name: 'f', type: 'file', value: 'x', file_path: '/proc/self/environ' }, 'file_path'],
    ];
    for (const [payload, field] of cases) {
      const res = await create(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
      expect(res.json().error.details.field).toContain(field);
    }
  });

  it('gets metadata without the value, and the value only with include_value and the permission', async () => {
    const plain = await call(t, { url: `${base()}/hf-token` });
    expect(plain.statusCode).toBe(200);
    expect(plain.json().data).not.toHaveProperty('value');

    // A developer reads metadata but lacks the elevated permission.
    const devPlain = await call(t, { url: `${base()}/hf-token`, key: dev });
    expect(devPlain.statusCode).toBe(200);
    const devReveal = await call(t, { url: `${base()}/hf-token?include_value=true`, key: dev });
    expect(devReveal.statusCode).toBe(403);
    expect(devReveal.json()).toMatchObject({ success: false, error: { code: 'INSUFFICIENT_PERMISSIONS' } });
    expect(devReveal.body).not.toContain('hf_live');
    const devList = await call(t, { url: `${base()}?include_values=true`, key: dev });
    expect(devList.statusCode).toBe(403);

    clock.advance(60_000);
    const owner = await call(t, { url: `${base()}/hf-token?include_value=true` });
    expect(owner.statusCode).toBe(200);
    expect(owner.json().data.value).toBe('hf_live_0123456789abcdef');
    expect(owner.json().data.usage_statistics).toEqual({
      access_count: 1,
      last_accessed: '2026-11-24T10:01:00.000Z',
    });
    const granted = await call(t, { url: `${base()}/hf-token?include_value=true`, key: revealer });
    expect(granted.statusCode).toBe(200);
    expect(granted.json().data.value).toBe('hf_live_0123456789abcdef');
    expect(granted.json().data.usage_statistics.access_count).toBe(2);
  });

  it('honours allowed_users and allowed_roles of a secret', async () => {
    const res = await create({
      name: 'db-password',
      type: 'database',
      category: 'databases',
      value: 'pg-s3cret',
      file_path: '/run/secrets/db/password',
      permissions: { allowed_users: [revealer.userId], file_mode: '0440', read_only: false },
    });
    expect(res.statusCode).toBe(201);
    expect(res.json().data.permissions).toEqual({
      read_only: false,
      allowed_users: [revealer.userId],
      allowed_roles: [],
      file_mode: '0440',
    });
    const owner = await call(t, { url: `${base()}/db-password?include_value=true` });
    expect(owner.statusCode).toBe(403);
    const listed = await call(t, { url: `${base()}/db-password?include_value=true`, key: revealer });
    expect(listed.json().data.value).toBe('pg-s3cret');

    // In a list, a secret the caller may not read comes without its value.
    const list = await call(t, { url: `${base()}?include_values=true` });
    expect(list.statusCode).toBe(200);
    const byName = Object.fromEntries(list.json().data.secrets.map((s: { name: string }) => [s.name, s]));
    expect(byName['hf-token'].value).toBe('hf_live_0123456789abcdef');
    expect(byName['db-password']).not.toHaveProperty('value');

    const byRole = await call(t, {
      method: 'PUT',
      url: `${base()}/db-password`,
      payload: { permissions: { allowed_users: [], allowed_roles: ['owner'] } },
    });
    expect(byRole.statusCode).toBe(200);
    expect((await call(t, { url: `${base()}/db-password?include_value=true` })).statusCode).toBe(200);
    expect(
      (await call(t, { url: `${base()}/db-password?include_value=true`, key: revealer })).statusCode,
    ).toBe(403);
  });

  it('lists with filters, total_count and secret_types', async () => {
    await create({
      name: 'aws-creds',
      type: 'cloud_provider',
      category: 'cloud_providers',
      value: 'AKIA',
      tags: ['aws'],
    });
    const all = (await call(t, { url: base() })).json().data;
    expect(all.total_count).toBe(3);
    expect(all.secret_types).toEqual({ api_key: 1, database: 1, cloud_provider: 1 });
    expect(all.secrets.map((s: { name: string }) => s.name)).toEqual([
      'aws-creds',
      'db-password',
      'hf-token',
    ]);
    for (const s of all.secrets) expect(s).not.toHaveProperty('value');

    const byType = (await call(t, { url: `${base()}?type=database` })).json().data;
    expect(byType.secrets.map((s: { name: string }) => s.name)).toEqual(['db-password']);
    const byCategory = (await call(t, { url: `${base()}?category=ml_services` })).json().data;
    expect(byCategory.secrets.map((s: { name: string }) => s.name)).toEqual(['hf-token']);
    const bySearch = (await call(t, { url: `${base()}?search=HUGGING` })).json().data;
    expect(bySearch.secrets.map((s: { name: string }) => s.name)).toEqual(['hf-token']);
    const byTag = (await call(t, { url: `${base()}?search=aws` })).json().data;
    expect(byTag.secrets.map((s: { name: string }) => s.name)).toEqual(['aws-creds']);
    expect(byTag.secret_types).toEqual({ cloud_provider: 1 });
  });

  it('updates: a new value is a rotation and recomputes next_rotation', async () => {
    clock.set('2026-11-30T00:00:00Z');
    const res = await call(t, {
      method: 'PUT',
      url: `${base()}/hf-token`,
      payload: { value: 'hf_live_rotated', rotation_policy: { rotation_interval_days: 10 } },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().data).not.toHaveProperty('value');
    expect(res.json().data.rotation_policy).toEqual({
      enabled: true,
      rotation_interval_days: 10,
      notification_days_before: 7,
      last_rotation: '2026-11-30T00:00:00.000Z',
      next_rotation: '2026-12-10T00:00:00.000Z',
    });
    const revealed = await call(t, { url: `${base()}/hf-token?include_value=true` });
    expect(revealed.json().data.value).toBe('hf_live_rotated');

    const off = await call(t, {
      method: 'PUT',
      url: `${base()}/hf-token`,
      payload: { rotation_policy: null },
    });
    expect(off.json().data.rotation_policy).toMatchObject({ enabled: false, next_rotation: null });
    const renamed = await call(t, { method: 'PUT', url: `${base()}/hf-token`, payload: { name: 'x' } });
    expect(renamed.statusCode).toBe(400);
    const missing = await call(t, { method: 'PUT', url: `${base()}/nope`, payload: { value: 'x' } });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('SECRET_NOT_FOUND');
  });

  it("hides another account's cluster and its secrets (404) and refuses writes to viewers", async () => {
    for (const [method, url] of [
      ['GET', base()],
      ['GET', `${base()}/hf-token?include_value=true`],
      ['PUT', `${base()}/hf-token`],
      ['DELETE', `${base()}/hf-token`],
    ] as const) {
      const res = await call(t, {
        method,
        url,
        key: stranger,
        ...(method === 'PUT' ? { payload: { value: 'stolen' } } : {}),
      });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.json().error.code).toBe('CLUSTER_NOT_FOUND');
    }
    const post = await create({ name: 'planted', type: 'generic', value: 'x' }, stranger);
    expect(post.statusCode).toBe(404);
    // The stranger's own cluster of the same account layout does not see ours either.
    const theirs = await addCluster(t, stranger.accountId, stranger.userId);
    const own = await call(t, { url: `/v1/clusters/${theirs}/secrets`, key: stranger });
    expect(own.json().data.total_count).toBe(0);

    const viewer = await addMember(t, { role: 'viewer' });
    expect((await call(t, { url: base(), key: viewer })).statusCode).toBe(200);
    const write = await create({ name: 'v', type: 'generic', value: 'x' }, viewer);
    expect(write.statusCode).toBe(403);
    const revealed = await call(t, { url: `${base()}/hf-token?include_value=true` });
    expect(revealed.json().data.value).toBe('hf_live_rotated');
  });

  it('deletes a secret', async () => {
    const res = await call(t, { method: 'DELETE', url: `${base()}/aws-creds` });
    expect(res.statusCode).toBe(200);
    expect(res.json().data).toMatchObject({ name: 'aws-creds', deleted: true });
    const gone = await call(t, { url: `${base()}/aws-creds` });
    expect(gone.statusCode).toBe(404);
    expect(gone.json()).toMatchObject({ success: false, error: { code: 'SECRET_NOT_FOUND' } });
    expect((await call(t, { method: 'DELETE', url: `${base()}/aws-creds` })).statusCode).toBe(404);
  });

  it('fills secretEnv and files of cluster workloads only, leaving out expired secrets', async () => {
    await create({
      name: 'expired',
      type: 'generic',
      value: 'old',
      environment_variable: 'OLD_ONE',
      expiration_date: '2026-11-01T00:00:00Z',
    });
    const resolve = secretSpecResolver(t.context.secrets, testLogger());
    const spec = { workloadId: cluster, image: 'x', env: { A: 'b' } } as unknown as WorkloadSpec;
    const workload = { id: cluster, kind: 'cluster' as const, ownerAccountId: t.accountId, hostId: 'host_x' };
    const resolved = await resolve(spec, workload);
    expect(resolved.env).toEqual({ A: 'b' });
    expect(resolved.secretEnv).toEqual({ HF_TOKEN: 'hf_live_rotated' });
    expect(resolved.files).toEqual([
      {
        path: '/run/secrets/db/password',
        mode: 0o440,
        contentBase64: Buffer.from('pg-s3cret').toString('base64'),
      },
    ]);
    expect(await resolve(spec, { ...workload, kind: 'endpoint_worker' })).toBe(spec);
    // Another account's workload with this id gets nothing.
    const foreign = await resolve(spec, { ...workload, ownerAccountId: stranger.accountId });
    expect(foreign.secretEnv).toBeUndefined();
  });

  it('re-seals values under the current key after key rotation', async () => {
    const rotated = new SecretService({
      db: t.context.db,
      clock,
      access: t.context.accounts.access,
      clusters: new ClusterAccess(t.context.db, t.context.accounts.access),
      box: () => new SecretBox(Buffer.from(KEY_B, 'hex'), [Buffer.from(KEY_A, 'hex')]),
    });
    const before = await t.context.db.prisma.clusterSecret.findMany({ where: { clusterId: cluster } });
    expect(await rotated.reseal()).toBe(before.length);
    expect(await rotated.reseal()).toBe(0);
    const keyB = new SecretBox(Buffer.from(KEY_B, 'hex'));
    const after = await t.context.db.prisma.clusterSecret.findMany({ where: { clusterId: cluster } });
    for (const row of after) {
      expect(row.sealedValue.split('.')[1]).toBe(keyB.keyId);
      expect(keyB.needsReseal(row.sealedValue)).toBe(false);
    }
    const hf = after.find((r) => r.name === 'hf-token')!;
    expect(rotated.openForInjection(hf)).toBe('hf_live_rotated');
  });
});

describe('secret values in logs', () => {
  it('never appear in the logs of requests that carry or reveal them, even at trace level', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const t = await createTestApp({ env: { ANVIL_SECRET_KEY: KEY_A }, logger: createLogger('trace', sink) });
    try {
      const cluster = await addCluster(t, t.accountId, t.userId);
      const value = 'never-logged-7f3a9c';
      const url = `/v1/clusters/${cluster}/secrets`;
      expect(
        (await call(t, { method: 'POST', url, payload: { name: 'n', type: 'generic', value } })).statusCode,
      ).toBe(201);
      // A refused body (unknown field) and a conflicting one still carry the value.
      await call(t, { method: 'POST', url, payload: { name: 'n', type: 'generic', value, bogus: 1 } });
      await call(t, { method: 'POST', url, payload: { name: 'n', type: 'generic', value } });
      await call(t, { method: 'PUT', url: `${url}/n`, payload: { value: `${value}-2` } });
      expect((await call(t, { url: `${url}/n?include_value=true` })).json().data.value).toBe(`${value}-2`);
      await call(t, { url: `${url}?include_values=true` });
      const log = lines.join('');
      expect(log).toContain('incoming request');
      expect(log).not.toContain(value);
      expect(log).not.toContain(Buffer.from(value).toString('base64').slice(0, 16));
    } finally {
      await t.close();
    }
  });
});
