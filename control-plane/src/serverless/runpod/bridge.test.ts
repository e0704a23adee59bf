import { describe, expect, it } from 'vitest';
import { RunpodBridge } from './bridge.ts';

/** The RunPod protocol's state on one replica: takes held open, jobs handed out, jobs to stop. */
describe('RunPod worker bridge', () => {
  it('hands claimed jobs to the open take and answers the run with its job-done', async () => {
    let kicked = 0;
    const bridge = new RunpodBridge(() => {
      kicked += 1;
    });
    const take = bridge.take('wl_1', 2, 60_000, new AbortController().signal);
    expect(kicked).toBe(1);
    expect(bridge.takes()).toEqual(new Map([['wl_1', 2]]));
    const run = bridge.run('wl_1', 'job_1', { signal: new AbortController().signal });
    expect(bridge.deliver('wl_1', [{ id: 'job_1', input: { a: 1 } }])).toBe(true);
    expect(await take).toEqual([{ id: 'job_1', input: { a: 1 } }]);
    expect(bridge.takes().size).toBe(0);
    // Another worker's answer for this job is not taken.
    expect(bridge.done('wl_2', 'job_1', { kind: 'output', output: 'x' })).toBe(false);
    expect(await bridge.chunk('wl_1', 'job_1', 'part')).toBe(true);
    expect(bridge.outputsOf('job_1')).toEqual(['part']);
    expect(bridge.done('wl_1', 'job_1', { kind: 'output', output: 'ok' })).toBe(true);
    expect(await run).toEqual({ kind: 'output', output: 'ok' });
  });

  it('answers an empty take once the hold passes or the worker hangs up, and then delivers nothing', async () => {
    const bridge = new RunpodBridge(() => {});
    expect(await bridge.take('wl_1', 1, 10, new AbortController().signal)).toEqual([]);
    const hangUp = new AbortController();
    const take = bridge.take('wl_1', 1, 60_000, hangUp.signal);
    hangUp.abort();
    expect(await take).toEqual([]);
    expect(bridge.deliver('wl_1', [{ id: 'job_1', input: {} }])).toBe(false);
  });

  it('names a cancelled or timed-out job in the worker’s job-stop, and not an undelivered one', async () => {
    const bridge = new RunpodBridge(() => {});
    const waiting = bridge.stops('wl_1', 60_000, new AbortController().signal);
    const cancel = new AbortController();
    const run = bridge.run('wl_1', 'job_1', { signal: cancel.signal });
    cancel.abort({ stop: 'cancelled' });
    await expect(run).rejects.toEqual({ stop: 'cancelled' });
    expect(await waiting).toEqual(['job_1']);
    // Its late answer changes nothing here.
    expect(bridge.done('wl_1', 'job_1', { kind: 'output', output: 'late' })).toBe(false);
    const undelivered = new AbortController();
    const never = bridge.run('wl_1', 'job_2', { signal: undelivered.signal });
    undelivered.abort({ stop: 'undelivered' });
    await expect(never).rejects.toEqual({ stop: 'undelivered' });
    expect(await bridge.stops('wl_1', 10, new AbortController().signal)).toEqual([]);
  });
});
