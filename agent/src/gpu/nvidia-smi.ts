import { execFile } from 'node:child_process';
import type { GpuDevice, GpuMetrics } from '@anvil/shared/protocol';

/** Runs nvidia-smi with an argument array (never a shell string); injected so tests feed recorded output. */
export type NvidiaSmiRunner = (args: string[]) => Promise<string>;

export const runNvidiaSmi: NvidiaSmiRunner = (args) =>
  new Promise((resolve, reject) => {
    execFile('nvidia-smi', args, { timeout: 15_000, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`nvidia-smi ${args[0] ?? ''}: ${stderr.trim() || err.message}`));
      else resolve(stdout);
    });
  });

export const INVENTORY_FIELDS = [
  'index',
  'uuid',
  'name',
  'memory.total',
  'pci.bus_id',
  'driver_version',
] as const;
export const METRIC_FIELDS = [
  'index',
  'uuid',
  'utilization.gpu',
  'utilization.memory',
  'memory.used',
  'memory.total',
  'temperature.gpu',
  'power.draw',
  'clocks.sm',
  'clocks.mem',
] as const;
export const PROCESS_FIELDS = ['gpu_uuid', 'pid', 'used_memory'] as const;

export const inventoryArgs = () => [
  `--query-gpu=${INVENTORY_FIELDS.join(',')}`,
  '--format=csv,noheader,nounits',
];
export const metricArgs = () => [`--query-gpu=${METRIC_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];
export const processArgs = () => [
  `--query-compute-apps=${PROCESS_FIELDS.join(',')}`,
  '--format=csv,noheader,nounits',
];

const MIB = 1024 * 1024;

/** One CSV record as nvidia-smi writes it: ", " separated, quotes only around values with commas. */
export function splitCsvLine(line: string): string[] {
  const out: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (ch === '"') quoted = !quoted;
    else if (ch === ',' && !quoted) {
      out.push(current.trim());
      current = '';
    } else current += ch;
  }
  out.push(current.trim());
  return out;
}

/** "[N/A]", "[Not Supported]", "[Unknown Error]" and friends mean the value is unknown: null. */
function text(value: string | undefined): string | null {
  if (value === undefined) return null;
  const v = value.trim();
  if (v === '' || /^\[.*\]$/.test(v) || v === 'N/A') return null;
  return v;
}

function num(value: string | undefined): number | null {
  const v = text(value);
  if (v === null) return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

function rows(csv: string, width: number): string[][] {
  return csv
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .map(splitCsvLine)
    .filter((cells) => cells.length === width);
}

export interface SmiInventory {
  driverVersion: string | null;
  devices: GpuDevice[];
}

export function parseInventoryCsv(csv: string): SmiInventory {
  let driverVersion: string | null = null;
  const devices: GpuDevice[] = [];
  for (const [index, uuid, name, memoryTotal, pciBusId, driver] of rows(csv, INVENTORY_FIELDS.length)) {
    const i = num(index);
    const id = text(uuid);
    if (i === null || id === null) continue;
    const mib = num(memoryTotal);
    devices.push({
      index: i,
      uuid: id,
      name: text(name) ?? '',
      memoryTotalBytes: mib === null ? null : Math.round(mib * MIB),
      pciBusId: text(pciBusId),
    });
    driverVersion ??= text(driver);
  }
  return { driverVersion, devices };
}

/** `nvidia-smi` without arguments prints "CUDA Version: 12.4" in its banner; there is no query field. */
export function parseCudaVersionFromBanner(banner: string): string | null {
  return /CUDA Version:\s*([0-9.]+)/.exec(banner)?.[1] ?? null;
}

export function parseMetricsCsv(csv: string, processesCsv: string): GpuMetrics[] {
  const processes = new Map<string, { pid: number; usedMemoryBytes: number | null }[]>();
  for (const [gpuUuid, pid, used] of rows(processesCsv, PROCESS_FIELDS.length)) {
    const p = num(pid);
    const id = text(gpuUuid);
    if (p === null || id === null) continue;
    const mib = num(used);
    const list = processes.get(id) ?? [];
    list.push({ pid: p, usedMemoryBytes: mib === null ? null : Math.round(mib * MIB) });
    processes.set(id, list);
  }
  const out: GpuMetrics[] = [];
  for (const cells of rows(csv, METRIC_FIELDS.length)) {
    const [index, uuid, util, utilMem, memUsed, memTotal, temp, power, smClock, memClock] = cells;
    const i = num(index);
    const id = text(uuid);
    if (i === null || id === null) continue;
    const used = num(memUsed);
    const total = num(memTotal);
    out.push({
      index: i,
      uuid: id,
      utilizationPercent: num(util),
      memoryUtilizationPercent: num(utilMem),
      memoryUsedBytes: used === null ? null : Math.round(used * MIB),
      memoryTotalBytes: total === null ? null : Math.round(total * MIB),
      temperatureC: num(temp),
      powerWatts: num(power),
      smClockMhz: num(smClock),
      memoryClockMhz: num(memClock),
      processes: processes.get(id) ?? [],
    });
  }
  return out;
}
