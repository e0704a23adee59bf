import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../auth/clock.ts';
import type { TunnelOpener } from '../fleet/tunnels/types.ts';
import { testLogger } from '../testing/app.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { waitFor } from '../testing/wait.ts';
import { HealthScheduler } from './health.ts';
import { UpstreamPool } from './upstream.ts';

/**
 * Issue 21: the proxy's health checks read their list once, then sleep until a check falls due; with
 * none configured nothing runs but the 60 s sweep. A cluster's status change anywhere (the trigger's
 * NOTIFY, migration 20261128001900) or a change through this process (kick) has the list read again.
 */
describe('proxy health checks: no polling while idle', () => {
  let database: TestDatabase;
  let health: HealthScheduler;

  beforeAll(async () => {
    database = await createTestDatabase();
    health = new HealthScheduler({
      db: database.db,
      clock: systemClock,
      pool: new UpstreamPool(() => ({}) as TunnelOpener),
      domain: 'proxy.test',
      logger: testLogger(),
      onChange: () => {},
    });
    health.start();
  });
  afterAll(async () => {
    await health?.stop();
    await database?.drop();
  });

  const slept = (before: number) =>
    waitFor('a pass, then sleep', () => {
      const state = health.loopState;
      return state.passes > before && Number.isFinite(state.wakeAt) && state;
    });

  it('sleeps until the sweep with no check configured', async () => {
    const state = await slept(0);
    expect(state.wakeAt - Date.now()).toBeGreaterThan(30_000);
  });

  it('reads its list again when a cluster status changes anywhere, or on a kick', async () => {
    let before = health.loopState.passes;
    await database.db.sql.query(`SELECT pg_notify('anvil_cluster_status', 'cluster_x')`);
    expect((await slept(before)).wakeAt - Date.now()).toBeGreaterThan(30_000);
    before = health.loopState.passes;
    health.kick();
    await slept(before);
  });
});
