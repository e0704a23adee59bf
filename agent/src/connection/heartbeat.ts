import { createMessage, RequestTimeoutError } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { type Clock, sleep } from '../clock.ts';
import type { Channel } from './channel.ts';

export interface HeartbeatOptions {
  /** Read before every beat, so a `set_intervals` command takes effect on the next one. */
  intervalMs: () => number;
  clock: Clock;
  logger: Logger;
  startedAt: number;
  /** Called with each measured round trip, for the agent's own stats. */
  onRoundTrip?: (ms: number) => void;
}

/**
 * Beat until the signal aborts. A beat whose ack does not come back within two intervals means the
 * connection is dead even if TCP has not noticed (a NAT dropped it): throw, and the loop redials.
 */
export async function runHeartbeats(
  channel: Channel,
  options: HeartbeatOptions,
  signal: AbortSignal,
): Promise<void> {
  const { clock } = options;
  let seq = 0;
  while (!signal.aborted) {
    const sentAt = clock.now();
    const interval = options.intervalMs();
    try {
      await channel.request(
        createMessage('heartbeat', {
          seq,
          sentAt,
          uptimeSeconds: Math.max(0, (sentAt - options.startedAt) / 1000),
        }),
        Math.max(2 * interval, 5_000),
      );
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof RequestTimeoutError)
        throw new Error(`heartbeat ${seq}: no ack within ${err.timeoutMs} ms`);
      throw err;
    }
    options.onRoundTrip?.(clock.now() - sentAt);
    seq += 1;
    await sleep(clock, Math.max(0, interval - (clock.now() - sentAt)), signal);
  }
}
