import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { type AllocationOutcome, Allocator } from './allocator.ts';
import { driftedHosts } from './capacity.ts';
import type { GpuType } from './gpu-types.ts';
import type { PlacementRequest } from './placement.ts';
import { reservationOf } from './reservations.ts';
import { insertSimulatedHosts } from './simulated-hosts.ts';

/**
 * The allocator against a real database (PGlite, and PostgreSQL in the postgres project, where parallel
 * placements really run at once on separate connections). Hosts and clusters are rows inserted directly.
 */

interface ClusterRow {
  id: string;
  gpuType?: GpuType;
  gpuCount?: number;
  cpuCores?: number;
  memoryGb?: number;
  storageGb?: number;
  region?: string | null;
  status?: string;
  hostId?: string | null;
  gpuIndices?: number[];
  /** Seconds after a fixed origin: the queue order. */
  age?: number;
}

let sequence = 0;

export async function insertCluster(db: Database, row: ClusterRow): Promise<PlacementRequest> {
  sequence += 1;
  const createdAt = new Date(Date.UTC(2026, 0, 1) + (row.age ?? sequence) * 1000);
  await db.sql.query(
    `INSERT INTO clusters (id, account_id, owner_id, name, status, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb,
                           region, host_id, gpu_indices, docker_image, command, created_at, updated_at)
     VALUES ($1, 'acc_t', 'usr_t', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10::int[], 'busybox', '{}', $11, $11)`,
    [
      row.id,
      row.status ?? 'pending',
      row.gpuType ?? 'H100',
      row.gpuCount ?? 1,
      row.cpuCores ?? 1,
      row.memoryGb ?? 1,
      row.storageGb ?? 1,
      row.region ?? null,
      row.hostId ?? null,
      `{${(row.gpuIndices ?? []).join(',')}}`,
      createdAt,
    ],
  );
  return {
    gpuType: row.gpuType ?? 'H100',
    gpuCount: row.gpuCount ?? 1,
    cpuCores: row.cpuCores ?? 1,
    memoryGb: row.memoryGb ?? 1,
    storageGb: row.storageGb ?? 1,
    region: row.region ?? null,
    hostId: row.hostId ?? null,
  };
}

async function release(db: Database, allocator: Allocator, clusterId: string): Promise<void> {
  await db.prisma.$transaction((tx) => allocator.release(tx, clusterId));
}

function placedOn(outcome: AllocationOutcome): string {
  if (outcome.kind !== 'placed') throw new Error(`expected placed, got ${JSON.stringify(outcome)}`);
  return `${outcome.placement.hostId}:${outcome.placement.gpus.map((g) => g.index).join(',')}`;
}

async function freeIndices(db: Database): Promise<Record<string, number[]>> {
  const rows = await db.sql.query<{ host_id: string; gpu_type: string; free_indices: number[] }>(
    'SELECT host_id, gpu_type, free_indices FROM host_capacity ORDER BY host_id, gpu_type',
  );
  return Object.fromEntries(rows.map((r) => [`${r.host_id}/${r.gpu_type}`, r.free_indices]));
}

describe('allocator', () => {
  let database: TestDatabase;
  let db: Database;
  let allocator: Allocator;

  beforeEach(async () => {
    database = await createTestDatabase();
    db = database.db;
    allocator = new Allocator(db, systemClock);
  });

  afterEach(async () => {
    await database?.drop();
  });

  it('places best fit on the lowest free indices, prices it, and keeps its rows equal to the allocations', async () => {
    await insertSimulatedHosts(db, { prefix: 'b', count: 2, gpusPerHost: 4, region: 'us-east-1' });
    await db.sql.query(
      `INSERT INTO gpu_prices (gpu_type, hourly_rate, updated_at) VALUES ('H100', 2.5, now())`,
    );
    await allocator.sync();
    const place = async (id: string, gpuCount: number) =>
      placedOn(await allocator.allocate(id, await insertCluster(db, { id, gpuCount })));
    expect(await place('cluster_b1', 1)).toBe('host_sim_b_0:0');
    // The fuller host (3 free) fits 2: best fit keeps host 1 whole.
    expect(await place('cluster_b2', 2)).toBe('host_sim_b_0:1,2');
    expect(await place('cluster_b3', 2)).toBe('host_sim_b_1:0,1');
    expect(await place('cluster_b4', 1)).toBe('host_sim_b_0:3');
    const row = await db.prisma.cluster.findUniqueOrThrow({ where: { id: 'cluster_b2' } });
    expect(row).toMatchObject({
      status: 'starting',
      hostId: 'host_sim_b_0',
      gpuIndices: [1, 2],
      hourlyRate: 5,
      region: 'us-east-1',
    });
    expect(await freeIndices(db)).toEqual({ 'host_sim_b_0/H100': [], 'host_sim_b_1/H100': [2, 3] });
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('never hands out a GPU twice to parallel placements, and concludes busy only when full', async () => {
    await insertSimulatedHosts(db, { prefix: 'p', count: 4, gpusPerHost: 4 });
    await allocator.sync();
    const ids = Array.from({ length: 24 }, (_, i) => `cluster_p${String(i).padStart(2, '0')}`);
    const requests = await Promise.all(ids.map((id) => insertCluster(db, { id })));
    const outcomes = await Promise.all(ids.map((id, i) => allocator.allocate(id, requests[i]!)));
    const rows = await db.prisma.cluster.findMany({ where: { status: 'starting' } });
    const gpus = rows.flatMap((r) => r.gpuIndices.map((i) => `${r.hostId}#${i}`));
    expect(new Set(gpus).size).toBe(16);
    expect(outcomes.filter((o) => o.kind === 'placed')).toHaveLength(16);
    expect(outcomes.filter((o) => o.kind === 'busy')).toHaveLength(8);
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('never hands out a GPU twice to parallel placements of mixed sizes', async () => {
    await insertSimulatedHosts(db, { prefix: 'm', count: 4, gpusPerHost: 4, cpuThreads: 12 });
    await allocator.sync();
    const ids = Array.from({ length: 30 }, (_, i) => `cluster_m${String(i).padStart(2, '0')}`);
    const requests = await Promise.all(
      ids.map((id, i) => insertCluster(db, { id, gpuCount: 1 + (i % 3), cpuCores: 1 + (i % 5) })),
    );
    const outcomes = await Promise.all(ids.map((id, i) => allocator.allocate(id, requests[i]!)));
    const rows = await db.prisma.cluster.findMany({ where: { status: 'starting' } });
    const gpus = rows.flatMap((r) => r.gpuIndices.map((i) => `${r.hostId}#${i}`));
    expect(new Set(gpus).size).toBe(gpus.length);
    expect(rows.every((r) => r.gpuIndices.length === r.gpuCount)).toBe(true);
    expect(outcomes.filter((o) => o.kind === 'placed')).toHaveLength(rows.length);
    expect(outcomes.every((o) => o.kind === 'placed' || o.kind === 'busy')).toBe(true);
    const cpu = await db.sql.query<{ host_id: string; cpu: number }>(
      `SELECT host_id, sum(cpu_cores)::int AS cpu FROM clusters WHERE status = 'starting' GROUP BY host_id`,
    );
    expect(cpu.every((h) => h.cpu <= 12)).toBe(true);
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('never hands out a GPU twice to parallel batches, each placing in order on what the ones before took', async () => {
    await insertSimulatedHosts(db, { prefix: 'q', count: 4, gpusPerHost: 4, cpuThreads: 12 });
    await allocator.sync();
    const ids = Array.from({ length: 30 }, (_, i) => `cluster_q${String(i).padStart(2, '0')}`);
    const requests = await Promise.all(
      ids.map((id, i) => insertCluster(db, { id, gpuCount: 1 + (i % 3), cpuCores: 1 + (i % 5) })),
    );
    // Five batches of six at once, plus one cluster that is gone before its batch runs.
    await db.sql.query(`UPDATE clusters SET status = 'deleting' WHERE id = 'cluster_q07'`);
    const batches = Array.from({ length: 5 }, (_, b) =>
      ids
        .slice(b * 6, b * 6 + 6)
        .map((clusterId) => ({ clusterId, request: requests[ids.indexOf(clusterId)]! })),
    );
    const outcomes = (await Promise.all(batches.map((batch) => allocator.allocateMany(batch)))).flat();
    expect(outcomes[7]).toEqual({ kind: 'gone' });
    const rows = await db.prisma.cluster.findMany({ where: { status: 'starting' } });
    const gpus = rows.flatMap((r) => r.gpuIndices.map((i) => `${r.hostId}#${i}`));
    expect(new Set(gpus).size).toBe(gpus.length);
    expect(rows.every((r) => r.gpuIndices.length === r.gpuCount)).toBe(true);
    expect(outcomes.filter((o) => o.kind === 'placed')).toHaveLength(rows.length);
    expect(outcomes.every((o) => ['placed', 'busy', 'gone'].includes(o.kind))).toBe(true);
    const cpu = await db.sql.query<{ host_id: string; cpu: number }>(
      `SELECT host_id, sum(cpu_cores)::int AS cpu FROM clusters WHERE status = 'starting' GROUP BY host_id`,
    );
    expect(cpu.every((h) => h.cpu <= 12)).toBe(true);
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('joins placements that arrive together into shared statements, never sharing a GPU', async () => {
    await insertSimulatedHosts(db, { prefix: 'j', count: 4, gpusPerHost: 4 });
    await allocator.sync();
    const ids = Array.from({ length: 24 }, (_, i) => `cluster_j${String(i).padStart(2, '0')}`);
    const requests = await Promise.all(ids.map((id) => insertCluster(db, { id })));
    const batches = vi.spyOn(allocator, 'placeInOrder');
    const outcomes = await Promise.all(ids.map((id, i) => allocator.allocateJoined(id, requests[i]!)));
    // The first call goes alone; the 23 that arrived while it ran share one statement.
    expect(batches.mock.calls.map(([items]) => items.length)).toEqual([23]);
    const rows = await db.prisma.cluster.findMany({ where: { status: 'starting' } });
    const gpus = rows.flatMap((r) => r.gpuIndices.map((i) => `${r.hostId}#${i}`));
    expect(new Set(gpus).size).toBe(16);
    expect(outcomes.filter((o) => o.kind === 'placed')).toHaveLength(16);
    expect(outcomes.filter((o) => o.kind === 'busy')).toHaveLength(8);
    // Best fit, in arrival order: the first four fill the first host.
    expect(outcomes.slice(0, 4).map(placedOn)).toEqual([
      'host_sim_j_0:0',
      'host_sim_j_0:1',
      'host_sim_j_0:2',
      'host_sim_j_0:3',
    ]);
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('takes nothing for a cluster that is no longer pending', async () => {
    await insertSimulatedHosts(db, { prefix: 'g', count: 1, gpusPerHost: 2 });
    await allocator.sync();
    const request = await insertCluster(db, { id: 'cluster_g1', status: 'deleting' });
    expect(await allocator.allocate('cluster_g1', request)).toEqual({ kind: 'gone' });
    expect(await freeIndices(db)).toEqual({ 'host_sim_g_0/H100': [0, 1] });
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('answers impossible with the GPU types there are, and busy when capacity is only taken, cordoned or unreachable', async () => {
    await insertSimulatedHosts(db, {
      prefix: 'i',
      count: 2,
      gpusPerHost: 2,
      region: 'us-east-1',
      cpuThreads: 8,
    });
    await allocator.sync();
    const ask = async (id: string, row: Omit<ClusterRow, 'id'>) =>
      allocator.allocate(id, await insertCluster(db, { id, ...row }));
    expect(await ask('cluster_i1', { gpuType: 'T4' })).toEqual({
      kind: 'impossible',
      availableGpuTypes: ['H100'],
    });
    expect(await ask('cluster_i2', { gpuCount: 3 })).toMatchObject({ kind: 'impossible' });
    expect(await ask('cluster_i3', { cpuCores: 9 })).toMatchObject({ kind: 'impossible' });
    expect(await ask('cluster_i4', { region: 'eu-west-1' })).toEqual({
      kind: 'impossible',
      availableGpuTypes: [],
    });
    await db.sql.query(`UPDATE hosts SET cordoned = true WHERE id = 'host_sim_i_0'`);
    await db.sql.query(`UPDATE hosts SET state = 'unreachable' WHERE id = 'host_sim_i_1'`);
    expect(await ask('cluster_i5', {})).toEqual({ kind: 'busy' });
    const queued = await db.prisma.cluster.findUniqueOrThrow({ where: { id: 'cluster_i5' } });
    expect(queued.queuedAt).not.toBeNull();
    // No host is ready to be reserved for it.
    expect(await reservationOf(db, 'cluster_i5')).toBeNull();
    await db.sql.query(`UPDATE hosts SET state = 'ready' WHERE id = 'host_sim_i_1'`);
    expect(placedOn(await allocator.allocate('cluster_i5', await requestOf(db, 'cluster_i5')))).toBe(
      'host_sim_i_1:0',
    );
  });

  it('keeps CPU, memory and disk headroom per host', async () => {
    await insertSimulatedHosts(db, {
      prefix: 'r',
      count: 1,
      gpusPerHost: 4,
      cpuThreads: 8,
      memoryGb: 64,
      diskGb: 100,
    });
    await allocator.sync();
    const ask = async (id: string, row: Omit<ClusterRow, 'id'>) =>
      allocator.allocate(id, await insertCluster(db, { id, ...row }));
    // A refused request is withdrawn at once, so the queue it joined does not hold back the next one.
    const refused = async (id: string, row: Omit<ClusterRow, 'id'>) => {
      const outcome = await ask(id, row);
      await db.sql.query(`UPDATE clusters SET status = 'deleted', deleted_at = now() WHERE id = $1`, [id]);
      return outcome;
    };
    expect(placedOn(await ask('cluster_r1', { cpuCores: 6, memoryGb: 32, storageGb: 60 }))).toBe(
      'host_sim_r_0:0',
    );
    expect(await refused('cluster_r2', { cpuCores: 3 })).toEqual({ kind: 'busy' });
    expect(await refused('cluster_r3', { memoryGb: 33 })).toEqual({ kind: 'busy' });
    expect(await refused('cluster_r4', { storageGb: 41 })).toEqual({ kind: 'busy' });
    expect(placedOn(await ask('cluster_r5', { cpuCores: 2, memoryGb: 32, storageGb: 40 }))).toBe(
      'host_sim_r_0:1',
    );
    await release(db, allocator, 'cluster_r1');
    const [used] = await db.sql.query(
      'SELECT used_cpu_cores, used_memory_gb, used_storage_gb FROM host_allocations',
    );
    expect(used).toEqual({ used_cpu_cores: 2, used_memory_gb: 32, used_storage_gb: 40 });
    expect(placedOn(await ask('cluster_r6', { cpuCores: 6, memoryGb: 32, storageGb: 60 }))).toBe(
      'host_sim_r_0:0',
    );
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('gives GPUs back on release, and hands out nothing another workload holds', async () => {
    await insertSimulatedHosts(db, { prefix: 'w', count: 1, gpusPerHost: 4 });
    await db.sql.query(`INSERT INTO accounts (id, name, updated_at) VALUES ('acc_w', 'w', now())`);
    // An endpoint worker holds GPU 0 (placed by its own area, not through a cluster row).
    await db.sql.query(
      `INSERT INTO workloads (id, host_id, kind, owner_account_id, spec, desired, updated_at)
       VALUES ('wl_endpoint', 'host_sim_w_0', 'endpoint_worker', 'acc_w', '{"gpus":[{"index":0,"uuid":"GPU-sim-w-0-0"}]}', 'running', now())`,
    );
    await allocator.sync();
    expect(await freeIndices(db)).toEqual({ 'host_sim_w_0/H100': [1, 2, 3] });
    const first = await insertCluster(db, { id: 'cluster_w1', gpuCount: 2 });
    expect(placedOn(await allocator.allocate('cluster_w1', first))).toBe('host_sim_w_0:1,2');
    await release(db, allocator, 'cluster_w1');
    expect(await freeIndices(db)).toEqual({ 'host_sim_w_0/H100': [1, 2, 3] });
    // The worker stops: the periodic sync sees the rows drift from what holds GPUs and repairs them.
    await db.sql.query(`UPDATE workloads SET desired = 'stopped' WHERE id = 'wl_endpoint'`);
    expect(await driftedHosts(db)).toEqual(['host_sim_w_0']);
    await allocator.sync();
    expect(await freeIndices(db)).toEqual({ 'host_sim_w_0/H100': [0, 1, 2, 3] });
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('sees hosts that joined since the last sync, and follows inventory changes', async () => {
    await insertSimulatedHosts(db, { prefix: 'j', count: 1, gpusPerHost: 1 });
    await allocator.sync();
    expect(
      placedOn(await allocator.allocate('cluster_j1', await insertCluster(db, { id: 'cluster_j1' }))),
    ).toBe('host_sim_j_0:0');
    // Another host joins; the next create finds it without waiting for the supervisor's sync.
    await insertSimulatedHosts(db, { prefix: 'k', count: 1, gpusPerHost: 2 });
    expect(
      placedOn(await allocator.allocate('cluster_j2', await insertCluster(db, { id: 'cluster_j2' }))),
    ).toBe('host_sim_k_0:0');
    // Its inventory changes (one GPU renamed to A100): the rows follow, allocations kept.
    await db.sql.query(
      `UPDATE hosts SET inventory = jsonb_set(inventory, '{gpus,devices,1,name}', '"NVIDIA A100-SXM4-80GB"')
        WHERE id = 'host_sim_k_0'`,
    );
    await allocator.sync();
    expect(await freeIndices(db)).toEqual({
      'host_sim_j_0/H100': [],
      'host_sim_k_0/A100': [1],
      'host_sim_k_0/H100': [],
    });
    // A deleted host's rows go.
    await db.sql.query(`UPDATE hosts SET deleted_at = now() WHERE id = 'host_sim_j_0'`);
    await allocator.sync();
    expect(Object.keys(await freeIndices(db))).toEqual(['host_sim_k_0/A100', 'host_sim_k_0/H100']);
    expect(await db.sql.query(`SELECT host_id FROM host_allocations ORDER BY host_id`)).toEqual([
      { host_id: 'host_sim_k_0' },
    ]);
  });

  it('never places a younger request ahead of an older queued one of its queue asking for no more', async () => {
    await insertSimulatedHosts(db, { prefix: 'f', count: 2, gpusPerHost: 1 });
    await allocator.sync();
    expect(
      placedOn(await allocator.allocate('cluster_f1', await insertCluster(db, { id: 'cluster_f1' }))),
    ).toBe('host_sim_f_0:0');
    expect(
      placedOn(await allocator.allocate('cluster_f2', await insertCluster(db, { id: 'cluster_f2' }))),
    ).toBe('host_sim_f_1:0');
    const older = await insertCluster(db, { id: 'cluster_f3' });
    expect(await allocator.allocate('cluster_f3', older)).toEqual({ kind: 'busy' });
    // Both hosts were equally far from fitting it: the reservation goes to the first by id.
    expect(await reservationOf(db, 'cluster_f3')).toBe('host_sim_f_0');
    // The GPU of the other, unreserved host frees; the younger request of the same shape waits behind
    // the queued one…
    await release(db, allocator, 'cluster_f2');
    const younger = await insertCluster(db, { id: 'cluster_f4' });
    expect(await allocator.allocate('cluster_f4', younger)).toEqual({ kind: 'busy' });
    // …which gets it.
    expect(placedOn(await allocator.allocate('cluster_f3', older))).toBe('host_sim_f_1:0');
    const f3 = await db.prisma.cluster.findUniqueOrThrow({ where: { id: 'cluster_f3' } });
    expect(f3.queuedAt).toBeNull();
    // Placed elsewhere, its reservation counts for nothing; a request of another region is another queue,
    // not held back by cluster_f4.
    expect(await reservationOf(db, 'cluster_f3')).toBeNull();
    // Its row is cleared by the next capacity sync.
    expect(await db.sql.query(`SELECT host_id FROM host_allocations WHERE reserved_by IS NOT NULL`)).toEqual([
      { host_id: 'host_sim_f_0' },
    ]);
    await allocator.sync();
    expect(await db.sql.query(`SELECT host_id FROM host_allocations WHERE reserved_by IS NOT NULL`)).toEqual(
      [],
    );
    await release(db, allocator, 'cluster_f1');
    await db.sql.query(`UPDATE hosts SET region = 'eu-west-1'`);
    const other = await insertCluster(db, { id: 'cluster_f5', region: 'eu-west-1' });
    expect(placedOn(await allocator.allocate('cluster_f5', other))).toBe('host_sim_f_0:0');
  });

  it('reserves the host whose needed GPUs free soonest by the expires_at of the clusters there', async () => {
    // Three full-ish 4-GPU hosts; the head asks for 2. Host 0 has the most free now (1), but needs a
    // cluster ending in 10 hours; host 1 has none free, but two clusters ending in an hour; host 2 has one
    // free and the rest held by a cluster that runs until stopped (unknown).
    await insertSimulatedHosts(db, { prefix: 'x', count: 3, gpusPerHost: 4 });
    await allocator.sync();
    const hour = 3_600_000;
    const running = async (id: string, host: number, gpuIndices: number[], endsInMs: number | null) => {
      await insertCluster(db, {
        id,
        status: 'running',
        hostId: `host_sim_x_${host}`,
        gpuIndices,
        gpuCount: gpuIndices.length,
      });
      if (endsInMs !== null) {
        await db.sql.query('UPDATE clusters SET expires_at = $2 WHERE id = $1', [
          id,
          new Date(Date.now() + endsInMs),
        ]);
      }
    };
    await running('cluster_x0a', 0, [0, 1, 2], 10 * hour);
    await running('cluster_x1a', 1, [0], hour);
    await running('cluster_x1b', 1, [1], hour);
    await running('cluster_x1c', 1, [2, 3], 30 * hour);
    await running('cluster_x2a', 2, [0, 1, 2], null);
    await allocator.sync();
    const head = await insertCluster(db, { id: 'cluster_xhead', gpuCount: 2 });
    expect(await allocator.allocate('cluster_xhead', head)).toEqual({ kind: 'busy' });
    expect(await reservationOf(db, 'cluster_xhead')).toBe('host_sim_x_1');

    // Host 1's clusters lose their end time: now host 0 (known, 10 hours) goes before host 2 (unknown).
    await db.sql.query(`UPDATE clusters SET expires_at = NULL WHERE id IN ('cluster_x1a', 'cluster_x1b')`);
    await db.sql.query('UPDATE host_allocations SET reserved_by = NULL');
    expect(await allocator.allocate('cluster_xhead', head)).toEqual({ kind: 'busy' });
    expect(await reservationOf(db, 'cluster_xhead')).toBe('host_sim_x_0');

    // No end times anywhere: the most free GPUs now, then host id (hosts 0 and 2 have one each).
    await db.sql.query(`UPDATE clusters SET expires_at = NULL`);
    await db.sql.query('UPDATE host_allocations SET reserved_by = NULL');
    expect(await allocator.allocate('cluster_xhead', head)).toEqual({ kind: 'busy' });
    expect(await reservationOf(db, 'cluster_xhead')).toBe('host_sim_x_0');
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('reserves a host for the head of a queue: GPUs that free there wait for it, across a restart', async () => {
    await insertSimulatedHosts(db, { prefix: 's', count: 1, gpusPerHost: 8 });
    await allocator.sync();
    const small = Array.from({ length: 8 }, (_, i) => `cluster_s${i}`);
    for (const id of small) {
      expect((await allocator.allocate(id, await insertCluster(db, { id }))).kind).toBe('placed');
    }
    const big = await insertCluster(db, { id: 'cluster_big', gpuCount: 8 });
    expect(await allocator.allocate('cluster_big', big)).toEqual({ kind: 'busy' });
    expect(await reservationOf(db, 'cluster_big')).toBe('host_sim_s_0');

    // Small clusters keep arriving while the old ones end, one at a time; a fresh allocator (a restarted
    // control plane, or another replica) honours the reservation: it lives in the database.
    let live = new Allocator(db, systemClock);
    const waiting: string[] = [];
    for (const [n, id] of small.entries()) {
      await release(db, live, id);
      const arrival = `cluster_late${n}`;
      waiting.push(arrival);
      expect(await live.allocate(arrival, await insertCluster(db, { id: arrival }))).toEqual({
        kind: 'busy',
      });
      for (const queued of waiting) {
        expect(await live.allocate(queued, await requestOf(db, queued))).toMatchObject({ kind: 'busy' });
      }
      if (n < 7) expect(await live.allocate('cluster_big', big)).toEqual({ kind: 'busy' });
      live = new Allocator(db, systemClock);
    }
    // All 8 free: the big one is placed, its reservation is gone, and the small ones queued behind wait.
    expect(placedOn(await live.allocate('cluster_big', big))).toBe('host_sim_s_0:0,1,2,3,4,5,6,7');
    expect(await reservationOf(db, 'cluster_big')).toBeNull();
    expect(await db.sql.query('SELECT reserved_by FROM host_allocations')).toEqual([{ reserved_by: null }]);
    for (const queued of waiting) {
      expect(await live.allocate(queued, await requestOf(db, queued))).toEqual({ kind: 'busy' });
    }
    // They are placed, oldest first, once it ends.
    await release(db, live, 'cluster_big');
    await db.sql.query(`UPDATE clusters SET status = 'deleted', deleted_at = now() WHERE id = 'cluster_big'`);
    for (const queued of waiting) {
      expect((await live.allocate(queued, await requestOf(db, queued))).kind).toBe('placed');
    }
    expect(await driftedHosts(db)).toEqual([]);
  });

  it('lets other requests take only what a reservation does not need, and drops it when its cluster goes', async () => {
    await insertSimulatedHosts(db, { prefix: 'v', count: 2, gpusPerHost: 4, cpuThreads: 16 });
    await allocator.sync();
    // Host 0: 3 of 4 taken; host 1: 2 of 4 taken.
    await allocator.allocate('cluster_v1', await insertCluster(db, { id: 'cluster_v1', gpuCount: 3 }));
    await allocator.allocate('cluster_v2', await insertCluster(db, { id: 'cluster_v2', gpuCount: 2 }));
    expect(await freeIndices(db)).toEqual({ 'host_sim_v_0/H100': [3], 'host_sim_v_1/H100': [2, 3] });
    // A 4-GPU request cannot fit: it reserves the host with the most free GPUs of its type (host 1).
    const big = await insertCluster(db, { id: 'cluster_vbig', gpuCount: 4, cpuCores: 10 });
    expect(await allocator.allocate('cluster_vbig', big)).toEqual({ kind: 'busy' });
    expect(await reservationOf(db, 'cluster_vbig')).toBe('host_sim_v_1');
    // A 1-GPU request takes host 0's last GPU; the next one finds free GPUs only on the reserved host,
    // and the reservation needs them: busy.
    expect(
      placedOn(await allocator.allocate('cluster_v3', await insertCluster(db, { id: 'cluster_v3' }))),
    ).toBe('host_sim_v_0:3');
    expect(await allocator.allocate('cluster_v4', await insertCluster(db, { id: 'cluster_v4' }))).toEqual({
      kind: 'busy',
    });
    // The reserved cluster is deleted: its reservation counts for nothing at once.
    await db.sql.query(`UPDATE clusters SET status = 'deleting' WHERE id = 'cluster_vbig'`);
    expect(await reservationOf(db, 'cluster_vbig')).toBeNull();
    expect(placedOn(await allocator.allocate('cluster_v4', await requestOf(db, 'cluster_v4')))).toBe(
      'host_sim_v_1:2',
    );
    // And the release of its delete clears the row.
    await release(db, allocator, 'cluster_vbig');
    expect(
      await db.sql.query('SELECT count(*)::int AS n FROM host_allocations WHERE reserved_by IS NOT NULL'),
    ).toEqual([{ n: 0 }]);
  });
});

async function requestOf(db: Database, id: string): Promise<PlacementRequest> {
  const c = await db.prisma.cluster.findUniqueOrThrow({ where: { id } });
  return {
    gpuType: c.gpuType as GpuType,
    gpuCount: c.gpuCount,
    cpuCores: c.cpuCores,
    memoryGb: c.memoryGb,
    storageGb: c.storageGb,
    region: c.region,
    hostId: null,
  };
}
