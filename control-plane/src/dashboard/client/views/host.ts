import { type Child, h, replace } from '../dom.ts';
import { ago, bytes, number, percent } from '../format.ts';
import type { GpuDevice, HostDetail, MetricPoint } from '../types.ts';
import type { View, ViewContext } from '../view.ts';
import { gpuHealthSection } from './gpu-health.ts';
import { hostActions, statusBadge } from './host-actions.ts';
import { hostCharts } from './host-charts.ts';
import { hostTimeline } from './host-timeline.ts';

/**
 * Samples newer than this before the host's last heartbeat count as its current readings (agents send
 * them every few seconds); the points come oldest first, so the limit must cover the whole window.
 */
const RECENT_MS = 60_000;
const POINT_LIMIT = 10_000;

/**
 * One host: inventory, the latest GPU and host readings its agent sent, the workloads on it, then its
 * history charts and its timeline.
 */
export function hostView(context: ViewContext, hostId: string): View {
  const details = h('div');
  const charts = hostCharts(context, hostId);
  const timeline = hostTimeline(context, hostId);
  const element = h('div', { attrs: { 'data-view': 'host' } }, details, charts.element, timeline.element);
  const view: View = {
    title: 'Host',
    element,
    refresh: async () => {
      const path = `/v2/admin/hosts/${encodeURIComponent(hostId)}`;
      const { host } = await context.api.get<{ host: HostDetail }>(path);
      // Measured against the server's clock (the heartbeat), not the browser's.
      const anchor = host.lastHeartbeatAt ? Date.parse(host.lastHeartbeatAt) : Date.now();
      const from = new Date(anchor - RECENT_MS).toISOString();
      const metrics = (kind: string) =>
        context.api
          .get<{ points: MetricPoint[] }>(
            `${path}/metrics?kind=${kind}&from=${encodeURIComponent(from)}&limit=${POINT_LIMIT}`,
          )
          .then((r) => latestBySeries(r.points));
      // The host's own series is named '' (GPUs are named by UUID).
      const [gpuReadings, hostReadings] = await Promise.all([metrics('gpu'), metrics('host')]);
      replace(details, render(host, gpuReadings, hostReadings.get('') ?? null, context, view.refresh));
      await Promise.all([charts.refresh(host), timeline.refresh()]);
    },
  };
  return view;
}

function latestBySeries(points: MetricPoint[]): Map<string, MetricPoint> {
  const latest = new Map<string, MetricPoint>();
  for (const point of points) latest.set(point.series, point);
  return latest;
}

const num = (data: Record<string, unknown> | undefined, key: string): number | null => {
  const value = data?.[key];
  return typeof value === 'number' ? value : null;
};

function render(
  host: HostDetail,
  gpus: Map<string, MetricPoint>,
  hostReading: MetricPoint | null,
  context: ViewContext,
  refresh: () => Promise<void>,
): Child[] {
  const os = host.inventory?.host.os;
  const reading = hostReading?.data;
  const memoryUsed = num(reading, 'memoryUsedBytes');
  const facts: [string, string][] = [
    ['Hostname', host.hostname],
    ['Region', host.region ?? '—'],
    ['Agent', host.agentVersion ?? '—'],
    ['Last heartbeat', ago(host.lastHeartbeatAt)],
    ['OS', os ? [os.distro, os.release, os.arch].filter(Boolean).join(' ') : '—'],
    ['Kernel', os?.kernel ?? '—'],
    ['CPU', `${host.cpu.model ?? 'unknown'} (${host.cpu.cores ?? '?'} cores)`],
    ['CPU busy', percent(num(reading, 'cpuPercent'))],
    ['Load (1 min)', num(reading, 'load1')?.toFixed(2) ?? '—'],
    ['Memory', `${bytes(memoryUsed)} used of ${bytes(host.memoryBytes)}`],
    [
      'Docker',
      `${host.docker.version ?? 'unknown'}${host.docker.nvidiaRuntime ? ', NVIDIA runtime' : ', no NVIDIA runtime'}`,
    ],
    [
      'GPU driver',
      `${host.gpus.driverVersion ?? '—'} (CUDA ${host.gpus.cudaVersion ?? '—'}, via ${host.gpus.source ?? '—'})`,
    ],
  ];
  const devices: GpuDevice[] = host.inventory?.gpus.devices ?? [];
  return [
    h(
      'header',
      { class: 'title' },
      h('h2', null, host.name),
      statusBadge(host),
      host.simulated ? h('span', { class: 'tag' }, 'simulated GPUs') : null,
      hostActions(host, context, refresh),
    ),
    host.cordonReason ? h('p', { class: 'muted' }, `Cordoned: ${host.cordonReason}`) : null,
    host.docker.error ? h('p', { class: 'error' }, `Docker: ${host.docker.error}`) : null,
    host.inventory?.gpus.error ? h('p', { class: 'error' }, `GPUs: ${host.inventory.gpus.error}`) : null,
    h(
      'dl',
      { class: 'facts' },
      facts.flatMap(([term, value]) => [h('dt', null, term), h('dd', null, value)]),
    ),
    h('h3', null, `GPUs (${devices.length})`),
    devices.length === 0
      ? h('p', { class: 'muted' }, 'No GPUs reported.')
      : h(
          'table',
          { attrs: { 'data-table': 'gpus' } },
          h(
            'thead',
            null,
            h(
              'tr',
              null,
              ['#', 'Model', 'Utilisation', 'Memory', 'Temperature', 'Power', 'UUID'].map((t) =>
                h('th', null, t),
              ),
            ),
          ),
          h(
            'tbody',
            null,
            devices.map((device) => {
              const data = gpus.get(device.uuid)?.data;
              return h(
                'tr',
                { attrs: { 'data-gpu': device.uuid } },
                h('td', null, device.index),
                h('td', null, device.name),
                h('td', null, percent(num(data, 'utilizationPercent'))),
                h('td', null, `${bytes(num(data, 'memoryUsedBytes'))} / ${bytes(device.memoryTotalBytes)}`),
                h('td', null, number(num(data, 'temperatureC'), '°C')),
                h('td', null, number(num(data, 'powerWatts'), 'W')),
                h('td', { class: 'mono small' }, device.uuid),
              );
            }),
          ),
        ),
    gpuHealthSection(host, context, refresh),
    h('h3', null, `Workloads (${host.workloadList.length})`),
    host.workloadList.length === 0
      ? h('p', { class: 'muted' }, 'Nothing runs here.')
      : h(
          'table',
          { attrs: { 'data-table': 'workloads' } },
          h(
            'thead',
            null,
            h(
              'tr',
              null,
              ['Workload', 'Kind', 'Image', 'Desired', 'Phase', 'GPUs', 'Account'].map((t) =>
                h('th', null, t),
              ),
            ),
          ),
          h(
            'tbody',
            null,
            host.workloadList.map((workload) =>
              h(
                'tr',
                { attrs: { 'data-workload': workload.id } },
                h(
                  'td',
                  null,
                  h('a', { attrs: { href: `#/workloads/${encodeURIComponent(workload.id)}` } }, workload.id),
                ),
                h('td', null, workload.kind),
                h('td', { class: 'mono small' }, workload.image),
                h('td', null, workload.desired),
                h(
                  'td',
                  null,
                  workload.phase,
                  workload.hostUnreachable ? h('span', { class: 'tag' }, 'host unreachable') : null,
                ),
                h('td', null, workload.gpus.length ? workload.gpus.join(', ') : '—'),
                h('td', { class: 'mono small' }, workload.ownerAccountId),
              ),
            ),
          ),
        ),
  ];
}
