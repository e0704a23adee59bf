import { describe, expect, it } from 'vitest';
import { decideScale, type ScaleInput, wantedWorkers } from './autoscaler.ts';
import type { AutoScaling } from './configuration.ts';

const scaling: AutoScaling = {
  enabled: true,
  minWorkers: 0,
  maxWorkers: 4,
  targetUtilization: 50,
  scaleUpCooldown: 10,
  scaleDownCooldown: 30,
};
const input = (over: Partial<ScaleInput>): ScaleInput => ({
  autoScaling: scaling,
  maxConcurrency: 2,
  current: 1,
  queued: 0,
  inProgress: 0,
  nowMs: 1_000_000,
  state: {},
  ...over,
});

describe('autoscaler', () => {
  it('wants ceil(demand / (maxConcurrency × targetUtilization)) workers within the bounds', () => {
    expect(wantedWorkers(input({ queued: 0 }))).toBe(0);
    expect(wantedWorkers(input({ queued: 1 }))).toBe(1); // 1 / (2 × 0.5)
    expect(wantedWorkers(input({ queued: 2, inProgress: 1 }))).toBe(3);
    expect(wantedWorkers(input({ queued: 50 }))).toBe(4);
    expect(wantedWorkers(input({ autoScaling: { ...scaling, minWorkers: 2 } }))).toBe(2);
  });

  it('scales up at once, then waits scaleUpCooldown before the next step up', () => {
    const up = decideScale(input({ queued: 3 }));
    expect(up).toMatchObject({ target: 3, reason: 'scale_up', state: { lastScaleUpAt: 1_000_000 } });
    const held = decideScale(input({ current: 3, queued: 10, state: up.state, nowMs: 1_005_000 }));
    expect(held).toMatchObject({ target: 3, wanted: 4, reason: 'cooldown' });
    const later = decideScale(input({ current: 3, queued: 10, state: up.state, nowMs: 1_010_000 }));
    expect(later).toMatchObject({ target: 4, reason: 'scale_up' });
  });

  it('scales down only after demand stayed low for scaleDownCooldown', () => {
    const first = decideScale(input({ current: 3, nowMs: 0 }));
    expect(first).toMatchObject({ target: 3, reason: 'cooldown', state: { belowSince: 0 } });
    const mid = decideScale(input({ current: 3, nowMs: 29_999, state: first.state }));
    expect(mid.target).toBe(3);
    // Demand came back in between: the wait starts again.
    const busy = decideScale(input({ current: 3, queued: 5, nowMs: 29_999, state: mid.state }));
    expect(busy.state.belowSince).toBeNull();
    const down = decideScale(input({ current: 3, nowMs: 30_000, state: first.state }));
    expect(down).toMatchObject({
      target: 0,
      reason: 'scale_down',
      state: { lastScaleDownAt: 30_000, belowSince: null },
    });
  });

  it('does not scale down within scaleDownCooldown of a scale-up, and clamps a target outside the bounds', () => {
    const state = { lastScaleUpAt: 0, belowSince: 0 };
    expect(decideScale(input({ current: 3, nowMs: 20_000, state })).target).toBe(3);
    expect(decideScale(input({ current: 6, nowMs: 0 }))).toMatchObject({ target: 4, reason: 'bounds' });
    expect(decideScale(input({ current: 0, autoScaling: { ...scaling, minWorkers: 1 } }))).toMatchObject({
      target: 1,
      reason: 'bounds',
    });
  });
});
