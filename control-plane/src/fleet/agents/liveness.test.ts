import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { soleProcess } from '../../db/index.ts';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { connectGpuAgent, realGpuInventory } from '../../testing/gpu-agent.ts';
import { createTestApp, ManualClock, type TestApp, waitFor } from '../../testing/index.ts';

const GRACE_S = 40;

/**
 * Issue 21: the liveness check was an idle control plane's one periodic write (a statement every 5 s).
 * It now looks at the database only once a host can have gone silent: the oldest heartbeat of the ready
 * hosts plus the grace period (or a grace period from now when none is ready; in a sole process, PGlite,
 * not until a host says hello or beats here). Its timer still ticks, for this process's own sockets. Time here is a manual clock: nothing waits for it to pass.
 */
describe('the liveness check looks at the database only when a host can have gone silent', () => {
  let t: TestApp;
  let clock: ManualClock;

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-11-27T12:00:00Z'));
    t = await createTestApp({ clock, env: { ANVIL_HOST_GRACE_SECONDS: String(GRACE_S) } });
  });
  afterAll(async () => t?.close());

  it('marks a silent host at its last heartbeat + grace, without looking in between', async () => {
    const { db, fleet } = t.context;
    const looks = vi.spyOn(fleet.hosts, 'markUnreachable');
    const [hostId] = await insertSimulatedHosts(db, { prefix: 'live', count: 1, gpusPerHost: 1 });
    await db.sql.query('UPDATE hosts SET last_heartbeat_at = $2 WHERE id = $1', [hostId, clock.now()]);
    // From here on the next look is due at the host's heartbeat + grace, whichever tick looked first.
    await fleet.agents.checkLiveness();
    const before = looks.mock.calls.length;
    expect(before).toBeGreaterThan(0);

    clock.advance((GRACE_S - 1) * 1000);
    expect(await fleet.agents.checkLiveness()).toEqual([]);
    expect(looks.mock.calls.length).toBe(before);

    clock.advance(2_000);
    await fleet.agents.checkLiveness();
    await waitFor('the host marked unreachable', async () => {
      const [row] = await db.sql.query<{ state: string }>('SELECT state FROM hosts WHERE id = $1', [hostId]);
      return row?.state === 'unreachable';
    });
    // One look found it; none is due again before a grace period from now.
    expect(looks.mock.calls.length).toBe(before + 1);
    await fleet.agents.checkLiveness();
    expect(looks.mock.calls.length).toBe(before + 1);
  });

  it('with no host ready, a sole process looks again only after a host says hello (a server: every grace period)', async () => {
    const { db, fleet } = t.context;
    await db.sql.query(`UPDATE hosts SET state = 'unreachable' WHERE state = 'ready'`);
    const looks = vi.spyOn(fleet.hosts, 'markUnreachable');
    clock.advance(GRACE_S * 1000 + 1);
    await fleet.agents.checkLiveness();
    const before = looks.mock.calls.length;
    clock.advance(10 * GRACE_S * 1000);
    await fleet.agents.checkLiveness();
    const sole = soleProcess(db);
    expect(looks.mock.calls.length).toBe(sole ? before : before + 1);
    if (!sole) return;

    // A host that says hello can go silent from then on: the next look is due a grace period later.
    const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const agent = await connectGpuAgent(t, url, realGpuInventory([{ name: 'NVIDIA H100 80GB HBM3' }], true));
    try {
      clock.advance(GRACE_S * 1000 - 1_000);
      await fleet.agents.checkLiveness();
      expect(looks.mock.calls.length).toBe(before);
      clock.advance(2_000);
      await fleet.agents.checkLiveness();
      expect(looks.mock.calls.length).toBe(before + 1);
    } finally {
      agent.close();
    }
  });
});
