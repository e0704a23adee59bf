import type { GpuMetrics } from '@anvil/shared/protocol';

export type GpuReadings = Omit<GpuMetrics, 'index' | 'uuid' | 'health'>;

/** A GPU's readings when none could be taken (no device to measure, a call that hung): null, never made up. */
export function noReadings(): GpuReadings {
  return {
    utilizationPercent: null,
    memoryUtilizationPercent: null,
    memoryUsedBytes: null,
    memoryTotalBytes: null,
    temperatureC: null,
    powerWatts: null,
    smClockMhz: null,
    memoryClockMhz: null,
    processes: [],
  };
}
