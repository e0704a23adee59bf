import type Dockerode from 'dockerode';
import { LABELS } from './labels.ts';

export interface ContainerEvent {
  containerId: string;
  /** Docker's action: create, start, die, stop, destroy, oom, ... */
  action: string;
  labels: Record<string, string>;
}

/**
 * Docker's event stream for this host's Anvil containers only. Yields until the signal aborts or the stream
 * ends (dockerd restarting); the caller re-subscribes and resyncs, since events may have been missed.
 */
export async function* containerEvents(
  docker: Dockerode,
  signal: AbortSignal,
  hostId: string,
): AsyncGenerator<ContainerEvent> {
  // Filtered by our host too: on an engine shared with other hosts (or tests), their containers' events
  // would each cost this agent a reconcile pass.
  const stream = (await docker.getEvents({
    filters: { type: ['container'], label: [`${LABELS.managed}=true`, `${LABELS.host}=${hostId}`] },
  })) as NodeJS.ReadableStream & { destroy(): void };
  const onAbort = () => stream.destroy();
  // The signal may have fired while the subscription was being set up.
  if (signal.aborted) onAbort();
  signal.addEventListener('abort', onAbort, { once: true });
  let partial = '';
  try {
    for await (const chunk of stream) {
      partial += chunk.toString();
      const lines = partial.split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.trim()) continue;
        const event = JSON.parse(line) as {
          id?: string;
          Action?: string;
          status?: string;
          Actor?: { ID?: string; Attributes?: Record<string, string> };
        };
        const containerId = event.Actor?.ID ?? event.id;
        if (!containerId) continue;
        yield {
          containerId,
          action: event.Action ?? event.status ?? '',
          labels: event.Actor?.Attributes ?? {},
        };
      }
    }
  } catch (err) {
    if (!signal.aborted) throw err;
  } finally {
    signal.removeEventListener('abort', onAbort);
    stream.destroy();
  }
}
