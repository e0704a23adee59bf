/**
 * The metric names of the cluster metrics API and where each value comes from. A cluster's container is
 * the workload whose id is the cluster id (series `container`); its GPUs are the host GPUs at the
 * cluster's gpuIndices (series `gpu`, one per GPU UUID); `host` is the whole machine's series.
 * Names the agent does not measure per cluster (source `none`) are accepted and answer null.
 */
export type MetricSource = 'gpu' | 'container' | 'host' | 'none';
export type MetricCategory = 'gpu' | 'cpu' | 'storage' | 'network' | 'application';

export interface MetricDefinition {
  name: string;
  category: MetricCategory;
  source: MetricSource;
  /** The key in the stored sample's data. */
  key: string | null;
  unit: string;
  /** Divide by the cluster's cpu_cores (Docker's CPU percent is of one core). */
  perCore?: boolean;
  description: string;
}

export const METRICS: readonly MetricDefinition[] = [
  {
    name: 'gpu.utilization',
    category: 'gpu',
    source: 'gpu',
    key: 'utilizationPercent',
    unit: 'percent',
    description: 'GPU busy time',
  },
  {
    name: 'gpu.memory_used',
    category: 'gpu',
    source: 'gpu',
    key: 'memoryUsedBytes',
    unit: 'bytes',
    description: 'GPU memory in use',
  },
  {
    name: 'gpu.memory_total',
    category: 'gpu',
    source: 'gpu',
    key: 'memoryTotalBytes',
    unit: 'bytes',
    description: 'GPU memory size',
  },
  {
    name: 'gpu.temperature',
    category: 'gpu',
    source: 'gpu',
    key: 'temperatureC',
    unit: 'celsius',
    description: 'GPU temperature',
  },
  {
    name: 'gpu.power',
    category: 'gpu',
    source: 'gpu',
    key: 'powerWatts',
    unit: 'watts',
    description: 'GPU power draw',
  },
  {
    name: 'gpu.graphics_clock',
    category: 'gpu',
    source: 'gpu',
    key: 'smClockMhz',
    unit: 'mhz',
    description: 'SM clock',
  },
  {
    name: 'gpu.memory_clock',
    category: 'gpu',
    source: 'gpu',
    key: 'memoryClockMhz',
    unit: 'mhz',
    description: 'Memory clock',
  },
  {
    name: 'cpu.utilization',
    category: 'cpu',
    source: 'container',
    key: 'cpuPercent',
    unit: 'percent',
    perCore: true,
    description:
      "Container CPU time as a percentage of the cluster's cpu_cores (Docker's percent of one core / cpu_cores)",
  },
  {
    name: 'cpu.load_avg',
    category: 'cpu',
    source: 'host',
    key: 'load1',
    unit: 'load',
    description: "Host's one-minute load average (the container shares the host's kernel)",
  },
  {
    name: 'cpu.memory_used',
    category: 'cpu',
    source: 'container',
    key: 'memoryUsedBytes',
    unit: 'bytes',
    description: 'Container memory without reclaimable page cache',
  },
  {
    name: 'cpu.memory_total',
    category: 'cpu',
    source: 'container',
    key: 'memoryLimitBytes',
    unit: 'bytes',
    description: 'Container memory limit as Docker reports it',
  },
  {
    name: 'storage.disk_used',
    category: 'storage',
    source: 'container',
    key: 'diskUsedBytes',
    unit: 'bytes',
    description: "Container's writable layer plus its volume, measured by the agent about once a minute",
  },
  {
    name: 'storage.disk_total',
    category: 'storage',
    source: 'container',
    key: 'diskLimitBytes',
    unit: 'bytes',
    description: "The cluster's storage_gb in bytes, as the agent bounds and measures it",
  },
  {
    name: 'storage.disk_io_read',
    category: 'storage',
    source: 'container',
    key: 'blockReadBytes',
    unit: 'bytes',
    description: 'Bytes read by the container since it started (cumulative counter)',
  },
  {
    name: 'storage.disk_io_write',
    category: 'storage',
    source: 'container',
    key: 'blockWriteBytes',
    unit: 'bytes',
    description: 'Bytes written by the container since it started (cumulative counter)',
  },
  {
    name: 'network.bytes_sent',
    category: 'network',
    source: 'container',
    key: 'networkTxBytes',
    unit: 'bytes',
    description: 'Bytes sent by the container since it started, all its interfaces (cumulative)',
  },
  {
    name: 'network.bytes_received',
    category: 'network',
    source: 'container',
    key: 'networkRxBytes',
    unit: 'bytes',
    description: 'Bytes received by the container since it started, all its interfaces (cumulative)',
  },
  {
    name: 'network.packets_sent',
    category: 'network',
    source: 'none',
    key: null,
    unit: 'packets',
    description: 'Not measured per cluster: null',
  },
  {
    name: 'network.packets_received',
    category: 'network',
    source: 'none',
    key: null,
    unit: 'packets',
    description: 'Not measured per cluster: null',
  },
];

export const METRIC_BY_NAME = new Map(METRICS.map((m) => [m.name, m]));
export const CATEGORIES: readonly MetricCategory[] = ['gpu', 'cpu', 'storage', 'network', 'application'];
/** Custom metrics are addressed as `custom.<name>` in metric lists. */
export const CUSTOM_PREFIX = 'custom.';
export const CUSTOM_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_.:-]{0,99}$';

export interface MetricSelection {
  builtIn: MetricDefinition[];
  /** Custom metric names; null = every custom metric present. */
  custom: string[] | null;
}

/**
 * Resolves a `metrics` list: a category (gpu, cpu, storage, network, application), a name of the
 * catalogue, `custom.<name>`, or `custom_metrics` (every custom metric). Empty = every measured metric
 * and every custom metric. Returns the unknown entries separately (for INVALID_PARAMETERS).
 */
export function selectMetrics(list: string[] | undefined): { selection: MetricSelection; unknown: string[] } {
  const items = (list ?? [])
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length === 0) {
    return { selection: { builtIn: METRICS.filter((m) => m.source !== 'none'), custom: null }, unknown: [] };
  }
  const builtIn = new Set<MetricDefinition>();
  let custom: Set<string> | null = new Set();
  const unknown: string[] = [];
  for (const item of items) {
    const def = METRIC_BY_NAME.get(item);
    if (def) builtIn.add(def);
    else if ((CATEGORIES as readonly string[]).includes(item)) {
      if (item === 'application') custom = null;
      for (const m of METRICS) if (m.category === item && m.source !== 'none') builtIn.add(m);
    } else if (item === 'custom_metrics' || item === 'custom') custom = null;
    else if (
      item.startsWith(CUSTOM_PREFIX) &&
      new RegExp(CUSTOM_NAME_PATTERN).test(item.slice(CUSTOM_PREFIX.length))
    ) {
      custom?.add(item.slice(CUSTOM_PREFIX.length));
    } else unknown.push(item);
  }
  return { selection: { builtIn: [...builtIn], custom: custom === null ? null : [...custom] }, unknown };
}

export const METRIC_NAMES_HELP =
  `categories ${CATEGORIES.join(', ')}; names ${METRICS.map((m) => m.name).join(', ')}; ` +
  'custom.<name> or custom_metrics';
