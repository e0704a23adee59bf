import { describe, expect, it } from 'vitest';
import { waitFor } from '../testing/wait.ts';
import { PassLoop } from './pass-loop.ts';

describe('PassLoop', () => {
  it('runs one pass at a time, brings the next forward when kicked, and waits for the last on stop', async () => {
    let active = 0;
    let overlapped = false;
    const kicksSeen: boolean[] = [];
    let release: () => void = () => {};
    const loop: PassLoop<boolean> = new PassLoop({
      run: async (kicked) => {
        kicksSeen.push(kicked);
        active++;
        if (active > 1) overlapped = true;
        await new Promise<void>((resolve) => (release = resolve));
        active--;
        return false;
      },
      after: () => 60_000,
      failedMs: 60_000,
      onError: () => {},
    });
    loop.start();
    await waitFor('first pass', async () => kicksSeen.length === 1);
    // Kicks during a pass start nothing alongside it; the next pass follows at once instead of in 60 s.
    loop.kick();
    loop.kick();
    release();
    await waitFor('second pass', async () => kicksSeen.length === 2);
    expect(kicksSeen).toEqual([true, true]);
    const stopped = loop.stop();
    let done = false;
    void stopped.then(() => (done = true));
    // The pass holds until released, so stop() cannot have resolved, however long this waited: one turn
    // of the event loop lets any promise that could settle do so.
    await new Promise((resolve) => setImmediate(resolve));
    expect(done).toBe(false);
    release();
    await stopped;
    // A stopped loop schedules nothing when kicked (no timer: nothing to wait for).
    loop.kick();
    expect(loop.wakeAt).toBe(Number.POSITIVE_INFINITY);
    expect(kicksSeen).toHaveLength(2);
    expect(overlapped).toBe(false);
  });

  it('reports a failed pass and goes on after failedMs', async () => {
    const errors: unknown[] = [];
    let passes = 0;
    const loop = new PassLoop({
      run: async () => {
        passes++;
        if (passes === 1) throw new Error('database gone');
        return 0;
      },
      after: () => 60_000,
      failedMs: 10,
      onError: (error) => errors.push(error),
    });
    loop.start();
    await waitFor('a pass after the failure', async () => passes === 2);
    expect(errors).toEqual([new Error('database gone')]);
    await loop.stop();
  });
});
