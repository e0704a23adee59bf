import { h, replace } from '../dom.ts';
import { ago, dateTime } from '../format.ts';
import type { HostEvent } from '../types.ts';
import type { ViewContext } from '../view.ts';

const SHOWN = 50;

/** Words for the event types, as the timeline shows them. */
const LABELS: Record<HostEvent['type'], string> = {
  joined: 'joined',
  connected: 'connected',
  disconnected: 'disconnected',
  unreachable: 'unreachable',
  recovered: 'recovered',
  cordoned: 'cordoned',
  uncordoned: 'uncordoned',
  deleted: 'deleted',
  gpu_health: 'GPU health',
};

/** A host's timeline, newest first: joins, connections, unreachability, cordons, GPU health changes. */
export function hostTimeline(context: ViewContext, hostId: string) {
  const list = h('ol', { class: 'timeline', attrs: { 'data-timeline': hostId } });
  const empty = h('p', { class: 'muted', attrs: { hidden: true } }, 'Nothing recorded yet.');
  const element = h(
    'section',
    { attrs: { 'data-section': 'timeline' } },
    h('h3', null, 'Events'),
    list,
    empty,
  );

  const refresh = async () => {
    const { events } = await context.api.get<{ events: HostEvent[] }>(
      `/v2/admin/hosts/${encodeURIComponent(hostId)}/events?limit=${SHOWN}`,
    );
    replace(
      list,
      events.map((event) =>
        h(
          'li',
          { class: `event ${event.type}`, attrs: { 'data-event': event.id, 'data-event-type': event.type } },
          h('time', { attrs: { datetime: event.at, title: dateTime(event.at) } }, ago(event.at)),
          h('span', { class: `badge ${event.type}` }, LABELS[event.type] ?? event.type),
          h('span', { class: 'message' }, event.message),
        ),
      ),
    );
    empty.hidden = events.length > 0;
  };
  return { element, refresh };
}
