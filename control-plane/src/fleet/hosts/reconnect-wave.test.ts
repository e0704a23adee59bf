import { randomUUID } from 'node:crypto';
import { newId } from '@anvil/shared';
import type { Inventory } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../auth/clock.ts';
import { createTestDatabase, type TestDatabase } from '../../testing/database.ts';
import { realGpuInventory } from '../../testing/gpu-agent.ts';
import { FleetEvents } from './events.ts';
import { HostService } from './hosts.ts';
import { generateHostCredential, hashSecret } from './secrets.ts';

/**
 * A reconnect wave (every agent of the fleet redialling after a control-plane restart) on the real
 * database: hellos that arrive together are authenticated and recorded in a few statements, and an
 * agent that comes back with the inventory it had is not written again. Row triggers made by the test
 * count the transactions that touched hosts and the rows whose inventory column was written.
 */

vi.setConfig({ testTimeout: 240_000, hookTimeout: 240_000 });

const HOSTS = 40;

const WRITE_LOG = `
  CREATE TABLE test_host_writes (txid bigint NOT NULL, inventory boolean NOT NULL);
  CREATE FUNCTION test_log_host_write() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO test_host_writes VALUES (txid_current(), TG_ARGV[0]::boolean);
    RETURN NULL;
  END $$;
  CREATE TRIGGER test_host_row_written AFTER UPDATE ON hosts
    FOR EACH ROW EXECUTE FUNCTION test_log_host_write('false');
  CREATE TRIGGER test_host_inventory_written AFTER UPDATE OF inventory ON hosts
    FOR EACH ROW EXECUTE FUNCTION test_log_host_write('true');`;

const DROP_WRITE_LOG = `
  DROP TRIGGER IF EXISTS test_host_row_written ON hosts;
  DROP TRIGGER IF EXISTS test_host_inventory_written ON hosts;
  DROP FUNCTION IF EXISTS test_log_host_write();
  DROP TABLE IF EXISTS test_host_writes;`;

const inventories = new Map<number, Inventory>();

/** Host i's inventory, the same every time it is asked for (as an agent reuses its last one). */
function inventoryOf(i: number): Inventory {
  let inventory = inventories.get(i);
  if (!inventory) {
    const gathered = realGpuInventory([{ name: 'NVIDIA H100 80GB HBM3' }], true);
    inventory = { ...gathered, host: { ...gathered.host, hostname: `wave-${i}` } };
    inventories.set(i, inventory);
  }
  return JSON.parse(JSON.stringify(inventory)) as Inventory;
}

describe('a reconnect wave', () => {
  let t: TestDatabase;
  let hosts: HostService;
  const fleet: { id: string; credential: string }[] = [];

  beforeAll(async () => {
    t = await createTestDatabase();
    hosts = new HostService(t.db, systemClock, new FleetEvents());
    for (let i = 0; i < HOSTS; i++) {
      const credential = generateHostCredential();
      const host = await t.db.prisma.host.create({
        data: {
          id: newId('host'),
          name: `wave-${i}`,
          hostname: `wave-${i}`,
          credentialHash: hashSecret(credential),
        },
      });
      fleet.push({ id: host.id, credential });
    }
    await t.db.sql.exec(DROP_WRITE_LOG);
    await t.db.sql.exec(WRITE_LOG);
  });

  afterAll(async () => {
    await t?.db.sql.exec(DROP_WRITE_LOG).catch(() => {});
    await t?.drop();
  });

  /** Every host says hello at once, with `inventory(i)`: authenticated, then recorded, as the gateway does. */
  async function wave(inventory: (i: number) => Inventory, only = fleet): Promise<void> {
    await Promise.all(
      only.map(async ({ id, credential }) => {
        const auth = await hosts.authenticate(id, credential);
        if (!auth.ok) throw new Error(auth.reason);
        const i = fleet.findIndex((h) => h.id === id);
        await hosts.markConnected(id, {
          replicaId: 'cp_test',
          connectionId: randomUUID(),
          agentVersion: '1.0.0',
          protocolVersion: 1,
          inventory: inventory(i),
          storedInventory: auth.host.inventory,
        });
      }),
    );
  }

  async function writes(): Promise<{ transactions: number; rows: number; inventories: number }> {
    const [row] = await t.db.sql.query<{ transactions: number; rows: number; inventories: number }>(
      `SELECT count(DISTINCT txid)::int AS transactions, count(*) FILTER (WHERE NOT inventory)::int AS rows,
              count(*) FILTER (WHERE inventory)::int AS inventories FROM test_host_writes`,
    );
    await t.db.sql.exec('DELETE FROM test_host_writes');
    return row!;
  }

  it('records hellos arriving together in a few statements, and rewrites no unchanged inventory', async () => {
    await wave(inventoryOf);
    const first = await writes();
    expect(first.rows).toBe(HOSTS);
    // One statement for the first hello, one or two for the rest (PGlite takes 32 rows at a time).
    expect(first.transactions).toBeLessThanOrEqual(3);
    expect(first.inventories).toBe(HOSTS);

    // The control plane restarts; every agent redials with the inventory it sent before.
    await wave(inventoryOf);
    const again = await writes();
    expect(again.rows).toBe(HOSTS);
    expect(again.transactions).toBeLessThanOrEqual(3);
    expect(again.inventories).toBe(0);

    // One host comes back with a new GPU: only its inventory is written, and it is the new one.
    const changed = fleet[7]!;
    const upgraded = realGpuInventory([{ name: 'NVIDIA H200' }], true);
    await wave(() => upgraded, [changed]);
    expect((await writes()).inventories).toBe(1);
    const stored = await t.db.prisma.host.findUniqueOrThrow({ where: { id: changed.id } });
    expect(stored.inventory).toEqual(upgraded);
    expect(stored.state).toBe('ready');

    // Every hello is on the timeline, with the connection it holds now.
    const events = await t.db.prisma.hostEvent.count({ where: { type: 'connected' } });
    expect(events).toBe(2 * HOSTS + 1);

    // The control plane shuts down: every connection closes at once, and is recorded together.
    const held = await t.db.prisma.host.findMany({ select: { id: true, connectionId: true } });
    await Promise.all(held.map((h) => hosts.markDisconnected(h.id, h.connectionId!)));
    const closed = await writes();
    expect(closed.rows).toBe(HOSTS);
    expect(closed.transactions).toBeLessThanOrEqual(3);
    expect(await t.db.prisma.host.count({ where: { connectionId: { not: null } } })).toBe(0);
    expect(await t.db.prisma.hostEvent.count({ where: { type: 'disconnected' } })).toBe(HOSTS);
  });

  it('refuses a wrong credential in a batch without failing the others', async () => {
    const [a, b] = fleet;
    const results = await Promise.all([
      hosts.authenticate(a!.id, a!.credential),
      hosts.authenticate(b!.id, a!.credential),
      hosts.authenticate(b!.id, 'anvhc_not-a-credential'),
      hosts.authenticate(b!.id, b!.credential),
    ]);
    expect(results.map((r) => r.ok)).toEqual([true, false, false, true]);
    expect(results[1]).toMatchObject({ reason: `unknown credential for host ${b!.id}` });
  });
});
