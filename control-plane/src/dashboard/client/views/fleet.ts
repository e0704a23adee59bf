import { h, replace } from '../dom.ts';
import { ago, bytes } from '../format.ts';
import type { Host } from '../types.ts';
import type { View, ViewContext } from '../view.ts';
import {
  type FleetSort,
  filterHosts,
  fleetFilterBar,
  freeGpus,
  hostHealth,
  type SortKey,
  sortHosts,
} from './fleet-filters.ts';
import { hostActions, statusBadge } from './host-actions.ts';

/** The table's columns: a header, and what it sorts by when clicked (none for the actions). */
const COLUMNS: [string, SortKey | null][] = [
  ['Host', 'name'],
  ['Status', 'status'],
  ['GPUs', 'gpus'],
  ['Free GPUs', 'free'],
  ['Health', 'health'],
  ['Workloads', null],
  ['Memory', null],
  ['Heartbeat', 'heartbeat'],
  ['Agent', null],
  ['', null],
];

/**
 * Every host: a summary of the fleet's capacity, then one row per host with its actions, filtered
 * (status, GPU type, region, GPU health, free GPUs) and sorted by a column's header.
 */
export function fleetView(context: ViewContext): View {
  const summary = h('section', { class: 'tiles' });
  const rows = h('tbody');
  let hosts: Host[] = [];
  let sort: FleetSort = { key: 'name', descending: false };
  const filters = fleetFilterBar(() => draw());
  const headers = COLUMNS.map(([title, key]) => {
    if (!key) return h('th', null, title);
    const button = h('button', { class: 'sort', attrs: { type: 'button', 'data-sort': key } }, title);
    button.addEventListener('click', () => {
      sort = { key, descending: sort.key === key ? !sort.descending : false };
      draw();
    });
    return h('th', { attrs: { 'data-column': key } }, button);
  });
  const table = h(
    'table',
    { attrs: { 'data-table': 'hosts' } },
    h('thead', null, h('tr', null, headers)),
    rows,
  );
  const empty = h(
    'p',
    { class: 'muted', attrs: { hidden: true } },
    'No hosts yet: create a join token and install the agent.',
  );
  const none = h('p', { class: 'muted', attrs: { hidden: true, 'data-no-match': true } }, 'No host matches.');
  const element = h('div', null, summary, filters.element, table, none, empty);

  const draw = () => {
    const shown = sortHosts(filterHosts(hosts, filters.value()), sort);
    for (const th of headers) {
      const key = th.getAttribute('data-column');
      if (key === sort.key) th.setAttribute('aria-sort', sort.descending ? 'descending' : 'ascending');
      else th.removeAttribute('aria-sort');
    }
    replace(
      rows,
      shown.map((host) => row(host, context, refresh)),
    );
    table.hidden = hosts.length === 0;
    empty.hidden = hosts.length > 0;
    none.hidden = hosts.length === 0 || shown.length > 0;
  };
  const refresh = async () => {
    hosts = (await context.api.get<{ hosts: Host[] }>('/v2/admin/hosts')).hosts;
    replace(summary, tiles(hosts));
    filters.offer(hosts);
    draw();
  };
  return { title: 'Fleet', element, refresh };
}

function tiles(hosts: Host[]): HTMLElement[] {
  const count = (status: Host['status']) => hosts.filter((host) => host.status === status).length;
  const gpus = hosts.reduce((sum, host) => sum + host.gpus.count, 0);
  const allocated = hosts.reduce((sum, host) => sum + host.workloads.gpusAllocated, 0);
  const running = hosts.reduce((sum, host) => sum + host.workloads.running, 0);
  const tile = (label: string, value: string, name: string) =>
    h(
      'div',
      { class: 'tile', attrs: { 'data-tile': name } },
      h('strong', null, value),
      h('span', null, label),
    );
  return [
    tile('hosts ready', `${count('ready')} / ${hosts.length}`, 'ready'),
    tile('unreachable', String(count('unreachable')), 'unreachable'),
    tile('cordoned', String(count('cordoned')), 'cordoned'),
    tile('GPUs allocated', `${allocated} / ${gpus}`, 'gpus'),
    tile('workloads running', String(running), 'workloads'),
  ];
}

function row(host: Host, context: ViewContext, refresh: () => Promise<void>): HTMLElement {
  const models = host.gpus.models.join(', ') || (host.gpus.count === 0 ? 'none' : 'unknown');
  return h(
    'tr',
    { attrs: { 'data-host': host.id } },
    h(
      'td',
      null,
      h('a', { attrs: { href: `#/hosts/${encodeURIComponent(host.id)}` } }, host.name),
      h('div', { class: 'muted small' }, host.hostname, host.region ? ` · ${host.region}` : ''),
    ),
    h(
      'td',
      null,
      statusBadge(host),
      host.cordonReason ? h('div', { class: 'muted small' }, host.cordonReason) : null,
    ),
    h(
      'td',
      null,
      `${host.gpus.count} × ${models}`,
      host.gpus.simulated ? h('span', { class: 'tag' }, 'simulated') : null,
    ),
    h(
      'td',
      { attrs: { 'data-free': freeGpus(host) } },
      `${freeGpus(host)} of ${host.gpus.count}`,
      h('div', { class: 'muted small' }, `${host.workloads.gpusAllocated} allocated`),
    ),
    h(
      'td',
      { attrs: { 'data-health': hostHealth(host) } },
      hostHealth(host) === 'unknown' ? '—' : hostHealth(host),
    ),
    h('td', null, `${host.workloads.running} running / ${host.workloads.total}`),
    h('td', null, bytes(host.memoryBytes)),
    h('td', null, ago(host.lastHeartbeatAt)),
    h('td', null, host.agentVersion ?? '—'),
    h('td', null, hostActions(host, context, refresh)),
  );
}
