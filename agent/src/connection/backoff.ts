export interface BackoffPolicy {
  baseMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, maxMs: 60_000 };

/**
 * Capped exponential backoff with "equal jitter": half the step is fixed, half random. The fixed half
 * keeps a flapping control plane from being hammered; the random half spreads a fleet of agents that
 * all lost the same control plane at once, so they do not reconnect in lockstep.
 */
export function backoffDelay(
  attempt: number,
  policy: BackoffPolicy,
  random: () => number = Math.random,
): number {
  const step = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(Math.max(attempt, 0), 30));
  return Math.round(step / 2 + random() * (step / 2));
}

/**
 * The wait when the control plane said when to come back (Retry-After on a busy 503): never earlier
 * than asked, plus up to a quarter more (at least 1 s) at random, so the agents it turned away in the
 * same second do not all return in the same instant. The exponential step does not grow meanwhile:
 * a busy control plane is not a failing one.
 */
export function retryAfterDelay(hintMs: number, random: () => number = Math.random): number {
  return Math.round(hintMs + random() * Math.max(1_000, hintMs / 4));
}
