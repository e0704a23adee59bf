import type { Logger } from 'pino';
import { type Clock, sleep } from '../clock.ts';
import { errorMessage, FatalAgentError } from '../errors.ts';
import { type BackoffPolicy, backoffDelay, retryAfterDelay } from './backoff.ts';
import { Channel } from './channel.ts';
import { type HandshakeOptions, type HandshakeResult, handshake } from './handshake.ts';
import { type Dialer, DialRefusedError } from './transport.ts';

export interface ConnectionLoopOptions extends Omit<HandshakeOptions, 'logger'> {
  url: string;
  dial: Dialer;
  clock: Clock;
  logger: Logger;
  backoff: BackoffPolicy;
  protocolVersion: number;
  random?: () => number;
}

/**
 * Runs one welcomed connection until it ends. Throwing (or returning) from it, or the connection
 * closing, ends the session; the loop then redials.
 */
export type SessionRunner = (
  channel: Channel,
  handshake: HandshakeResult,
  signal: AbortSignal,
) => Promise<void>;

/**
 * Dial, handshake, run the session; on any non-fatal end, wait a capped, jittered backoff and redial.
 * The backoff resets after a session that got as far as welcome. A control plane that turned the dial
 * away as busy (503 with Retry-After) is redialled when it said, with jitter (retryAfterDelay). Resolves when `signal` aborts;
 * rejects with FatalAgentError when the control plane refuses for good.
 */
export async function runConnectionLoop(
  options: ConnectionLoopOptions,
  runSession: SessionRunner,
  signal: AbortSignal,
): Promise<void> {
  const { logger, clock } = options;
  let attempt = 0;
  while (!signal.aborted) {
    let welcomed = false;
    let retryAfter: number | null = null;
    try {
      await connectOnce(options, signal, async (channel, result, sessionSignal) => {
        welcomed = true;
        await runSession(channel, result, sessionSignal);
      });
    } catch (err) {
      if (err instanceof FatalAgentError) throw err;
      if (signal.aborted) break;
      if (err instanceof DialRefusedError) retryAfter = err.retryAfterMs;
      logger.warn({ err: errorMessage(err) }, 'connection to the control plane ended');
    }
    if (signal.aborted) break;
    if (welcomed) attempt = 0;
    let delayMs: number;
    if (retryAfter !== null) {
      delayMs = retryAfterDelay(retryAfter, options.random);
    } else {
      delayMs = backoffDelay(attempt, options.backoff, options.random);
      attempt += 1;
    }
    logger.info({ delayMs, attempt }, 'redialling the control plane');
    await sleep(clock, delayMs, signal);
  }
}

async function connectOnce(options: ConnectionLoopOptions, signal: AbortSignal, runSession: SessionRunner) {
  // Gathered before dialing: the control plane gives an unauthenticated socket only a short time
  // (ANVIL_AGENT_HANDSHAKE_SECONDS) to say hello, and on a busy machine gathering takes seconds.
  const gathered = await options.inventory().then(
    (value) => ({ ok: true as const, value }),
    (err: unknown) => ({ ok: false as const, err }),
  );
  const inventory = () => (gathered.ok ? Promise.resolve(gathered.value) : Promise.reject(gathered.err));
  const transport = await options.dial(options.url, signal);
  const channel = new Channel(transport, options.logger, options.protocolVersion);
  const sessionAbort = new AbortController();
  const onAbort = () => channel.close(1000, 'agent shutting down');
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    const result = await handshake(channel, { ...options, inventory });
    // The first of: the session fails or returns, the connection ends. The loser's later settlement
    // is observed here so it never surfaces as an unhandled rejection.
    const ended = channel.ended.then((reason) => Promise.reject(reason));
    const session = runSession(channel, result, sessionAbort.signal);
    ended.catch(() => {});
    session.catch(() => {});
    await Promise.race([session, ended]);
  } finally {
    signal.removeEventListener('abort', onAbort);
    sessionAbort.abort();
    if (channel.isOpen) channel.close(1000, 'session ended');
  }
}
