import { Gauge, type Registry } from 'prom-client';

/** DCGM exporter's label names, plus ours: a dashboard made for dcgm-exporter works on these series. */
const LABELS = ['gpu', 'UUID', 'modelName', 'Hostname', 'host_id'] as const;
type Label = (typeof LABELS)[number];

/**
 * Gauges named as NVIDIA's DCGM exporter names the same figure (same unit: FB in MiB, power in W,
 * temperature in °C, clocks in MHz), from the stored GPU samples; `key` is the field of metric_samples.data,
 * `scale` turns our unit into DCGM's.
 */
const DCGM_FIELDS: readonly { name: string; help: string; key: string; scale?: number }[] = [
  { name: 'DCGM_FI_DEV_GPU_UTIL', help: 'GPU utilization (in %)', key: 'utilizationPercent' },
  { name: 'DCGM_FI_DEV_MEM_COPY_UTIL', help: 'Memory utilization (in %)', key: 'memoryUtilizationPercent' },
  {
    name: 'DCGM_FI_DEV_FB_USED',
    help: 'Framebuffer memory used (in MiB)',
    key: 'memoryUsedBytes',
    scale: 1 / 1_048_576,
  },
  { name: 'DCGM_FI_DEV_GPU_TEMP', help: 'GPU temperature (in C)', key: 'temperatureC' },
  { name: 'DCGM_FI_DEV_POWER_USAGE', help: 'Power draw (in W)', key: 'powerWatts' },
  { name: 'DCGM_FI_DEV_SM_CLOCK', help: 'SM clock frequency (in MHz)', key: 'smClockMhz' },
  { name: 'DCGM_FI_DEV_MEM_CLOCK', help: 'Memory clock frequency (in MHz)', key: 'memoryClockMhz' },
  { name: 'DCGM_FI_DEV_XID_ERRORS', help: 'Value of the last XID error encountered', key: 'xidLast' },
  {
    name: 'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL',
    help: 'Total number of single-bit volatile ECC errors',
    key: 'eccSbeVolatile',
  },
  {
    name: 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL',
    help: 'Total number of double-bit volatile ECC errors',
    key: 'eccDbeVolatile',
  },
  {
    name: 'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL',
    help: 'Total number of single-bit persistent ECC errors',
    key: 'eccSbeAggregate',
  },
  {
    name: 'DCGM_FI_DEV_ECC_DBE_AGG_TOTAL',
    help: 'Total number of double-bit persistent ECC errors',
    key: 'eccDbeAggregate',
  },
  {
    name: 'DCGM_FI_DEV_RETIRED_SBE',
    help: 'Total number of retired pages due to single-bit errors',
    key: 'retiredPagesSbe',
  },
  {
    name: 'DCGM_FI_DEV_RETIRED_DBE',
    help: 'Total number of retired pages due to double-bit errors',
    key: 'retiredPagesDbe',
  },
  {
    name: 'DCGM_FI_DEV_RETIRED_PENDING',
    help: 'Number of pages pending retirement (1: some)',
    key: 'retiredPagesPending',
  },
  {
    name: 'DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS',
    help: 'Number of remapped rows for correctable errors',
    key: 'rowRemapCorrectable',
  },
  {
    name: 'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS',
    help: 'Number of remapped rows for uncorrectable errors',
    key: 'rowRemapUncorrectable',
  },
  {
    name: 'DCGM_FI_DEV_ROW_REMAP_FAILURE',
    help: 'Whether remapping of rows has failed',
    key: 'rowRemapFailure',
  },
  { name: 'DCGM_FI_DEV_PCIE_LINK_GEN', help: 'PCIe current link generation', key: 'pcieLinkGen' },
  { name: 'DCGM_FI_DEV_PCIE_LINK_WIDTH', help: 'PCIe current link width', key: 'pcieLinkWidth' },
];

const HEALTH_VALUE: Record<string, number> = { healthy: 0, degraded: 1, failed: 2 };

export interface DcgmDevice {
  hostId: string;
  hostname: string;
  index: number;
  uuid: string;
  name: string;
}

/** Per-GPU gauges: the DCGM-named figures of each GPU's latest sample, and the kept health state. */
export class DcgmGauges {
  readonly #fields: { gauge: Gauge<Label>; key: string; scale: number }[];
  readonly #fbFree: Gauge<Label>;
  readonly #health: Gauge<Label>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.#fields = DCGM_FIELDS.map(({ name, help, key, scale }) => ({
      gauge: new Gauge({ name, help, labelNames: LABELS, registers }),
      key,
      scale: scale ?? 1,
    }));
    this.#fbFree = new Gauge({
      name: 'DCGM_FI_DEV_FB_FREE',
      help: 'Framebuffer memory free (in MiB)',
      labelNames: LABELS,
      registers,
    });
    this.#health = new Gauge({
      name: 'anvil_gpu_health_state',
      help: 'GPU health kept by the control plane since the last operator reset: 0 healthy, 1 degraded, 2 failed (a failed GPU takes no new work)',
      labelNames: LABELS,
      registers,
    });
  }

  /**
   * `samples`: the latest stored sample per GPU (by UUID); `devices`: the inventories' GPUs (for the labels);
   * `health`: kept states by host and index.
   */
  set(
    devices: readonly DcgmDevice[],
    samples: ReadonlyMap<string, Record<string, unknown>>,
    health: ReadonlyMap<string, string>,
  ): void {
    for (const { gauge } of this.#fields) gauge.reset();
    this.#fbFree.reset();
    this.#health.reset();
    for (const device of devices) {
      const labels = {
        gpu: String(device.index),
        UUID: device.uuid,
        modelName: device.name,
        Hostname: device.hostname,
        host_id: device.hostId,
      };
      const state = health.get(`${device.hostId}#${device.index}`);
      if (state !== undefined && state in HEALTH_VALUE) this.#health.set(labels, HEALTH_VALUE[state]!);
      const data = samples.get(device.uuid);
      if (!data) continue;
      for (const { gauge, key, scale } of this.#fields) {
        const value = data[key];
        if (typeof value === 'number') gauge.set(labels, value * scale);
      }
      const used = data['memoryUsedBytes'];
      const total = data['memoryTotalBytes'];
      if (typeof used === 'number' && typeof total === 'number') {
        this.#fbFree.set(labels, (total - used) / 1_048_576);
      }
    }
  }
}
