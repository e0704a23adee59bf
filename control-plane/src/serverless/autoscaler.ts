import type { AutoScaling } from './configuration.ts';

/** The autoscaler's memory between passes (stored on the endpoint row, so a restart keeps it). */
export interface ScaleState {
  lastScaleUpAt?: number | null;
  lastScaleDownAt?: number | null;
  /** Since when the wanted size has stayed below the current one (null: it has not). */
  belowSince?: number | null;
}

export interface ScaleInput {
  autoScaling: AutoScaling;
  maxConcurrency: number;
  /** The current target. */
  current: number;
  queued: number;
  inProgress: number;
  nowMs: number;
  state: ScaleState;
}

export interface ScaleDecision {
  target: number;
  /** What the formula asks for now, before cooldowns. */
  wanted: number;
  state: ScaleState;
  reason: 'scale_up' | 'scale_down' | 'steady' | 'cooldown' | 'bounds';
}

/** Text of the formula, for the OpenAPI description. */
export const AUTOSCALING_FORMULA =
  'wanted = clamp(ceil((queued + inProgress) / (maxConcurrency × targetUtilization / 100)), minWorkers, ' +
  'maxWorkers), where queued and inProgress count the endpoint’s IN_QUEUE and IN_PROGRESS jobs. Scale up ' +
  'to wanted at once when wanted > target and scaleUpCooldown seconds passed since the last scale-up. ' +
  'Scale down to wanted when wanted has stayed below target for scaleDownCooldown seconds and ' +
  'scaleDownCooldown seconds passed since the last scale-up. A target outside [minWorkers, maxWorkers] ' +
  '(after an update) is clamped at once. Evaluated about every second by the supervisor.';

export function wantedWorkers(
  input: Pick<ScaleInput, 'autoScaling' | 'maxConcurrency' | 'queued' | 'inProgress'>,
) {
  const { autoScaling: a, maxConcurrency } = input;
  const demand = input.queued + input.inProgress;
  const perWorker = maxConcurrency * (a.targetUtilization / 100);
  const raw = demand === 0 ? 0 : Math.ceil(demand / perWorker - 1e-9);
  return Math.min(Math.max(raw, a.minWorkers), a.maxWorkers);
}

/** One autoscaling step: the new target and state. Pure: the clock is an input. */
export function decideScale(input: ScaleInput): ScaleDecision {
  const { autoScaling: a, current, nowMs } = input;
  const state: ScaleState = { ...input.state };
  const wanted = wantedWorkers(input);
  const clamped = Math.min(Math.max(current, a.minWorkers), a.maxWorkers);
  if (clamped !== current)
    return { target: clamped, wanted, state: { ...state, belowSince: null }, reason: 'bounds' };
  const since = (at: number | null | undefined) =>
    at === null || at === undefined ? Number.POSITIVE_INFINITY : nowMs - at;
  if (wanted > current) {
    state.belowSince = null;
    if (since(state.lastScaleUpAt) >= a.scaleUpCooldown * 1000) {
      return { target: wanted, wanted, state: { ...state, lastScaleUpAt: nowMs }, reason: 'scale_up' };
    }
    return { target: current, wanted, state, reason: 'cooldown' };
  }
  if (wanted < current) {
    state.belowSince ??= nowMs;
    const cooldown = a.scaleDownCooldown * 1000;
    if (since(state.belowSince) >= cooldown && since(state.lastScaleUpAt) >= cooldown) {
      return {
        target: wanted,
        wanted,
        state: { ...state, lastScaleDownAt: nowMs, belowSince: null },
        reason: 'scale_down',
      };
    }
    return { target: current, wanted, state, reason: 'cooldown' };
  }
  return { target: current, wanted, state: { ...state, belowSince: null }, reason: 'steady' };
}
