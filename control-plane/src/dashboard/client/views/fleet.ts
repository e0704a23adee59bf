import { h, replace } from '../dom.ts';
import { ago, bytes } from '../format.ts';
import type { Host } from '../types.ts';
import type { View, ViewContext } from '../view.ts';
import { hostActions, statusBadge } from './host-actions.ts';

/** Every host: a summary of the fleet's capacity, then one row per host with its actions. */
export function fleetView(context: ViewContext): View {
  const summary = h('section', { class: 'tiles' });
  const rows = h('tbody');
  const table = h(
    'table',
    { attrs: { 'data-table': 'hosts' } },
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        ['Host', 'Status', 'GPUs', 'Allocated', 'Workloads', 'Memory', 'Heartbeat', 'Agent', ''].map((t) =>
          h('th', null, t),
        ),
      ),
    ),
    rows,
  );
  const empty = h(
    'p',
    { class: 'muted', attrs: { hidden: true } },
    'No hosts yet: create a join token and install the agent.',
  );
  const element = h('div', null, summary, table, empty);

  const refresh = async () => {
    const { hosts } = await context.api.get<{ hosts: Host[] }>('/v2/admin/hosts');
    replace(summary, tiles(hosts));
    replace(
      rows,
      hosts.map((host) => row(host, context, refresh)),
    );
    empty.hidden = hosts.length > 0;
    table.hidden = hosts.length === 0;
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
    h('td', null, `${host.workloads.gpusAllocated} / ${host.gpus.count}`),
    h('td', null, `${host.workloads.running} running / ${host.workloads.total}`),
    h('td', null, bytes(host.memoryBytes)),
    h('td', null, ago(host.lastHeartbeatAt)),
    h('td', null, host.agentVersion ?? '—'),
    h('td', null, hostActions(host, context, refresh)),
  );
}
