import { PGlite } from '@electric-sql/pglite';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { type Database, migrate, openPglite } from '../db/index.ts';
import type { Notifier } from './notifications.ts';
import type { SettingsService } from './settings.ts';
import { WebhookOutbox } from './webhook-outbox.ts';

/**
 * The outbox's notion of "due", against a database clock held still: PostgreSQL lets a function in
 * `public` stand in for pg_catalog's clock_timestamp() when the search path names pg_catalog after it.
 * PGlite's single session makes that hold for every statement the outbox runs.
 */
describe('webhook outbox claims', () => {
  let db: Database | null = null;

  afterEach(async () => {
    await db?.close();
    db = null;
  });

  /** A migrated database whose clock_timestamp() is always `at`. */
  async function frozenAt(at: string): Promise<Database> {
    db = openPglite(await PGlite.create());
    await db.session((sql) => migrate(sql));
    await db.sql.exec(`
      CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '${at}'::timestamptz $$;
      SET search_path TO public, pg_catalog;`);
    return db;
  }

  const outboxOn = (database: Database) =>
    new WebhookOutbox({
      db: database,
      // No webhook configured: a claimed event is marked skipped, which is all this needs to see.
      settings: { effective: async () => ({}) } as unknown as SettingsService,
      notifier: {} as Notifier,
      logger: pino({ level: 'silent' }),
      pollMs: 0,
    });

  it('claims an event made due at this instant, though TIMESTAMPTZ(3) stores that instant rounded up', async () => {
    // 0.6 ms past the millisecond: the column keeps 12:00:00.001, later than the clock reads.
    const database = await frozenAt('2026-11-26 12:00:00.0006+00');
    await database.sql.query(
      `INSERT INTO webhook_events (account_id, type, data, next_attempt_at)
       VALUES ('acct_rounding', 'cluster.status_changed', '{}', clock_timestamp())`,
    );
    const [stored] = await database.sql.query<{ at: string }>(
      `SELECT to_char(next_attempt_at AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS at FROM webhook_events`,
    );
    expect(stored!.at).toBe('12:00:00.001000');

    expect(await outboxOn(database).drain()).toBe(1);
    const [row] = await database.sql.query<{ delivery: string; attempts: number; detail: string }>(
      'SELECT delivery, attempts, detail FROM webhook_events',
    );
    expect(row).toEqual({ delivery: 'skipped', attempts: 1, detail: 'the account webhook is not enabled' });
  });

  it('leaves an event alone until its millisecond comes, and while another dispatcher holds it', async () => {
    const database = await frozenAt('2026-11-26 12:00:00.0004+00');
    await database.sql.query(
      `INSERT INTO webhook_events (account_id, type, data, next_attempt_at, lease_until) VALUES
         ('acct_later', 'cluster.status_changed', '{}', '2026-11-26 12:00:00.002+00', NULL),
         ('acct_leased', 'cluster.status_changed', '{}', '2026-11-26 12:00:00+00', '2026-11-26 12:00:00.001+00')`,
    );
    expect(await outboxOn(database).drain()).toBe(0);
    const rows = await database.sql.query<{ delivery: string; attempts: number }>(
      'SELECT delivery, attempts FROM webhook_events ORDER BY id',
    );
    expect(rows).toEqual([
      { delivery: 'pending', attempts: 0 },
      { delivery: 'pending', attempts: 0 },
    ]);
  });
});
