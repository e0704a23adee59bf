import { h, replace } from '../dom.ts';
import { ago, dateTime } from '../format.ts';
import type { AdminCluster, ClusterList } from '../types.ts';
import type { View, ViewContext } from '../view.ts';

const PAGE = 100;
const STATUSES = [
  '',
  'pending',
  'starting',
  'running',
  'stopping',
  'stopped',
  'deleting',
  'error',
  'deleted',
];

/** Every account's clusters: who holds which GPUs where, and what waits for room (and since when). */
export function clustersView(context: ViewContext, clusterId = ''): View {
  let offset = 0;
  const status = h(
    'select',
    { attrs: { name: 'status' } },
    STATUSES.map((s) => h('option', { attrs: { value: s } }, s || 'all but deleted')),
  );
  const tiles = h('section', { class: 'tiles' });
  const rows = h('tbody');
  const pager = h('p', { class: 'muted' });
  const previous = h('button', { attrs: { type: 'button', 'data-action': 'previous' } }, 'Previous');
  const next = h('button', { attrs: { type: 'button', 'data-action': 'next' } }, 'Next');
  const element = h(
    'div',
    { attrs: { 'data-view': 'clusters' } },
    h('h2', null, clusterId ? `Cluster ${clusterId}` : 'Clusters'),
    clusterId ? h('p', null, h('a', { attrs: { href: '#/clusters' } }, 'All clusters')) : null,
    h('label', null, 'Status ', status),
    tiles,
    h(
      'table',
      { attrs: { 'data-table': 'clusters' } },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          ['Cluster', 'Account', 'Status', 'GPUs', 'Host', 'USD/h', 'Created'].map((t) => h('th', null, t)),
        ),
      ),
      rows,
    ),
    h('div', { class: 'actions' }, previous, next, pager),
  );

  const refresh = async () => {
    const query = new URLSearchParams({ limit: String(PAGE), offset: String(offset) });
    if (status.value) query.set('status', status.value);
    // One cluster (a link from its workload): whatever its status, deleted included.
    if (clusterId) {
      query.set('id', clusterId);
      if (!status.value) query.set('status', STATUSES.filter(Boolean).join(','));
    }
    const list = await context.api.get<ClusterList>(`/v2/admin/clusters?${query}`);
    const tile = (label: string, value: string | number, name: string) =>
      h(
        'div',
        { class: 'tile', attrs: { 'data-tile': name } },
        h('strong', null, String(value)),
        h('span', null, label),
      );
    replace(
      tiles,
      tile('clusters', list.pagination.total, 'total'),
      Object.entries(list.summary.byStatus).map(([name, count]) => tile(name, count, name)),
      tile('GPUs held', list.summary.gpusHeld, 'gpus-held'),
      tile('GPUs waiting', list.summary.pendingGpus, 'gpus-waiting'),
    );
    replace(rows, list.clusters.map(row));
    const last = list.pagination.offset + list.clusters.length;
    pager.textContent = list.pagination.total
      ? `${list.pagination.offset + 1}–${last} of ${list.pagination.total}`
      : 'No clusters.';
    previous.disabled = offset === 0;
    next.disabled = !list.pagination.hasMore;
  };

  status.addEventListener('change', () => {
    offset = 0;
    void refresh().catch((error: Error) => context.notify(error.message, 'error'));
  });
  previous.addEventListener('click', () => {
    offset = Math.max(0, offset - PAGE);
    void refresh().catch((error: Error) => context.notify(error.message, 'error'));
  });
  next.addEventListener('click', () => {
    offset += PAGE;
    void refresh().catch((error: Error) => context.notify(error.message, 'error'));
  });
  return { title: 'Clusters', element, refresh };
}

function row(cluster: AdminCluster): HTMLElement {
  return h(
    'tr',
    { attrs: { 'data-cluster': cluster.id } },
    h(
      'td',
      null,
      h('a', { attrs: { href: `#/clusters/${encodeURIComponent(cluster.id)}` } }, cluster.name),
      h('div', { class: 'mono small muted' }, cluster.id),
      // Placed clusters have a container: the workload of the same id, with its logs.
      cluster.hostId
        ? h(
            'a',
            {
              class: 'small',
              attrs: { href: `#/workloads/${encodeURIComponent(cluster.id)}`, 'data-link': 'workload' },
            },
            'workload and logs',
          )
        : null,
    ),
    h(
      'td',
      null,
      cluster.account.name || cluster.account.id,
      h('div', { class: 'muted small' }, cluster.account.tier),
    ),
    h(
      'td',
      null,
      h(
        'span',
        { class: `badge ${cluster.status}`, attrs: { 'data-status': cluster.status } },
        cluster.status,
      ),
      cluster.queuedAt
        ? h('div', { class: 'muted small' }, `waiting for room since ${ago(cluster.queuedAt)}`)
        : null,
      cluster.statusReason ? h('div', { class: 'muted small' }, cluster.statusReason) : null,
    ),
    h(
      'td',
      null,
      `${cluster.gpuCount} × ${cluster.gpuType}`,
      cluster.gpuIndices.length
        ? h('div', { class: 'muted small' }, `GPU ${cluster.gpuIndices.join(', ')}`)
        : null,
    ),
    h(
      'td',
      null,
      cluster.hostId
        ? h('a', { attrs: { href: `#/hosts/${encodeURIComponent(cluster.hostId)}` } }, cluster.hostId)
        : '—',
    ),
    h('td', null, cluster.hourlyRate.toFixed(2)),
    h('td', null, dateTime(cluster.createdAt)),
  );
}
