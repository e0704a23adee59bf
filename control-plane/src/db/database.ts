import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { PrismaClient } from './generated/client.ts';
import { PglitePrepared } from './pglite-prepared.ts';

/** A raw SQL executor, for the migrator and the few hot paths that bypass Prisma. */
export interface Sql {
  /**
   * `name` makes it a prepared statement: parsed and planned once per connection on PostgreSQL, once per
   * session on PGlite (pglite-prepared.ts). A name must always be used with the same text, a plain
   * lower-case identifier; hot statements get one (on PGlite, planning runs in the API's thread).
   */
  query<T = Record<string, unknown>>(text: string, params?: unknown[], name?: string): Promise<T[]>;
  /** Runs a script of several statements (no parameters). */
  exec(script: string): Promise<void>;
  /**
   * True when statements run in this thread (PGlite): while one runs, no request is served, so
   * background writers keep their statements short and let the event loop turn between them
   * (see batching.ts). Absent or false: they run in a database server.
   */
  readonly inThread?: boolean;
}

export interface Database {
  kind: 'pglite' | 'postgres';
  prisma: PrismaClient;
  sql: Sql;
  /** Subscribes to a LISTEN/NOTIFY channel; returns the unsubscribe function. */
  listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>>;
  notify(channel: string, payload: string): Promise<void>;
  /** Runs `work` on one pinned connection (session-level locks, multi-statement transactions). */
  session<T>(work: (sql: Sql) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/**
 * True when no other process can open the database: PGlite's data directory is held by this process
 * alone. Every change to the data is then made here and announced in-process, so work that exists to
 * catch what another replica did (leader locks, reloads after a NOTIFY that may have been lost) has
 * nothing to catch, and only costs the API's thread (PGlite runs in it).
 */
export function soleProcess(db: Pick<Database, 'kind'>): boolean {
  return db.kind === 'pglite';
}

/**
 * The longest sleep of a loop that otherwise wakes on events and on the next due time it computed.
 * With other replicas (PostgreSQL) the sweep catches a change whose NOTIFY was lost with a dropped
 * connection: 60 s. In a sole process every change wakes its loop in-process, and the sweep only covers
 * a wake-up the code forgot: 5 min.
 */
export function safetySweepMs(db: Pick<Database, 'kind'>): number {
  return soleProcess(db) ? 300_000 : 60_000;
}

export function openPglite(client: PGlite): Database {
  const prisma = new PrismaClient({ adapter: new PrismaPGlite(client) });
  const prepared = new PglitePrepared(client);
  const sql: Sql = {
    async query<T>(text: string, params: unknown[] = [], name?: string) {
      if (name) return prepared.run<T>(name, text, params);
      return (await client.query<T>(text, params)).rows;
    },
    async exec(script) {
      await client.exec(script);
    },
    inThread: true,
  };
  return {
    kind: 'pglite',
    prisma,
    sql,
    // PGlite has a single connection, so every call already shares one session.
    session: (work) => work(sql),
    async listen(channel, onPayload) {
      const unsubscribe = await client.listen(channel, onPayload);
      return async () => unsubscribe();
    },
    async notify(channel, payload) {
      await client.query('SELECT pg_notify($1, $2)', [channel, payload]);
    },
    async close() {
      await prisma.$disconnect();
      if (!client.closed) await client.close();
    },
  };
}

export async function openEmbedded(dataDir: string): Promise<Database> {
  const dir = join(dataDir, 'pglite');
  mkdirSync(dir, { recursive: true });
  const client = await PGlite.create(dir);
  return openPglite(client);
}

export function openPostgres(connectionString: string, poolSize = 10): Database {
  const pool = new pg.Pool({ connectionString, max: poolSize });
  // A dropped idle connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  let listener: pg.Client | null = null;
  const handlers = new Map<string, Set<(payload: string) => void>>();

  async function listenerClient(): Promise<pg.Client> {
    if (listener) return listener;
    const client = new pg.Client({ connectionString });
    client.on('error', () => {});
    await client.connect();
    client.on('notification', (message) => {
      for (const handler of handlers.get(message.channel) ?? []) handler(message.payload ?? '');
    });
    listener = client;
    return client;
  }

  return {
    kind: 'postgres',
    prisma,
    sql: {
      async query<T>(text: string, params: unknown[] = [], name?: string) {
        return (await pool.query(name ? { name, text, values: params } : { text, values: params }))
          .rows as T[];
      },
      async exec(script) {
        await pool.query(script);
      },
    },
    async listen(channel, onPayload) {
      const client = await listenerClient();
      let set = handlers.get(channel);
      if (!set) {
        set = new Set();
        handlers.set(channel, set);
        await client.query(`LISTEN "${channel.replaceAll('"', '')}"`);
      }
      set.add(onPayload);
      return async () => {
        set.delete(onPayload);
      };
    },
    async notify(channel, payload) {
      await pool.query('SELECT pg_notify($1, $2)', [channel, payload]);
    },
    async session(work) {
      const client = await pool.connect();
      try {
        return await work({
          async query<T>(text: string, params: unknown[] = [], name?: string) {
            return (await client.query(name ? { name, text, values: params } : { text, values: params }))
              .rows as T[];
          },
          async exec(script) {
            await client.query(script);
          },
        });
      } finally {
        client.release();
      }
    },
    async close() {
      await prisma.$disconnect();
      if (listener) await listener.end().catch(() => {});
      await pool.end();
    },
  };
}

export async function openDatabase(options: {
  databaseUrl: string | null;
  dataDir: string;
}): Promise<Database> {
  return options.databaseUrl ? openPostgres(options.databaseUrl) : openEmbedded(options.dataDir);
}
