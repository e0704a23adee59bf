import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { safetySweepMs, soleProcess } from '../db/index.ts';
import { insertSimulatedHosts } from '../scheduler/simulated-hosts.ts';
import { addAccount, call } from '../testing/accounts.ts';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { clusterRow } from '../testing/cluster-row.ts';
import { createEndpoint } from '../testing/endpoints.ts';
import { waitFor } from '../testing/wait.ts';

type LoopState = { passes: number; wakeAt: number };

/**
 * Issue 21: an idle control plane does no background work. Every loop sleeps until its safety sweep
 * (60 s with replicas; 5 min in a sole process, PGlite, where every change wakes its loop in-process)
 * when nothing is due, and wakes at once on the event that gives it work: an in-process kick, a
 * NOTIFY (from the triggers of migration 20261128001900 or another replica), or the next due time the
 * data gives. Each check below reads the loop's own state (passes so far, when the next one begins), so
 * nothing here waits for time to pass.
 */
describe('a quiet idle control plane: background loops wake on events, not on a poll', () => {
  let t: TestApp;
  let loops: Record<string, () => LoopState>;

  beforeAll(async () => {
    t = await createTestApp();
    const c = t.context;
    loops = {
      'endpoint dispatcher': () => c.endpoints.dispatcher.loopState,
      'endpoint queue maintenance': () => c.endpoints.maintenance.loopState,
      'endpoint supervisor': () => c.endpoints.supervisor.loopState,
      'cluster supervisor': () => c.clusters.supervisor.loopState,
      'training supervisor': () => c.training.supervisor.loopState,
      'account webhook outbox': () => c.accounts.outbox.loopState,
    };
  });
  afterAll(async () => t?.close());

  /** Waits until the loop has run a pass since `before` and sleeps again. */
  const passedSince = (name: string, before: number) =>
    waitFor(`${name} to pass and sleep`, () => {
      const state = loops[name]!();
      return state.passes > before && Number.isFinite(state.wakeAt) && state;
    });

  it('every loop sleeps until its safety sweep when nothing is due', async () => {
    const sweepMs = safetySweepMs(t.context.db);
    expect(sweepMs).toBe(soleProcess(t.context.db) ? 300_000 : 60_000);
    for (const name of Object.keys(loops)) {
      const state = await passedSince(name, 0);
      // The old periods were 0.25 to 2 s; a sleep this long is the sweep, not a poll.
      expect(state.wakeAt - Date.now(), name).toBeGreaterThan(sweepMs - 30_000);
    }
  });

  it('a queued job wakes the dispatcher and the queue housekeeping at once; housekeeping then sleeps until the job’s ttl', async () => {
    await insertSimulatedHosts(t.context.db, { prefix: 'idle', count: 1, gpusPerHost: 2 });
    const endpointId = await createEndpoint(t, 'idle');
    const dispatcher = loops['endpoint dispatcher']!().passes;
    const maintenance = loops['endpoint queue maintenance']!().passes;
    const ran = await call(t, {
      method: 'POST',
      url: `/v2/${endpointId}/run`,
      payload: { input: { n: 1 }, policy: { ttl: 20_000 } },
    });
    expect(ran.statusCode, ran.body).toBe(200);
    // No worker: the dispatcher finds the job waiting and looks again soon (idleMs), not at the sweep.
    await passedSince('endpoint dispatcher', dispatcher);
    const housekeeping = await passedSince('endpoint queue maintenance', maintenance);
    const job = await t.context.db.prisma.endpointJob.findUniqueOrThrow({ where: { id: ran.json().id } });
    // Its next pass is due when the job's ttl runs out (the soonest thing in the data), not at the sweep.
    expect(housekeeping.wakeAt).toBeLessThanOrEqual(job.expiresAt.getTime() + 1_000);
    await call(t, { method: 'POST', url: `/v2/${endpointId}/cancel/${ran.json().id}` });
  });

  it('a recorded account webhook event wakes the outbox (the trigger’s NOTIFY)', async () => {
    const owner = await addAccount(t, 'Outbox');
    const before = loops['account webhook outbox']!().passes;
    await t.context.db.sql.query(
      `INSERT INTO webhook_events (account_id, type, data) VALUES ($1, 'member.joined', '{}')`,
      [owner.accountId],
    );
    await passedSince('account webhook outbox', before);
    await waitFor('the event handled', async () => {
      const [row] = await t.context.db.sql.query<{ delivery: string }>(
        'SELECT delivery FROM webhook_events WHERE account_id = $1',
        [owner.accountId],
      );
      return row?.delivery === 'skipped';
    });
  });

  it('a cluster created or changing status anywhere wakes the cluster supervisor (the trigger’s NOTIFY)', async () => {
    const owner = await addAccount(t, 'Clusters');
    const before = loops['cluster supervisor']!().passes;
    // Written straight to the table, as another replica or an operator would: no in-process kick.
    await t.context.db.prisma.cluster.create({
      data: clusterRow({
        id: 'cluster_idle1',
        accountId: owner.accountId,
        ownerId: owner.userId,
        name: 'idle',
        expiresAt: new Date(Date.now() + 45_000),
      }),
    });
    const state = await passedSince('cluster supervisor', before);
    // It then sleeps until the cluster's expiry, the next thing due.
    expect(state.wakeAt).toBeLessThanOrEqual(Date.now() + 46_000);
    await t.context.db.prisma.cluster.update({
      where: { id: 'cluster_idle1' },
      data: { expiresAt: null, status: 'stopped' },
    });
  });

  it('a training job or tuning change kicks the training supervisor', async () => {
    const before = loops['training supervisor']!().passes;
    t.context.training.supervisor.kick();
    await passedSince('training supervisor', before);
    const endpointSupervisor = loops['endpoint supervisor']!().passes;
    t.context.endpoints.supervisor.kick();
    await passedSince('endpoint supervisor', endpointSupervisor);
  });
});
