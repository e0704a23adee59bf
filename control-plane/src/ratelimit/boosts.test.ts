import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AccessControl } from '../accounts/access.ts';
import type { AuditLog } from '../accounts/audit.ts';
import type { Database } from '../db/index.ts';
import { ManualClock } from '../testing/clock.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { BoostRegistry } from './boosts.ts';

/**
 * The boosts in memory are reloaded when another process announces one (NOTIFY) and, as a safety net for a
 * NOTIFY lost with its connection, every 30 s. A sole process (PGlite) asks for every boost itself: it has
 * no reload to catch up on, and no timer.
 */
describe('boost reloads', () => {
  let database: TestDatabase;

  beforeEach(async () => {
    database = await createTestDatabase();
  });
  afterEach(async () => {
    vi.useRealTimers();
    await database.drop();
  });

  it.each([
    ['pglite', 1],
    ['postgres', 3],
  ] as const)('as a %s process, loads %i times in 60 s of quiet', async (kind, loads) => {
    const db: Database = { ...database.db, kind };
    const read = vi.spyOn(db.prisma.rateLimitBoost, 'findMany');
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    // Access and audit serve asking for a boost, which this test does not do.
    const registry = new BoostRegistry(db, new ManualClock(), {} as AccessControl, {} as AuditLog);
    await registry.start();
    try {
      await vi.advanceTimersByTimeAsync(60_000);
      await vi.waitFor(() => expect(read).toHaveBeenCalledTimes(loads));
    } finally {
      await registry.stop();
    }
  });
});
