import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Actor } from '../accounts/access.ts';
import type { AccountServices } from '../accounts/index.ts';
import { systemClock } from '../auth/clock.ts';
import type { Endpoint, EndpointJob } from '../db/generated/client.ts';
import { createTestDatabase, type TestDatabase, testDatabaseKind } from '../testing/database.ts';
import { startDispatcherPair } from '../testing/dispatchers.ts';
import { endpointRow } from '../testing/endpoint-row.ts';
import { waitFor } from '../testing/wait.ts';
import type { Dispatcher } from './dispatcher.ts';
import { ExecutionService } from './execution.ts';
import { JobQueue } from './jobs.ts';
import type { EndpointService } from './service.ts';

/** The safety-net look of a waiting runsync, made longer than any test: only a wake-up can answer it. */
const NEVER_MS = 3_600_000;

/** A queue that counts its reads of one job, and can act while the first one is under way. */
class CountingQueue extends JobQueue {
  finds = 0;
  duringFirstFind: (() => Promise<void>) | null = null;

  override async find(endpointId: string, jobId: string): Promise<EndpointJob> {
    this.finds += 1;
    const row = await super.find(endpointId, jobId);
    const act = this.duringFirstFind;
    this.duringFirstFind = null;
    await act?.();
    return row;
  }
}

/**
 * Issue 19 (runsync overhead): a waiting runsync or status-sync answers as the job ends, woken by the
 * dispatcher's signal in this process (with the final row, so the job is not read again) and by a NOTIFY
 * from the replica that finished it; the look every few seconds is a safety net, never the answer.
 */
describe('runsync waits wake on the job’s end, not on a poll', () => {
  let database: TestDatabase;
  let endpoint: Endpoint;
  let here: Dispatcher;
  let there: Dispatcher;
  let dispatchers: ReturnType<typeof startDispatcherPair> | undefined;
  const actor = {} as Actor;

  beforeAll(async () => {
    database = await createTestDatabase();
    const prisma = database.db.prisma;
    const accountId = newId('acc');
    await prisma.account.create({ data: { id: accountId, name: 'a' } });
    endpoint = await prisma.endpoint.create({ data: endpointRow({ accountId, maxConcurrency: 8 }) });
    await prisma.endpointWorker.create({
      data: {
        id: 'wl_wake',
        endpointId: endpoint.id,
        accountId,
        hostId: 'host_x',
        configVersion: 1,
        status: 'ready',
      },
    });
    dispatchers = startDispatcherPair(database.db);
    ({ here, there } = dispatchers);
  });
  afterAll(async () => {
    await dispatchers?.stop();
    await database?.drop();
  });

  const execution = (dispatcher: Dispatcher, jobs: JobQueue) =>
    new ExecutionService({
      db: database.db,
      clock: systemClock,
      accounts: {} as AccountServices,
      endpoints: { require: async () => endpoint } as unknown as EndpointService,
      jobs,
      dispatcher,
      kickSupervisor: () => {},
      allowPrivateWebhooks: false,
      waitPollMs: NEVER_MS,
    });

  /** A queued job, then claimed and finished as a worker's answer is recorded; returns the final row. */
  const queue = new Map<string, JobQueue>();
  const submit = async () => {
    const jobs = new JobQueue(database.db, systemClock);
    const job = await jobs.submit(
      endpoint,
      { accountId: endpoint.accountId, userId: null, keyId: null },
      {
        input: { n: 1 },
      },
    );
    queue.set(job.id, jobs);
    return job.id;
  };
  const finish = async (jobId: string) => {
    const jobs = queue.get(jobId)!;
    const [claimed] = await jobs.claim(
      { id: 'wl_wake', endpointId: endpoint.id, maxConcurrency: 8 },
      here.replicaId,
      60_000,
    );
    expect(claimed?.id).toBe(jobId);
    const done = await jobs.finish(jobId, 'wl_wake', { status: 'COMPLETED', output: { ok: true } });
    expect(done?.status).toBe('COMPLETED');
    return done!;
  };

  it('answers with the row the dispatcher hands over, even when the job ends during the first read', async () => {
    const jobId = await submit();
    const jobs = new CountingQueue(database.db, systemClock);
    // The job ends (and its end is signalled) after the waiter read it unfinished and before it sleeps.
    jobs.duringFirstFind = async () => here.notifyFinished(jobId, await finish(jobId));
    const answer = await execution(here, jobs).statusSync(actor, endpoint.id, jobId, 60_000);
    expect(answer).toMatchObject({ id: jobId, status: 'COMPLETED', output: { ok: true } });
    expect(jobs.finds).toBe(1);
  });

  it('a sleeping waiter is woken by the signal and answers without reading the job again', async () => {
    const jobId = await submit();
    const jobs = new CountingQueue(database.db, systemClock);
    const waiting = execution(here, jobs).statusSync(actor, endpoint.id, jobId, 60_000);
    await waitFor('the waiter’s first read', () => jobs.finds === 1);
    here.notifyFinished(jobId, await finish(jobId));
    expect(await waiting).toMatchObject({ id: jobId, status: 'COMPLETED' });
    expect(jobs.finds).toBe(1);
  });

  it('a queued job kicks the supervisor only when autoscaling sizes the workers from the queue', async () => {
    let kicks = 0;
    let dispatches = 0;
    const run = (autoScaling: Record<string, unknown>) =>
      new ExecutionService({
        db: database.db,
        clock: systemClock,
        accounts: { resources: { recordExecution: async () => {} } } as unknown as AccountServices,
        endpoints: {
          require: async () => ({ ...endpoint, autoScaling }),
        } as unknown as EndpointService,
        jobs: new JobQueue(database.db, systemClock),
        dispatcher: { kick: () => (dispatches += 1) } as unknown as Dispatcher,
        kickSupervisor: () => (kicks += 1),
        allowPrivateWebhooks: false,
      }).runAsync({ principal: { userId: null, keyId: null } } as unknown as Actor, endpoint.id, {
        input: {},
      });
    await run({ enabled: false });
    expect({ dispatches, kicks }).toEqual({ dispatches: 1, kicks: 0 });
    await run({ enabled: true, minWorkers: 0, maxWorkers: 2 });
    expect({ dispatches, kicks }).toEqual({ dispatches: 2, kicks: 1 });
    // Nothing runs them here: out of the way of the other tests' claims.
    expect(await new JobQueue(database.db, systemClock).purge(endpoint.id)).toBe(2);
  });

  it.runIf(testDatabaseKind() === 'postgres')(
    'a job finished on another replica wakes the waiter here (NOTIFY), which reads it once',
    async () => {
      const jobId = await submit();
      const jobs = new CountingQueue(database.db, systemClock);
      let answered = false;
      const waiting = execution(there, jobs)
        .statusSync(actor, endpoint.id, jobId, 600_000)
        .finally(() => {
          answered = true;
        });
      await waitFor('the waiter’s first read', () => jobs.finds === 1);
      await finish(jobId);
      // The LISTEN is set up as the dispatcher starts, asynchronously: an announcement before it lands is
      // not heard there, so it is repeated until one is. `there` never finishes the job itself.
      await waitFor('the other replica to answer', () => {
        if (!answered) here.notifyFinished(jobId);
        return answered;
      });
      expect(await waiting).toMatchObject({ id: jobId, status: 'COMPLETED' });
      expect(jobs.finds).toBe(2);
    },
  );
});
