import { h, replace } from '../dom.ts';
import { dateTime } from '../format.ts';
import type { LogLine, Workload } from '../types.ts';
import type { View, ViewContext } from '../view.ts';

/** Lines kept on screen; older ones scroll away as new ones arrive. */
const MAX_LINES = 2_000;

/** A workload as its host reports it, and its container logs, followed as they arrive. */
export function workloadView(context: ViewContext, workloadId: string): View {
  const path = `/v2/admin/workloads/${encodeURIComponent(workloadId)}`;
  const header = h('div');
  const log = h('pre', { class: 'log', attrs: { 'data-log': workloadId } });
  const element = h('div', { attrs: { 'data-view': 'workload' } }, header, h('h3', null, 'Logs'), log);
  let after = 0;

  const refresh = async () => {
    const [{ workload }, logs] = await Promise.all([
      context.api.get<{ workload: Workload }>(path),
      context.api.get<{ lines: LogLine[]; next: number }>(`${path}/logs?after=${after}&limit=1000`),
    ]);
    const state = workload.actualStatus?.['state'];
    replace(
      header,
      h(
        'header',
        { class: 'title' },
        h('h2', null, workload.id),
        h('span', { class: 'badge' }, workload.phase),
      ),
      h(
        'dl',
        { class: 'facts' },
        h('dt', null, 'Host'),
        h(
          'dd',
          null,
          h('a', { attrs: { href: `#/hosts/${encodeURIComponent(workload.hostId)}` } }, workload.hostId),
        ),
        h('dt', null, 'Kind'),
        h('dd', null, workload.kind),
        // A cluster's container is the workload with the cluster's id.
        workload.kind === 'cluster' ? h('dt', null, 'Cluster') : null,
        workload.kind === 'cluster'
          ? h(
              'dd',
              null,
              h(
                'a',
                { attrs: { href: `#/clusters/${encodeURIComponent(workload.id)}`, 'data-link': 'cluster' } },
                workload.id,
              ),
            )
          : null,
        h('dt', null, 'Image'),
        h('dd', { class: 'mono' }, workload.spec.image ?? '—'),
        h('dt', null, 'Desired'),
        h('dd', null, workload.desired),
        h('dt', null, 'Container'),
        h('dd', null, typeof state === 'string' ? state : '—', ` (reported ${dateTime(workload.actualAt)})`),
      ),
    );
    const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    for (const line of logs.lines) {
      log.appendChild(h('span', { class: `line ${line.stream}` }, `${line.ts} ${line.line}\n`));
    }
    while (log.childNodes.length > MAX_LINES) log.firstChild?.remove();
    after = logs.next;
    if (stick) log.scrollTop = log.scrollHeight;
  };
  return { title: 'Workload', element, refresh };
}
