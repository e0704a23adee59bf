import { type ChartLine, type ChartSpec, LineChart } from '../chart.ts';
import { h, replace } from '../dom.ts';
import { bytes } from '../format.ts';
import type { HostDetail, MetricSeries } from '../types.ts';
import type { ViewContext } from '../view.ts';

/** The windows an operator can pick, and how often each is re-read (a day moves slowly). */
const WINDOWS = {
  '1h': { label: 'Last hour', ms: 3_600_000, refreshMs: 15_000 },
  // A day's bucket is 4 min wide; re-reading it sooner draws the same points (and costs the database).
  '24h': { label: 'Last day', ms: 86_400_000, refreshMs: 240_000 },
} as const;
type WindowName = keyof typeof WINDOWS;

const POINTS = 360;
const GPU_KEYS = ['utilizationPercent', 'memoryUsedBytes', 'temperatureC', 'powerWatts'];
/** Network lines shown, the busiest interfaces first (a host with many containers has many veths). */
const MAX_INTERFACES = 4;

const percent = (v: number) => `${Number(v.toFixed(1))} %`;
const rate = (v: number) => `${bytes(Math.max(0, v))}/s`;
const plain = (unit: string) => (v: number) => `${Number(v.toFixed(1))} ${unit}`;

/**
 * History charts of one host: per GPU utilisation, memory, temperature and power, and the host's CPU,
 * memory, disks and network, over the last hour or day. The series come from the admin API already
 * bucketed (a few hundred points per line, however long the window); this only draws them.
 */
export function hostCharts(context: ViewContext, hostId: string) {
  let windowName: WindowName = '1h';
  let loadedAt = 0;
  let charts: LineChart[] = [];
  let lastHost: HostDetail | null = null;
  const grid = h('div', { class: 'charts', attrs: { 'data-charts': hostId } });
  const buttons = (Object.keys(WINDOWS) as WindowName[]).map((name) => {
    const button = h(
      'button',
      { attrs: { type: 'button', 'data-window': name, 'aria-pressed': name === windowName } },
      WINDOWS[name].label,
    );
    button.addEventListener('click', () => {
      windowName = name;
      for (const b of buttons) b.setAttribute('aria-pressed', String(b === button));
      loadedAt = 0;
      if (lastHost) void refresh(lastHost).catch((e: Error) => context.notify(e.message, 'error'));
    });
    return button;
  });
  const element = h(
    'section',
    { attrs: { 'data-section': 'history' } },
    h('header', { class: 'title' }, h('h3', null, 'History'), h('span', { class: 'actions' }, buttons)),
    grid,
  );

  const refresh = async (host: HostDetail): Promise<void> => {
    lastHost = host;
    const chosen = WINDOWS[windowName];
    if (Date.now() - loadedAt < chosen.refreshMs) return;
    loadedAt = Date.now();
    // The whole window, to the browser's now: its buckets are then exactly window / POINTS wide.
    const to = Date.now();
    const range = `from=${encodeURIComponent(new Date(to - chosen.ms).toISOString())}&to=${encodeURIComponent(new Date(to).toISOString())}`;
    const base = `/v2/admin/hosts/${encodeURIComponent(hostId)}/metrics/series?points=${POINTS}&${range}`;
    const [gpu, machine] = await Promise.all([
      context.api.get<MetricSeries>(`${base}&kind=gpu&keys=${GPU_KEYS.join(',')}`),
      context.api.get<MetricSeries>(`${base}&kind=host`),
    ]);
    const width = Math.max(320, Math.min(640, Math.floor((grid.clientWidth || 1280) / 2) - 48));
    for (const chart of charts) chart.destroy();
    charts = [...gpuSpecs(host, gpu), ...hostSpecs(host, machine)].map((spec) => new LineChart(spec, width));
    grid.dataset['window'] = windowName;
    grid.dataset['source'] = gpu.source;
    grid.dataset['stepSeconds'] = String(gpu.stepSeconds);
    replace(
      grid,
      charts.map((chart) => chart.element),
    );
  };
  return { element, refresh };
}

function gpuSpecs(host: HostDetail, answer: MetricSeries): ChartSpec[] {
  const devices = host.inventory?.gpus.devices ?? [];
  if (devices.length === 0) return [];
  const label = (uuid: string) => {
    const device = devices.find((d) => d.uuid === uuid);
    return device ? `GPU ${device.index}` : uuid.slice(0, 12);
  };
  // One line per GPU, in index order; a GPU without samples in the window is a line of gaps.
  const ordered = [...devices].sort((a, b) => a.index - b.index).map((d) => d.uuid);
  for (const s of answer.series) if (!ordered.includes(s.series)) ordered.push(s.series);
  const lines = (key: string): ChartLine[] =>
    ordered.map((uuid) => ({
      label: label(uuid),
      values:
        answer.series.find((s) => s.series === uuid)?.values[key] ??
        new Array<number | null>(answer.times.length).fill(null),
    }));
  const times = answer.times;
  return [
    {
      name: 'gpu-utilization',
      title: 'GPU utilisation',
      times,
      lines: lines('utilizationPercent'),
      format: percent,
      range: [0, 100],
    },
    { name: 'gpu-memory', title: 'GPU memory used', times, lines: lines('memoryUsedBytes'), format: bytes },
    {
      name: 'gpu-temperature',
      title: 'GPU temperature',
      times,
      lines: lines('temperatureC'),
      format: plain('°C'),
    },
    { name: 'gpu-power', title: 'GPU power', times, lines: lines('powerWatts'), format: plain('W') },
  ];
}

function hostSpecs(host: HostDetail, answer: MetricSeries): ChartSpec[] {
  const series = answer.series.find((s) => s.series === '');
  const times = answer.times;
  const gaps = () => new Array<number | null>(times.length).fill(null);
  const values = series?.values ?? {};
  const rates = series?.rates ?? {};
  const matching = (record: Record<string, (number | null)[]>, pattern: RegExp) =>
    Object.entries(record)
      .map(([key, line]) => ({ match: pattern.exec(key), line }))
      .filter((entry): entry is { match: RegExpExecArray; line: (number | null)[] } => entry.match !== null);
  const total = (line: (number | null)[]) => line.reduce<number>((sum, v) => sum + (v ?? 0), 0);

  const disks = matching(values, /^disk:(.+):usedBytes$/).map(({ match, line }) => ({
    label: match[1] ?? '',
    values: line,
  }));
  const interfaces = new Map<string, number>();
  for (const { match, line } of matching(rates, /^net:(.+):(rx|tx)Bytes$/)) {
    const name = match[1] ?? '';
    interfaces.set(name, (interfaces.get(name) ?? 0) + total(line));
  }
  const busiest = [...interfaces.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, MAX_INTERFACES)
    .map(([name]) => name);
  const network = busiest.flatMap((name) => [
    { label: `${name} in`, values: rates[`net:${name}:rxBytes`] ?? gaps() },
    { label: `${name} out`, values: rates[`net:${name}:txBytes`] ?? gaps() },
  ]);
  return [
    {
      name: 'host-cpu',
      title: `CPU busy (${host.cpu.cores ?? '?'} cores)`,
      times,
      lines: [{ label: 'CPU', values: values['cpuPercent'] ?? gaps() }],
      format: percent,
      range: [0, 100],
    },
    {
      name: 'host-memory',
      title: `Memory used (of ${bytes(host.memoryBytes)})`,
      times,
      lines: [{ label: 'used', values: values['memoryUsedBytes'] ?? gaps() }],
      format: bytes,
    },
    { name: 'host-disk', title: 'Disk used', times, lines: disks, format: bytes },
    {
      name: 'host-disk-io',
      title: 'Disk IO',
      times,
      lines: [
        { label: 'read', values: rates['diskIo:readBytes'] ?? gaps() },
        { label: 'write', values: rates['diskIo:writeBytes'] ?? gaps() },
      ],
      format: rate,
    },
    { name: 'host-network', title: 'Network', times, lines: network, format: rate },
  ];
}
