import { randomBytes } from 'node:crypto';
import { newId } from '@anvil/shared';
import type { LogEntry, MetricSample } from '@anvil/shared/protocol';
import type { TestApp } from './app.ts';

/** Test fixtures for the cluster metrics and logs API: a host, a cluster placed on it, agent samples. */

export const HOST_GPUS = [
  { index: 0, uuid: 'GPU-00000000-aaaa', name: 'NVIDIA H100', memoryTotalBytes: 80e9, pciBusId: null },
  { index: 1, uuid: 'GPU-11111111-bbbb', name: 'NVIDIA H100', memoryTotalBytes: 80e9, pciBusId: null },
  { index: 2, uuid: 'GPU-22222222-cccc', name: 'NVIDIA H100', memoryTotalBytes: 80e9, pciBusId: null },
];

export async function addHost(t: TestApp): Promise<string> {
  const id = newId('host');
  await t.context.db.prisma.host.create({
    data: {
      id,
      name: id,
      hostname: `${id}.test`,
      state: 'ready',
      credentialHash: randomBytes(32).toString('hex'),
      inventory: { gpus: { simulated: true, source: 'simulated', devices: HOST_GPUS } },
      simulated: true,
      gpuCount: HOST_GPUS.length,
    },
  });
  return id;
}

/** A cluster on `hostId` using host GPUs 1 and 2, with its workload (id = cluster id, contract 1). */
export async function addCluster(
  t: TestApp,
  hostId: string,
  options: { accountId?: string; ownerId?: string; status?: string } = {},
): Promise<string> {
  const id = newId('cluster');
  const accountId = options.accountId ?? t.accountId;
  await t.context.db.prisma.cluster.create({
    data: {
      id,
      accountId,
      ownerId: options.ownerId ?? t.userId,
      name: `c-${id.slice(-6)}`,
      status: options.status ?? 'running',
      gpuType: 'h100',
      gpuCount: 2,
      cpuCores: 4,
      memoryGb: 16,
      storageGb: 50,
      dockerImage: 'anvil-test/busybox:latest',
      command: [],
      hostId,
      gpuIndices: [1, 2],
    },
  });
  await t.context.db.prisma.workload.create({
    data: { id, hostId, kind: 'cluster', ownerAccountId: accountId, spec: {}, phase: 'running' },
  });
  return id;
}

export function sample(
  at: number,
  clusterId: string,
  v: { gpuUtil?: number; cpu?: number; read?: number; write?: number; rx?: number; tx?: number } = {},
): MetricSample {
  return {
    at,
    host: {
      cpuPercent: 30,
      load1: 1.5,
      load5: 1.25,
      load15: 1,
      memoryTotalBytes: 64e9,
      memoryUsedBytes: 8e9,
      memoryAvailableBytes: 56e9,
      disks: [],
      diskIo: null,
      network: [],
    },
    gpus: HOST_GPUS.map((g) => ({
      index: g.index,
      uuid: g.uuid,
      // Each GPU distinct: GPU 0 (not the cluster's) always reads 99.
      utilizationPercent: g.index === 0 ? 99 : (v.gpuUtil ?? 50) + g.index,
      memoryUtilizationPercent: 10,
      memoryUsedBytes: 20e9,
      memoryTotalBytes: 80e9,
      temperatureC: 60 + g.index,
      powerWatts: 300 + g.index,
      smClockMhz: 1980,
      memoryClockMhz: 2619,
      processes: g.index === 1 ? [{ pid: 4242, usedMemoryBytes: 1e9 }] : [],
    })),
    containers: [
      {
        workloadId: clusterId,
        containerId: 'c0ffee000000',
        cpuPercent: v.cpu ?? 200,
        cpuTotalNs: 1e9,
        memoryUsedBytes: 4e9,
        memoryLimitBytes: 16e9,
        networkRxBytes: v.rx ?? 1000,
        networkTxBytes: v.tx ?? 2000,
        blockReadBytes: v.read ?? 0,
        blockWriteBytes: v.write ?? 0,
      },
    ],
  };
}

/** Docker-style timestamp (nine fractional digits) of an epoch ms. */
export function dockerTs(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
}

export function logLine(
  clusterId: string,
  at: number,
  line: string,
  stream: 'stdout' | 'stderr' = 'stdout',
): LogEntry {
  return { workloadId: clusterId, containerId: 'c0ffee000000', stream, ts: dockerTs(at), line };
}
