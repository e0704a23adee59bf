import type { Logger } from 'pino';
import { type Clock, sleep } from '../clock.ts';
import { backoffDelay } from '../connection/backoff.ts';
import type { ContainerRuntime } from '../docker/runtime.ts';
import { errorMessage } from '../errors.ts';

export interface WatchOptions {
  runtime: ContainerRuntime;
  /** Only this host's containers' events count. */
  hostId: string;
  /** Called when something may have changed: a Docker event, a timer, Docker coming back. */
  onChange: () => void;
  clock: Clock;
  logger: Logger;
  /** A full pass this often even without events, in case one was missed. */
  resyncMs: number;
}

/**
 * Triggers reconcile passes: on every Docker event about an Anvil container (a container died,
 * someone removed one by hand), and periodically. When the event stream breaks (dockerd
 * restarting) it resubscribes with backoff and asks for a pass, since events may have been missed.
 */
export async function watchDocker(options: WatchOptions, signal: AbortSignal): Promise<void> {
  const { clock, logger } = options;
  const periodic = (async () => {
    while (!signal.aborted) {
      await sleep(clock, options.resyncMs, signal);
      if (!signal.aborted) options.onChange();
    }
  })();

  let attempt = 0;
  while (!signal.aborted) {
    try {
      for await (const event of options.runtime.events(signal, options.hostId)) {
        attempt = 0;
        logger.debug({ containerId: event.containerId, action: event.action }, 'docker event');
        options.onChange();
      }
      if (signal.aborted) break;
      logger.warn('docker event stream ended; resubscribing');
    } catch (err) {
      if (signal.aborted) break;
      logger.warn({ err: errorMessage(err) }, 'docker event stream failed; resubscribing');
    }
    await sleep(clock, backoffDelay(attempt++, { baseMs: 500, maxMs: 15_000 }), signal);
    options.onChange();
  }
  await periodic;
}
