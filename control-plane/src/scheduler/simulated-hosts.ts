import type { Database } from '../db/index.ts';

/**
 * Inserts `count` ready hosts with simulated inventories straight into the database (tests and the
 * scheduler benchmark: no agent behind them, so nothing is ever sent to them). Host ids are
 * `host_sim_<prefix>_<n>`; GPUs are named as NVML names them.
 */
export async function insertSimulatedHosts(
  db: Database,
  options: {
    prefix: string;
    count: number;
    gpusPerHost: number;
    gpuName?: string;
    region?: string | null;
    cpuThreads?: number;
    memoryGb?: number;
    diskGb?: number;
  },
): Promise<string[]> {
  const gpuName = options.gpuName ?? 'NVIDIA H100 80GB HBM3';
  const inventory = (n: number) => ({
    host: {
      hostname: `sim-${options.prefix}-${n}`,
      os: { platform: 'linux', distro: null, release: null, kernel: null, arch: 'x64' },
      cpu: { model: null, cores: options.cpuThreads ?? 64, threads: options.cpuThreads ?? 64 },
      memoryBytes: (options.memoryGb ?? 512) * 1024 ** 3,
      disks: [
        { device: '/dev/sim', mount: '/', fsType: 'ext4', sizeBytes: (options.diskGb ?? 4000) * 1024 ** 3 },
      ],
      networkInterfaces: [],
    },
    gpus: {
      simulated: true,
      source: 'simulated',
      driverVersion: null,
      cudaVersion: null,
      devices: Array.from({ length: options.gpusPerHost }, (_, index) => ({
        index,
        uuid: `GPU-sim-${options.prefix}-${n}-${index}`,
        name: gpuName,
        memoryTotalBytes: null,
        pciBusId: null,
      })),
      error: null,
    },
    docker: { version: null, apiVersion: null, runtimes: [], nvidiaRuntime: false, error: null },
  });
  const ids: string[] = [];
  for (let start = 0; start < options.count; start += 500) {
    const batch = Array.from({ length: Math.min(500, options.count - start) }, (_, i) => start + i);
    const rows = batch.map((n) => ({
      id: `host_sim_${options.prefix}_${n}`,
      name: `sim-${options.prefix}-${n}`,
      credential: `sim-${options.prefix}-${n}`,
      inventory: inventory(n),
    }));
    await db.prisma.$executeRawUnsafe(
      `INSERT INTO hosts (id, name, hostname, state, region, credential_hash, inventory, simulated, gpu_count,
                          last_heartbeat_at, created_at, updated_at)
       SELECT x.id, x.name, x.name, 'ready', $2, x.credential, x.inventory, true, $3, now(), now(), now()
         FROM jsonb_to_recordset($1::jsonb) AS x(id text, name text, credential text, inventory jsonb)`,
      JSON.stringify(rows),
      options.region ?? null,
      options.gpusPerHost,
    );
    ids.push(...rows.map((r) => r.id));
  }
  return ids;
}
