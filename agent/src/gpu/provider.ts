import type { GpuInventory, GpuMetrics } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { errorMessage } from '../errors.ts';
import { noReadings } from './no-readings.ts';
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
import { NvmlSampler, type NvmlSamplerOptions } from './nvml-sampler.ts';
import { parseSimulateGpus, simulatedDevices } from './simulate.ts';

/** GPU inventory and samples, from whichever source works on this host. */
export interface GpuProvider {
  readonly simulated: boolean;
  inventory(): Promise<GpuInventory>;
  sample(): Promise<GpuMetrics[]>;
  /** Ends what the provider started (the NVML sampler process). */
  close?(): void;
}

export interface GpuProviderOptions {
  /** "2xH100": declare GPUs that do not exist (development and tests). */
  simulate: string | null;
  /** Makes simulated UUIDs stable per host: the state directory is a good one. */
  simulateSeed: string;
  nvmlLibrary?: string;
  runNvidiaSmi?: NvidiaSmiRunner;
  /** Watchdog and retry timings of the NVML sampler process (tests shorten them). */
  nvmlSampler?: Omit<NvmlSamplerOptions, 'libraryPath' | 'logger'>;
  logger: Logger;
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
        ...noReadings(),
        memoryTotalBytes: d.memoryTotalBytes,
      })),
    close: () => {},
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
    close: () => {},
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
  return { simulated: false, inventory: async () => inventory, sample: async () => [], close: () => {} };
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
    const libraryPath = options.nvmlLibrary ?? 'libnvidia-ml.so.1';
    const sampler = new NvmlSampler({ ...options.nvmlSampler, libraryPath, logger });
    await sampler.start();
    logger.info({ library: libraryPath }, 'GPUs read through NVML (in a sampler process with a watchdog)');
    return {
      simulated: false,
      inventory: () => sampler.inventory(),
      sample: () => sampler.sample(),
      close: () => sampler.close(),
    };
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
