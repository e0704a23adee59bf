import { h } from '../dom.ts';
import type { Host } from '../types.ts';

/**
 * The worst kept health of a host's GPUs. The admin API's `gpuDevices[].health` (issue 17) carries it;
 * `unknown` where no GPU has reported health (no GPUs, simulated GPUs, agents without health checks).
 */
export type HostHealth = 'healthy' | 'degraded' | 'failed' | 'unknown';
const SEVERITY: Record<string, number> = { healthy: 1, degraded: 2, failed: 3 };

interface WithGpuHealth {
  gpuDevices?: { health?: { state?: string } | null }[];
}

export function hostHealth(host: Host): HostHealth {
  let worst: HostHealth = 'unknown';
  for (const device of (host as Host & WithGpuHealth).gpuDevices ?? []) {
    const state = device.health?.state;
    if (state && (SEVERITY[state] ?? 0) > (SEVERITY[worst] ?? 0)) worst = state as HostHealth;
  }
  return worst;
}

export function freeGpus(host: Host): number {
  return Math.max(0, host.gpus.count - host.workloads.gpusAllocated);
}

export interface FleetFilter {
  status: string;
  gpuType: string;
  region: string;
  health: string;
  minFree: number;
}

/** What the table can be ordered by, each with its sort key. */
export const SORTS = {
  name: (host: Host) => host.name.toLowerCase(),
  status: (host: Host) => host.status,
  gpus: (host: Host) => host.gpus.count,
  free: freeGpus,
  health: (host: Host) => SEVERITY[hostHealth(host)] ?? 0,
  region: (host: Host) => host.region ?? '',
  heartbeat: (host: Host) => (host.lastHeartbeatAt ? Date.parse(host.lastHeartbeatAt) : 0),
} satisfies Record<string, (host: Host) => string | number>;
export type SortKey = keyof typeof SORTS;

export interface FleetSort {
  key: SortKey;
  descending: boolean;
}

/** '' matches anything; a region of '-' matches hosts without one. */
export function filterHosts(hosts: Host[], filter: FleetFilter): Host[] {
  return hosts.filter(
    (host) =>
      (!filter.status || host.status === filter.status) &&
      (!filter.gpuType || host.gpus.models.includes(filter.gpuType)) &&
      (!filter.region || (host.region ?? '-') === filter.region) &&
      (!filter.health || hostHealth(host) === filter.health) &&
      freeGpus(host) >= filter.minFree,
  );
}

export function sortHosts(hosts: Host[], sort: FleetSort): Host[] {
  const key = SORTS[sort.key];
  const direction = sort.descending ? -1 : 1;
  return [...hosts].sort((a, b) => {
    const x = key(a);
    const y = key(b);
    // Ties keep name order either way, so equal hosts do not swap places on a reversed sort.
    return x < y ? -direction : x > y ? direction : a.name.localeCompare(b.name);
  });
}

/**
 * The filter bar above the fleet table. Its choices (GPU types, regions) follow the hosts shown; a
 * change calls `changed` at once.
 */
export function fleetFilterBar(changed: () => void) {
  const select = (name: string, label: string) => {
    const element = h('select', { attrs: { name, 'data-filter': name } });
    element.addEventListener('change', changed);
    return { element, wrapper: h('label', null, `${label} `, element) };
  };
  const status = select('status', 'Status');
  const gpuType = select('gpuType', 'GPU type');
  const region = select('region', 'Region');
  const health = select('health', 'Health');
  const minFree = h('input', {
    attrs: { type: 'number', name: 'minFree', min: 0, value: 0, 'data-filter': 'minFree' },
  });
  minFree.addEventListener('input', changed);
  const options = (element: HTMLSelectElement, values: [string, string][]) => {
    const chosen = element.value;
    element.replaceChildren(...values.map(([value, text]) => h('option', { attrs: { value } }, text)));
    element.value = values.some(([value]) => value === chosen) ? chosen : '';
  };
  options(status.element, [
    ['', 'any'],
    ...['ready', 'cordoned', 'unreachable', 'registered'].map((s): [string, string] => [s, s]),
  ]);
  options(health.element, [
    ['', 'any'],
    ...['healthy', 'degraded', 'failed', 'unknown'].map((s): [string, string] => [s, s]),
  ]);
  const element = h(
    'div',
    { class: 'filters', attrs: { 'data-filters': 'fleet' } },
    status.wrapper,
    gpuType.wrapper,
    region.wrapper,
    health.wrapper,
    h('label', null, 'Free GPUs ≥ ', minFree),
  );
  return {
    element,
    /** Offers the GPU types and regions the fleet has, keeping what is chosen. */
    offer(hosts: Host[]) {
      const models = [...new Set(hosts.flatMap((host) => host.gpus.models))].sort();
      const regions = [...new Set(hosts.map((host) => host.region ?? '-'))].sort();
      options(gpuType.element, [['', 'any'], ...models.map((m): [string, string] => [m, m])]);
      options(region.element, [
        ['', 'any'],
        ...regions.map((r): [string, string] => [r, r === '-' ? 'none' : r]),
      ]);
    },
    value(): FleetFilter {
      return {
        status: status.element.value,
        gpuType: gpuType.element.value,
        region: region.element.value,
        health: health.element.value,
        minFree: Math.max(0, Number(minFree.value) || 0),
      };
    },
  };
}
