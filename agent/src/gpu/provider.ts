import type { GpuInventory, GpuMetrics } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { errorMessage } from '../errors.ts';
import {
  inventoryArgs,
  metricArgs,
  type NvidiaSmiRunner,
  parseCudaVersionFromBanner,
  parseInventoryCsv,
  parseMetricsCsv,
  processArgs,
  runNvidiaSmi,
} from './nvidia-smi.ts';
import { loadNvml, type Nvml, type NvmlDevice } from './nvml.ts';
import { parseSimulateGpus, simulatedDevices } from './simulate.ts';

/** GPU inventory and samples, from whichever source works on this host. */
export interface GpuProvider {
  readonly simulated: boolean;
  inventory(): Promise<GpuInventory>;
  sample(): Promise<GpuMetrics[]>;
}

export interface GpuProviderOptions {
  /** "2xH100": declare GPUs that do not exist (development and tests). */
  simulate: string | null;
  /** Makes simulated UUIDs stable per host: the state directory is a good one. */
  simulateSeed: string;
  nvmlLibrary?: string;
  runNvidiaSmi?: NvidiaSmiRunner;
  loadNvml?: (path?: string) => Nvml;
  logger: Logger;
}

/** NVML's 12040 -> "12.4". */
export function formatCudaVersion(v: number): string {
  return `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;
}

/** A field the board does not support (or that fails) is null, the rest of the sample still counts. */
function orNull<T>(read: () => T): T | null {
  try {
    return read();
  } catch {
    return null;
  }
}

function simulatedProvider(spec: string, seed: string, logger: Logger): GpuProvider {
  const devices = simulatedDevices(parseSimulateGpus(spec), seed);
  logger.warn(
    { simulateGpus: spec, devices: devices.map((d) => d.uuid) },
    'GPU INVENTORY IS SIMULATED: these GPUs do not exist; containers get NVIDIA_VISIBLE_DEVICES but no device',
  );
  const inventory: GpuInventory = {
    simulated: true,
    source: 'simulated',
    driverVersion: null,
    cudaVersion: null,
    devices,
    error: null,
  };
  return {
    simulated: true,
    inventory: async () => inventory,
    // There is no device to measure: every reading is unknown, never made up.
    sample: async () =>
      devices.map((d) => ({
        index: d.index,
        uuid: d.uuid,
        utilizationPercent: null,
        memoryUtilizationPercent: null,
        memoryUsedBytes: null,
        memoryTotalBytes: d.memoryTotalBytes,
        temperatureC: null,
        powerWatts: null,
        smClockMhz: null,
        memoryClockMhz: null,
        processes: [],
      })),
  };
}

export function nvmlProvider(nvml: Nvml): GpuProvider {
  const devices = (): { index: number; handle: NvmlDevice }[] => {
    const count = nvml.deviceCount();
    return Array.from({ length: count }, (_, index) => ({ index, handle: nvml.deviceByIndex(index) }));
  };
  return {
    simulated: false,
    async inventory() {
      const cuda = orNull(() => nvml.cudaDriverVersion());
      return {
        simulated: false,
        source: 'nvml',
        driverVersion: orNull(() => nvml.driverVersion()),
        cudaVersion: cuda === null ? null : formatCudaVersion(cuda),
        devices: devices().map(({ index, handle }) => ({
          index,
          uuid: nvml.uuid(handle),
          name: orNull(() => nvml.name(handle)) ?? '',
          memoryTotalBytes: orNull(() => nvml.memory(handle).total),
          pciBusId: orNull(() => nvml.pciBusId(handle)),
        })),
        error: null,
      };
    },
    async sample() {
      return devices().map(({ index, handle }) => {
        const memory = orNull(() => nvml.memory(handle));
        const utilization = orNull(() => nvml.utilization(handle));
        const power = orNull(() => nvml.powerMilliwatts(handle));
        return {
          index,
          uuid: nvml.uuid(handle),
          utilizationPercent: utilization?.gpu ?? null,
          memoryUtilizationPercent: utilization?.memory ?? null,
          memoryUsedBytes: memory?.used ?? null,
          memoryTotalBytes: memory?.total ?? null,
          temperatureC: orNull(() => nvml.temperature(handle)),
          powerWatts: power === null ? null : power / 1000,
          smClockMhz: orNull(() => nvml.smClockMhz(handle)),
          memoryClockMhz: orNull(() => nvml.memoryClockMhz(handle)),
          processes: orNull(() => nvml.computeProcesses(handle)) ?? [],
        };
      });
    },
  };
}

export function nvidiaSmiProvider(run: NvidiaSmiRunner): GpuProvider {
  return {
    simulated: false,
    async inventory() {
      const { driverVersion, devices } = parseInventoryCsv(await run(inventoryArgs()));
      const cudaVersion = parseCudaVersionFromBanner(await run([]).catch(() => ''));
      return { simulated: false, source: 'nvidia-smi', driverVersion, cudaVersion, devices, error: null };
    },
    async sample() {
      const [metrics, processes] = await Promise.all([run(metricArgs()), run(processArgs()).catch(() => '')]);
      return parseMetricsCsv(metrics, processes);
    },
  };
}

function noGpuProvider(error: string): GpuProvider {
  const inventory: GpuInventory = {
    simulated: false,
    source: 'none',
    driverVersion: null,
    cudaVersion: null,
    devices: [],
    error,
  };
  return { simulated: false, inventory: async () => inventory, sample: async () => [] };
}

/**
 * Pick the GPU source once: the simulation override when given, else NVML through FFI, else
 * nvidia-smi, else none (with the reasons each one failed, shown in the inventory).
 */
export async function createGpuProvider(options: GpuProviderOptions): Promise<GpuProvider> {
  const { logger } = options;
  if (options.simulate) return simulatedProvider(options.simulate, options.simulateSeed, logger);

  let nvmlFailure: string;
  try {
    const nvml = (options.loadNvml ?? loadNvml)(options.nvmlLibrary);
    nvml.init();
    logger.info({ library: nvml.libraryPath }, 'GPUs read through NVML');
    return nvmlProvider(nvml);
  } catch (err) {
    nvmlFailure = `nvml: ${errorMessage(err)}`;
  }

  const run = options.runNvidiaSmi ?? runNvidiaSmi;
  try {
    const provider = nvidiaSmiProvider(run);
    await provider.inventory();
    logger.warn({ nvml: nvmlFailure }, 'NVML unavailable; GPUs read through nvidia-smi');
    return provider;
  } catch (err) {
    const error = `${nvmlFailure}; nvidia-smi: ${errorMessage(err)}`;
    logger.info({ error }, 'no NVIDIA GPU found on this host');
    return noGpuProvider(error);
  }
}
