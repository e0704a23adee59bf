import { systemClock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { silentLogger } from '../logger.ts';
import { Dispatcher } from '../serverless/dispatcher.ts';
import { JobQueue } from '../serverless/jobs.ts';
import { RunpodBridge } from '../serverless/runpod/bridge.ts';
import type { WorkerClient } from '../serverless/worker-client.ts';

/**
 * Two started dispatchers on one database, as two control-plane replicas would run them, for tests of
 * wake-ups within and across processes. They reach no worker: jobs are finished by the test itself.
 */
export function startDispatcherPair(db: Database): {
  here: Dispatcher;
  there: Dispatcher;
  stop(): Promise<void>;
} {
  const make = () =>
    new Dispatcher({
      db,
      clock: systemClock,
      jobs: new JobQueue(db, systemClock),
      client: {} as WorkerClient,
      runpod: new RunpodBridge(() => {}),
      logger: silentLogger,
    });
  const here = make();
  const there = make();
  here.start();
  there.start();
  return {
    here,
    there,
    async stop() {
      await here.stop();
      await there.stop();
    },
  };
}
