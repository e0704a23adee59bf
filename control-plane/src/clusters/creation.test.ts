import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { systemClock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { validSpec } from '../fleet/workloads/workloads.ts';
import { Allocator } from '../scheduler/allocator.ts';
import { driftedHosts } from '../scheduler/capacity.ts';
import type { PlacementRequest } from '../scheduler/placement.ts';
import { insertSimulatedHosts } from '../scheduler/simulated-hosts.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { ClusterCreation, type CreateOutcome, clusterDraft, type NewCluster } from './creation.ts';
import { workloadSpecOf } from './service.ts';

/**
 * The create statement against a real database (PGlite, and PostgreSQL in the postgres project, where
 * parallel creates really run at once on separate connections): registered, inserted and placed in one
 * statement, or nothing written.
 */

function newCluster(id: string): NewCluster {
  return {
    id,
    accountId: 'acc_c',
    ownerId: 'usr_c',
    name: id,
    description: null,
    projectId: null,
    templateId: null,
    dockerImage: 'busybox',
    command: [],
    env: {},
    ports: [],
    sshEnabled: false,
    expiresAt: null,
    createdAt: new Date(),
  };
}

function requestOf(gpuCount: number, cpuCores = 1, hostId: string | null = null): PlacementRequest {
  return { gpuType: 'H100', gpuCount, cpuCores, memoryGb: 1, storageGb: 1, region: null, hostId };
}

describe('cluster creation in one statement', () => {
  let database: TestDatabase;
  let db: Database;
  let creation: ClusterCreation;

  beforeEach(async () => {
    database = await createTestDatabase();
    db = database.db;
    creation = new ClusterCreation(db);
    await db.sql.query(
      `INSERT INTO accounts (id, name, created_at, updated_at) VALUES ('acc_c', 'creation', now(), now())`,
    );
  });

  afterEach(async () => {
    await database?.drop();
  });

  const create = (id: string, request: PlacementRequest, placedOnly = false): Promise<CreateOutcome> => {
    const cluster = newCluster(id);
    const draft = clusterDraft(cluster, request);
    return creation.create(cluster, {
      request,
      spec: validSpec(id, workloadSpecOf(draft, [])),
      pendingReason: 'waiting for GPUs',
      region: request.region,
      placedOnly,
    });
  };

  it('never hands out a GPU twice to parallel creates of mixed sizes; what does not fit now is pending', async () => {
    await insertSimulatedHosts(db, { prefix: 'c', count: 4, gpusPerHost: 4, cpuThreads: 12 });
    await new Allocator(db, systemClock).sync();
    const ids = Array.from({ length: 30 }, (_, i) => `cluster_c${String(i).padStart(2, '0')}`);
    const outcomes = await Promise.all(ids.map((id, i) => create(id, requestOf(1 + (i % 3), 1 + (i % 5)))));
    expect(outcomes.every((o) => o.kind === 'placed' || o.kind === 'pending')).toBe(true);

    const rows = await db.prisma.cluster.findMany({ orderBy: { id: 'asc' } });
    expect(rows.map((r) => r.id)).toEqual(ids);
    const placed = rows.filter((r) => r.status === 'starting');
    const gpus = placed.flatMap((r) => r.gpuIndices.map((i) => `${r.hostId}#${i}`));
    expect(new Set(gpus).size).toBe(gpus.length);
    expect(placed.every((r) => r.gpuIndices.length === r.gpuCount)).toBe(true);
    expect(outcomes.filter((o) => o.kind === 'placed')).toHaveLength(placed.length);
    expect(placed.length).toBeGreaterThan(0);
    const cpu = await db.sql.query<{ host_id: string; cpu: number }>(
      `SELECT host_id, sum(cpu_cores)::int AS cpu FROM clusters WHERE status = 'starting' GROUP BY host_id`,
    );
    expect(cpu.every((h) => h.cpu <= 12)).toBe(true);
    expect(await driftedHosts(db)).toEqual([]);

    // Each placed cluster's workload went with it, with the GPUs (and their inventory UUIDs) it holds.
    const workloads = await db.prisma.workload.findMany({ orderBy: { id: 'asc' } });
    expect(workloads.map((w) => w.id)).toEqual(placed.map((r) => r.id));
    for (const [i, cluster] of placed.entries()) {
      const host = cluster.hostId!.replace('host_sim_c_', 'c-');
      const expected = cluster.gpuIndices.map((index) => ({ index, uuid: `GPU-sim-${host}-${index}` }));
      expect((workloads[i]!.spec as { gpus: unknown }).gpus).toEqual(expected);
      const outcome = outcomes[ids.indexOf(cluster.id)]!;
      expect(outcome.kind === 'placed' && outcome.placement).toEqual({
        hostId: cluster.hostId,
        gpus: expected,
      });
    }
    // Every create was registered in the resource directory and recorded for activity reports.
    expect(await db.prisma.resource.count({ where: { type: 'cluster', ownerId: 'usr_c' } })).toBe(30);
    expect(await db.prisma.activityEvent.count({ where: { kind: 'resource_created' } })).toBe(30);
    for (const row of rows.filter((r) => r.status !== 'starting')) {
      expect(row).toMatchObject({ status: 'pending', statusReason: 'waiting for GPUs', hostId: null });
    }
  });

  it('writes nothing for a cluster no host could ever fit, nor for a pinned one its host has no room for', async () => {
    const [host] = await insertSimulatedHosts(db, { prefix: 'n', count: 1, gpusPerHost: 2 });
    await new Allocator(db, systemClock).sync();
    expect(await create('cluster_n0', requestOf(4))).toEqual({ kind: 'refused', couldFit: false });
    expect(await create('cluster_n1', requestOf(2, 1, host!))).toMatchObject({ kind: 'placed' });
    expect(await create('cluster_n2', requestOf(1, 1, host!), true)).toEqual({
      kind: 'refused',
      couldFit: true,
    });
    expect((await db.prisma.cluster.findMany()).map((r) => r.id)).toEqual(['cluster_n1']);
    expect((await db.prisma.resource.findMany()).map((r) => r.id)).toEqual(['cluster_n1']);
    expect((await db.prisma.workload.findMany()).map((r) => r.id)).toEqual(['cluster_n1']);
    expect(await driftedHosts(db)).toEqual([]);
  });
});
