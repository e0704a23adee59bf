import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { Allocator } from './allocator.ts';
import { driftedHosts } from './capacity.ts';
import type { GpuType } from './gpu-types.ts';
import {
  availableGpuTypes,
  couldEverFit,
  type HostCandidate,
  type PlacementRequest,
  place,
  type Reservation,
} from './placement.ts';
import { insertSimulatedHosts } from './simulated-hosts.ts';

/**
 * The placement statement against the pure rule it commits (placement.ts), on random fleets: GPU types
 * mixed on a host, GPUs held by clusters and by other workloads, CPU/memory/disk in use, cordoned and
 * unreachable hosts, regions, pinned requests, reservations that count and ones that no longer do.
 * Seeded, so a failure names a case that replays.
 */

function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const CASES = 40;
const A100_NAME = 'NVIDIA A100-SXM4-80GB';

describe('placement statement', () => {
  let database: TestDatabase;
  let db: Database;

  beforeAll(async () => {
    database = await createTestDatabase();
    db = database.db;
    await db.sql.query(`INSERT INTO accounts (id, name, updated_at) VALUES ('acc_d', 'd', now())`);
  });

  afterAll(async () => {
    await database?.drop();
  });

  async function buildCase(seed: number): Promise<{
    hosts: HostCandidate[];
    request: PlacementRequest;
    clusterId: string;
  }> {
    const rnd = random(seed);
    const pick = <T>(values: readonly T[]): T => values[Math.floor(rnd() * values.length)]!;
    for (const table of ['workloads', 'clusters', 'host_capacity', 'host_allocations', 'hosts']) {
      await db.sql.query(`DELETE FROM ${table}`);
    }
    const hosts: HostCandidate[] = [];
    const count = 3 + Math.floor(rnd() * 6);
    let clusterNo = 0;
    for (let n = 0; n < count; n++) {
      const prefix = `d${seed}x${n}`;
      const hostId = `host_sim_${prefix}_0`;
      const gpusPerHost = pick([1, 2, 4, 8, 8]);
      const cpuThreads = pick([8, 16]);
      const memoryGb = pick([32, 64]);
      const diskGb = pick([100, 500]);
      const region = pick(['us-east-1', 'eu-west-1', null]);
      await insertSimulatedHosts(db, { prefix, count: 1, gpusPerHost, region, cpuThreads, memoryGb, diskGb });
      // Some hosts carry two types: their upper half are A100s.
      const mixed = gpusPerHost > 1 && rnd() < 0.3;
      const typeOf = (index: number): GpuType => (mixed && index >= gpusPerHost / 2 ? 'A100' : 'H100');
      for (let index = 0; index < gpusPerHost; index++) {
        if (typeOf(index) === 'A100') {
          await db.sql.query(
            `UPDATE hosts SET inventory = jsonb_set(inventory, $2::text[], to_jsonb($3::text)) WHERE id = $1`,
            [hostId, `{gpus,devices,${index},name}`, A100_NAME],
          );
        }
      }
      const state = rnd();
      const unreachable = state < 0.15;
      const cordoned = !unreachable && state < 0.3;
      await db.sql.query(`UPDATE hosts SET state = $2, cordoned = $3 WHERE id = $1`, [
        hostId,
        unreachable ? 'unreachable' : 'ready',
        cordoned,
      ]);
      // What holds GPUs: up to two running clusters, and sometimes an endpoint worker.
      const held = Array.from({ length: gpusPerHost }, (_, i) => i).filter(() => rnd() < 0.35);
      const worker = held.length > 0 && rnd() < 0.2 ? held.pop()! : null;
      const used = { cpuCores: 0, memoryGb: 0, storageGb: 0 };
      const split = Math.ceil(held.length / 2);
      for (const indices of [held.slice(0, split), held.slice(split)]) {
        if (indices.length === 0) continue;
        const sizes = {
          cpu: 1 + Math.floor(rnd() * 6),
          mem: 1 + Math.floor(rnd() * 24),
          disk: 1 + Math.floor(rnd() * 200),
        };
        clusterNo += 1;
        await db.sql.query(
          `INSERT INTO clusters (id, account_id, owner_id, name, status, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb,
                                 host_id, gpu_indices, docker_image, command, created_at, updated_at)
           VALUES ($1, 'acc_d', 'usr_d', $1, 'running', 'H100', $2, $3, $4, $5, $6, $7::int[], 'busybox', '{}', now(), now())`,
          [
            `cluster_h${seed}_${clusterNo}`,
            indices.length,
            sizes.cpu,
            sizes.mem,
            sizes.disk,
            hostId,
            `{${indices.join(',')}}`,
          ],
        );
        used.cpuCores += sizes.cpu;
        used.memoryGb += sizes.mem;
        used.storageGb += sizes.disk;
      }
      if (worker !== null) {
        await db.sql.query(
          `INSERT INTO workloads (id, host_id, kind, owner_account_id, spec, desired, updated_at)
           VALUES ($1, $2, 'endpoint_worker', 'acc_d', $3::jsonb, 'running', now())`,
          [
            `wl_${prefix}`,
            hostId,
            JSON.stringify({ gpus: [{ index: worker, uuid: `GPU-sim-${prefix}-0-${worker}` }] }),
          ],
        );
      }
      const gpus: HostCandidate['gpus'] = {};
      for (let index = 0; index < gpusPerHost; index++) {
        const type = typeOf(index);
        gpus[type] = [...(gpus[type] ?? []), { index, uuid: `GPU-sim-${prefix}-0-${index}` }];
      }
      hosts.push({
        hostId,
        region,
        schedulable: !unreachable && !cordoned,
        gpus,
        takenGpuIndices: worker === null ? held : [...held, worker],
        cpuThreads,
        memoryGb,
        diskGb,
        used,
        reservation: null,
      });
    }
    await new Allocator(db, systemClock).sync();
    expect(await driftedHosts(db)).toEqual([]);

    // Reservations: some for pending clusters (they count), some whose cluster is being deleted (they do not).
    for (const host of hosts) {
      if (rnd() >= 0.35) continue;
      const counts = rnd() < 0.75;
      const reservation: Reservation = {
        clusterId: `cluster_r${seed}_${host.hostId}`,
        gpuType: pick(['H100', 'H100', 'A100'] as const),
        gpuCount: 1 + Math.floor(rnd() * 4),
        cpuCores: Math.floor(rnd() * 8),
        memoryGb: Math.floor(rnd() * 32),
        storageGb: Math.floor(rnd() * 200),
      };
      await db.sql.query(
        `INSERT INTO clusters (id, account_id, owner_id, name, status, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb,
                               gpu_indices, docker_image, command, created_at, updated_at)
         VALUES ($1, 'acc_d', 'usr_d', $1, $2, $3, $4, $5, $6, $7, '{}', 'busybox', '{}', now() - interval '1 hour', now())`,
        [
          reservation.clusterId,
          counts ? 'pending' : 'deleting',
          reservation.gpuType,
          reservation.gpuCount,
          reservation.cpuCores,
          reservation.memoryGb,
          reservation.storageGb,
        ],
      );
      await db.sql.query(
        `UPDATE host_allocations SET reserved_by = $2, reserved_gpu_type = $3, reserved_gpu_count = $4,
                reserved_cpu_cores = $5, reserved_memory_gb = $6, reserved_storage_gb = $7, reserved_at = now()
          WHERE host_id = $1`,
        [
          host.hostId,
          reservation.clusterId,
          reservation.gpuType,
          reservation.gpuCount,
          reservation.cpuCores,
          reservation.memoryGb,
          reservation.storageGb,
        ],
      );
      if (counts) host.reservation = reservation;
    }

    // The request: sometimes pinned to a host (a restart), sometimes in a region.
    const pinned = rnd() < 0.15 ? pick(hosts).hostId : null;
    const request: PlacementRequest = {
      gpuType: pick(['H100', 'H100', 'H100', 'H100', 'A100'] as const),
      gpuCount: pick([1, 1, 1, 2, 2, 3, 5]),
      cpuCores: 1 + Math.floor(rnd() * 4),
      memoryGb: 1 + Math.floor(rnd() * 16),
      storageGb: pick([10, 50, 120]),
      region: pinned ? null : pick([null, null, null, 'us-east-1', 'eu-west-1']),
      hostId: pinned,
    };
    const clusterId = `cluster_q${seed}`;
    await db.sql.query(
      `INSERT INTO clusters (id, account_id, owner_id, name, status, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb,
                             region, host_id, gpu_indices, docker_image, command, created_at, updated_at)
       VALUES ($1, 'acc_d', 'usr_d', $1, 'pending', $2, $3, $4, $5, $6, $7, $8, '{}', 'busybox', '{}', now(), now())`,
      [
        clusterId,
        request.gpuType,
        request.gpuCount,
        request.cpuCores,
        request.memoryGb,
        request.storageGb,
        request.region,
        pinned,
      ],
    );
    return { hosts, request, clusterId };
  }

  it(`places as the pure rule does on ${CASES} random fleets`, async () => {
    const tally = { placed: 0, busy: 0, impossible: 0 };
    for (let seed = 1; seed <= CASES; seed++) {
      const { hosts, request, clusterId } = await buildCase(seed);
      const expected = place(hosts, request, clusterId);
      const outcome = await new Allocator(db, systemClock).allocate(clusterId, request);
      const context = `case ${seed}: ${JSON.stringify(request)}`;
      if (expected) {
        expect(outcome, context).toEqual({ kind: 'placed', placement: expected, hourlyRate: 0 });
      } else if (hosts.some((h) => couldEverFit(h, request))) {
        expect(outcome, context).toEqual({ kind: 'busy' });
      } else {
        expect(outcome, context).toEqual({
          kind: 'impossible',
          availableGpuTypes: availableGpuTypes(hosts, request.region),
        });
      }
      tally[outcome.kind as keyof typeof tally] += 1;
      expect(await driftedHosts(db), context).toEqual([]);
    }
    // The cases exercise every outcome.
    expect(tally.placed).toBeGreaterThan(5);
    expect(tally.busy).toBeGreaterThan(5);
    expect(tally.impossible).toBeGreaterThan(2);
  });

  // allocateMany sends what the batch did not place through allocate (queue, reservation), held above.
  it(`places a batch as the pure rule placing one request after another does, on ${CASES} random fleets`, async () => {
    let placed = 0;
    for (let seed = 1; seed <= CASES; seed++) {
      const { hosts, request, clusterId } = await buildCase(seed);
      const rnd = random(seed * 7919);
      const pick = <T>(values: readonly T[]): T => values[Math.floor(rnd() * values.length)]!;
      const items = [{ clusterId, request }];
      for (let n = 1; n < 2 + Math.floor(rnd() * 6); n++) {
        const pinned = rnd() < 0.15 ? pick(hosts).hostId : null;
        const more: PlacementRequest = {
          gpuType: pick(['H100', 'H100', 'H100', 'A100'] as const),
          gpuCount: pick([1, 1, 2, 3]),
          cpuCores: 1 + Math.floor(rnd() * 4),
          memoryGb: 1 + Math.floor(rnd() * 16),
          storageGb: pick([10, 50, 120]),
          region: pinned ? null : pick([null, null, 'us-east-1', 'eu-west-1']),
          hostId: pinned,
        };
        const id = `cluster_q${seed}_${n}`;
        await db.sql.query(
          `INSERT INTO clusters (id, account_id, owner_id, name, status, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb,
                                 region, host_id, gpu_indices, docker_image, command, created_at, updated_at)
           VALUES ($1, 'acc_d', 'usr_d', $1, 'pending', $2, $3, $4, $5, $6, $7, $8, '{}', 'busybox', '{}', now(), now())`,
          [
            id,
            more.gpuType,
            more.gpuCount,
            more.cpuCores,
            more.memoryGb,
            more.storageGb,
            more.region,
            pinned,
          ],
        );
        items.push({ clusterId: id, request: more });
      }
      // The pure rule, one request after another, each taking what it was given.
      const expected = items.map(({ clusterId: id, request: wanted }) => {
        const placement = place(hosts, wanted, id);
        if (!placement) return null;
        const host = hosts.find((h) => h.hostId === placement.hostId)!;
        host.takenGpuIndices = [...host.takenGpuIndices, ...placement.gpus.map((g) => g.index)];
        host.used = {
          cpuCores: host.used.cpuCores + wanted.cpuCores,
          memoryGb: host.used.memoryGb + wanted.memoryGb,
          storageGb: host.used.storageGb + wanted.storageGb,
        };
        return placement;
      });
      const outcomes = await new Allocator(db, systemClock).placeInOrder(items);
      for (const [i, outcome] of outcomes.entries()) {
        const context = `case ${seed}, item ${i}: ${JSON.stringify(items[i]!.request)}`;
        const placement = expected[i];
        expect(outcome, context).toEqual(placement ? { kind: 'placed', placement, hourlyRate: 0 } : null);
        if (placement) placed += 1;
      }
      expect(await driftedHosts(db), `case ${seed}`).toEqual([]);
    }
    expect(placed).toBeGreaterThan(CASES);
  });
});
