import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database, Sql } from '../db/index.ts';
import { ManualClock } from '../testing/clock.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { ActivityTracker, SESSION_GAP_MS } from './activity.ts';

const ACCOUNT = 'acc_activitytest01';

/**
 * Members' activity under steady traffic: every member's write comes due at about the same moment (once
 * a minute each), and those writes run in the API's thread on PGlite. Touches that arrive together are
 * written in one statement, with the same last-active times and logins as one at a time.
 */
describe('member activity', () => {
  let database: TestDatabase;
  let clock: ManualClock;
  let updates: number;
  let tracker: ActivityTracker;
  const users = Array.from({ length: 40 }, (_, i) => `user_activity${String(i).padStart(3, '0')}`);

  beforeEach(async () => {
    database = await createTestDatabase();
    clock = new ManualClock(new Date('2026-11-27T12:00:00.000Z'));
    await database.db.sql.query(
      `INSERT INTO accounts (id, name, updated_at) VALUES ($1, 'Activity', now())`,
      [ACCOUNT],
    );
    await database.db.sql.query(
      `INSERT INTO users (id, account_id, email, updated_at)
       SELECT id, $1, id || '@example.test', now() FROM unnest($2::text[]) AS id`,
      [ACCOUNT, users],
    );
    updates = 0;
    const counted: Sql = {
      ...database.db.sql,
      query: (text, params, name) => {
        if (text.includes('UPDATE users')) updates++;
        return database.db.sql.query(text, params, name);
      },
    };
    const db: Database = { ...database.db, sql: counted };
    tracker = new ActivityTracker(db, clock);
  });
  afterEach(async () => database.drop());

  const logins = async () =>
    (
      await database.db.sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM activity_events WHERE account_id = $1 AND kind = 'login'`,
        [ACCOUNT],
      )
    )[0]!.n;

  it('writes the touches of many members arriving together in a few statements, with their logins', async () => {
    await Promise.all(users.map((user) => tracker.touch(ACCOUNT, user)));
    // The first runs alone (no added latency when requests are rare); the rest wait for it and go together.
    expect(updates).toBeLessThanOrEqual(3);
    const rows = await database.db.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM users WHERE account_id = $1 AND last_active_at = $2`,
      [ACCOUNT, clock.now().toISOString()],
    );
    expect(rows[0]!.n).toBe(users.length);
    // No activity before: every member's first request starts a session.
    expect(await logins()).toBe(users.length);

    // Within the minute: nothing written. After it, within the session gap: written, no new login.
    await Promise.all(users.map((user) => tracker.touch(ACCOUNT, user)));
    expect(updates).toBeLessThanOrEqual(3);
    clock.advance(61_000);
    await Promise.all(users.map((user) => tracker.touch(ACCOUNT, user)));
    expect(await logins()).toBe(users.length);

    // After the gap: a new session each.
    clock.advance(SESSION_GAP_MS);
    await Promise.all(users.slice(0, 5).map((user) => tracker.touch(ACCOUNT, user)));
    expect(await logins()).toBe(users.length + 5);
  });
});
