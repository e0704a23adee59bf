import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../auth/clock.ts';
import { createTestDatabase, type TestDatabase, testDatabaseKind } from '../testing/database.ts';
import { waitFor } from '../testing/wait.ts';
import { Dispatcher } from './dispatcher.ts';
import { JobQueue } from './jobs.ts';
import { RunpodBridge } from './runpod/bridge.ts';
import type { WorkerClient } from './worker-client.ts';

const quiet = () => ({ info() {}, warn() {}, error() {} });

/**
 * Issue 21: with an empty queue a dispatcher sleeps until its 60 s sweep; a job queued wakes it at once:
 * a kick in this process, and on PostgreSQL a NOTIFY for the other replicas' dispatchers.
 */
describe('endpoint dispatcher: wakes on a queued job, not on a poll', () => {
  let database: TestDatabase;
  let here: Dispatcher;
  let there: Dispatcher;

  beforeAll(async () => {
    database = await createTestDatabase();
    const make = () =>
      new Dispatcher({
        db: database.db,
        clock: systemClock,
        jobs: new JobQueue(database.db, systemClock),
        client: {} as WorkerClient,
        runpod: new RunpodBridge(() => {}),
        logger: quiet,
      });
    here = make();
    there = make();
    here.start();
    there.start();
  });
  afterAll(async () => {
    await here?.stop();
    await there?.stop();
    await database?.drop();
  });

  const slept = (d: Dispatcher, before: number) =>
    waitFor('a pass, then sleep', () => {
      const state = d.loopState;
      return state.passes > before && Number.isFinite(state.wakeAt) && state;
    });

  it('sleeps until the sweep with an empty queue, and passes at once when kicked', async () => {
    expect((await slept(here, 0)).wakeAt - Date.now()).toBeGreaterThan(30_000);
    const before = here.loopState.passes;
    here.kick();
    await slept(here, before);
  });

  it.runIf(testDatabaseKind() === 'postgres')('a kick on one replica wakes the others (NOTIFY)', async () => {
    const before = there.loopState.passes;
    // The LISTEN is set up as the dispatcher starts, asynchronously: a kick before it lands is not heard
    // there, so the kick is repeated until one is. `there` is never kicked in its own process.
    await waitFor('the other replica to pass', () => {
      here.kick();
      return there.loopState.passes > before;
    });
    expect((await slept(there, before)).wakeAt - Date.now()).toBeGreaterThan(30_000);
  });
});
