import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { addMember, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

const HOUR = 3_600_000;

/**
 * The role limitation maxComputeHours over real HTTP: GPU-hours the member used this month (metered:
 * closed sessions and open ones up to now) stop new placement once they reach the limit; running work
 * goes on; the permission check answers the limits and what is used and left.
 */
describe('maxComputeHours', () => {
  let t: TestApp;
  let clock: ManualClock;
  let base: string;
  let capped: TestMember;

  beforeEach(async () => {
    clock = new ManualClock(new Date('2026-11-10T08:00:00Z'));
    t = await createTestApp({ clock });
    base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    await insertSimulatedHosts(t.context.db, { prefix: 'ch', count: 1, gpusPerHost: 4 });
    await t.context.clusters.prices.set({ H100: 2 });
    const role = await http('POST', '/v2/accounts/permissions/roles', t.ownerKey, {
      name: 'gpu_capped',
      displayName: 'GPU capped',
      permissions: ['read', 'write', 'execute'],
      scopes: ['clusters', 'endpoints'],
      limitations: { maxComputeHours: 2 },
    });
    expect(role.status, JSON.stringify(role.body)).toBe(201);
    capped = await addMember(t, { role: 'role_custom_gpu_capped', name: 'Cap' });
  });
  afterEach(async () => t.close());

  async function http(method: string, path: string, key: string, body?: unknown) {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    // biome-ignore lint/suspicious/noExplicitAny: JSON answers are read field by field here.
    return { status: res.status, body: (await res.json()) as any };
  }
  const createCluster = (name: string) =>
    http('POST', '/v1/clusters', capped.key, { name, docker_image: 'busybox', gpu_type: 'H100' });
  const check = async () =>
    (
      await http('POST', '/v2/accounts/permissions/check', capped.key, {
        permission: 'write',
        scope: 'clusters',
      })
    ).body;

  it('refuses new placement once the month’s GPU-hours reach the limit; running work goes on and says why', async () => {
    const first = await createCluster('first');
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    const id = first.body.data.id as string;
    // The agent reported it running: its billing session starts (as the cluster supervisor records it).
    await t.context.db.prisma.cluster.update({
      where: { id },
      data: { status: 'running', sessionStartedAt: clock.now() },
    });
    expect((await check()).details.limitations).toMatchObject({
      maxComputeHours: 2,
      usedComputeHours: 0,
      remainingComputeHours: 2,
      computePeriodEnd: '2026-12-01T00:00:00.000Z',
      maxExecutionsPerHour: 500,
      remainingExecutions: 500,
    });

    clock.advance(1.5 * HOUR);
    expect((await createCluster('second')).status).toBe(201);

    clock.advance(HOUR); // 2.5 GPU-hours on the open session now
    const refused = await createCluster('third');
    expect(refused.status).toBe(403);
    // /v1 answers the wrapped error shape.
    expect(refused.body.error).toMatchObject({
      code: 'LIMIT_EXCEEDED',
      details: { limit: 'maxComputeHours', max: 2, current: 2.5, periodEnd: '2026-12-01T00:00:00.000Z' },
    });
    const endpoint = await http('POST', '/v2/endpoints', capped.key, {
      name: 'ep',
      image: 'busybox',
      gpuType: 'H100',
    });
    expect(endpoint.status).toBe(403);
    expect(endpoint.body.error).toBe('LIMIT_EXCEEDED');
    expect(await t.context.db.prisma.cluster.count({ where: { name: 'third' } })).toBe(0);
    // The running cluster is not stopped.
    const running = await http('GET', `/v1/clusters/${id}`, capped.key);
    expect(running.body.data.status).toBe('running');
    // ... and says why nothing new of this member starts, in the cluster and in the list.
    expect(running.body.data.status_reason).toMatch(/^compute-hours limit reached: 2\.5 of the 2 GPU-hours/);
    const listed = await http('GET', '/v1/clusters', capped.key);
    const inList = (listed.body.data.clusters as { id: string; status_reason: string | null }[]).find(
      (c) => c.id === id,
    );
    expect(inList?.status_reason).toContain('maxComputeHours');
    expect((await check()).details.limitations).toMatchObject({
      usedComputeHours: 2.5,
      remainingComputeHours: 0,
    });
    // Other members are not limited by this role; a new month starts afresh.
    expect(
      (
        await http('POST', '/v1/clusters', t.ownerKey, {
          name: 'owners',
          docker_image: 'busybox',
          gpu_type: 'H100',
        })
      ).status,
    ).toBe(201);
    await t.context.db.prisma.cluster.update({
      where: { id },
      data: { status: 'stopped', sessionStartedAt: null },
    });
    clock.set('2026-12-01T00:00:01Z');
    expect((await createCluster('december')).status).toBe(201);
  });
});
