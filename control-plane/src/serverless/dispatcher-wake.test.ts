import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase, testDatabaseKind } from '../testing/database.ts';
import { startDispatcherPair } from '../testing/dispatchers.ts';
import { waitFor } from '../testing/wait.ts';
import type { Dispatcher } from './dispatcher.ts';

/**
 * Issue 21: with an empty queue a dispatcher sleeps until its 60 s sweep; a job queued wakes it at once:
 * a kick in this process, and on PostgreSQL a NOTIFY for the other replicas' dispatchers.
 */
describe('endpoint dispatcher: wakes on a queued job, not on a poll', () => {
  let database: TestDatabase;
  let here: Dispatcher;
  let there: Dispatcher;
  let dispatchers: ReturnType<typeof startDispatcherPair> | undefined;

  beforeAll(async () => {
    database = await createTestDatabase();
    dispatchers = startDispatcherPair(database.db);
    ({ here, there } = dispatchers);
  });
  afterAll(async () => {
    await dispatchers?.stop();
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
