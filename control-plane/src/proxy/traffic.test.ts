import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Sql } from '../db/index.ts';
import { clusterRow } from '../testing/cluster-row.ts';
import { createTestDatabase, ManualClock, type TestDatabase } from '../testing/index.ts';
import {
  ACCESS_LOG_CAPACITY,
  ACCESS_LOG_RETENTION_MS,
  type AccessLogEntry,
  TrafficRecorder,
} from './traffic.ts';

const T = Date.parse('2026-05-01T10:00:00.000Z');

describe('TrafficRecorder', () => {
  let database: TestDatabase;
  const clusterId = newId('cluster');
  const portId = newId('port');
  const clock = new ManualClock(new Date(T));

  beforeEach(async () => {
    clock.set(new Date(T));
    database = await createTestDatabase();
    const prisma = database.db.prisma;
    const accountId = newId('acc');
    const userId = newId('usr');
    await prisma.account.create({ data: { id: accountId, name: 'A' } });
    await prisma.user.create({ data: { id: userId, accountId, email: 'a@b.c' } });
    await prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId, ownerId: userId, name: 'traffic' }),
    });
    await prisma.proxyPortMapping.create({
      data: { id: portId, clusterId, internalPort: 8080, externalPort: 30000, description: 'http' },
    });
  });
  afterEach(async () => database.drop());

  const entry = (n: number, over: Partial<AccessLogEntry> = {}): AccessLogEntry => ({
    timestamp: new Date(clock.now().getTime() + n).toISOString(),
    client_ip: '10.0.0.1',
    user: null,
    method: 'GET',
    path: `/r/${n}`,
    status_code: 200,
    response_time_ms: 1.5,
    user_agent: 'test',
    ...over,
  });
  const stored = () =>
    database.db.prisma.proxyAccessLog.findMany({ where: { clusterId }, orderBy: { at: 'asc' } });

  /** The database, with a switch that makes every statement fail as an unreachable one would. */
  function flaky(sql: Sql) {
    const state = { down: false, sql: { ...sql } as Sql };
    state.sql.query = async (text, params) => {
      if (state.down) throw new Error('database unreachable');
      return sql.query(text, params);
    };
    return state;
  }

  it('writes at most the newest ACCESS_LOG_CAPACITY entries per cluster a flush, and trims the table to them', async () => {
    const traffic = new TrafficRecorder({ sql: database.db.sql, clock });
    for (let i = 0; i < ACCESS_LOG_CAPACITY + 100; i++) traffic.log(clusterId, entry(i));
    await traffic.flush();
    let rows = await stored();
    expect(rows).toHaveLength(ACCESS_LOG_CAPACITY);
    expect(rows[0]!.path).toBe('/r/100');
    // A second flush adds beyond the capacity; the purge keeps the newest of the cluster.
    for (let i = 0; i < 50; i++) traffic.log(clusterId, entry(1_000 + i));
    await traffic.flush();
    expect(await stored()).toHaveLength(ACCESS_LOG_CAPACITY + 50);
    expect(await traffic.purge()).toBe(50);
    rows = await stored();
    expect(rows).toHaveLength(ACCESS_LOG_CAPACITY);
    expect(rows[0]!.path).toBe('/r/150');
    const newest = await traffic.accessLogs(clusterId, 2);
    expect(newest.map((e) => e.path)).toEqual(['/r/1049', '/r/1048']);
    expect(newest[0]).toEqual(entry(1_049));
  });

  it('wakes only when traffic waits, and writes entries, counters and visitors in one statement', async () => {
    const statements: string[] = [];
    const sql: Sql = {
      query: async <R>(text: string) => {
        statements.push(text);
        return [] as R[];
      },
      exec: async () => {},
    };
    vi.useFakeTimers();
    const traffic = new TrafficRecorder({ sql, clock });
    try {
      traffic.start();
      // The purge only: an idle proxy has nothing to flush.
      expect(vi.getTimerCount()).toBe(1);
      await vi.advanceTimersByTimeAsync(5_000);
      expect(statements).toEqual([]);
      traffic.log(clusterId, entry(1));
      traffic.forwarded(portId, 'user:usr_a', 3);
      await vi.advanceTimersByTimeAsync(999);
      expect(statements).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(statements).toHaveLength(1);
      expect(statements[0]).toContain('INSERT INTO proxy_access_logs');
      expect(statements[0]).toContain('UPDATE proxy_port_mappings');
      expect(statements[0]).toContain('INSERT INTO proxy_visitors');
    } finally {
      await traffic.stop();
      vi.useRealTimers();
    }
  });

  it('deletes entries older than the retention', async () => {
    const traffic = new TrafficRecorder({ sql: database.db.sql, clock });
    traffic.log(clusterId, entry(0, { path: '/old' }));
    clock.advance(ACCESS_LOG_RETENTION_MS - 1_000);
    traffic.log(clusterId, entry(0, { path: '/recent' }));
    await traffic.flush();
    clock.advance(2_000);
    expect(await traffic.purge()).toBe(1);
    expect((await stored()).map((r) => r.path)).toEqual(['/recent']);
  });

  it('keeps what a failed write could not store, within its bound, and writes it next time in order', async () => {
    const db = flaky(database.db.sql);
    const traffic = new TrafficRecorder({ sql: db.sql, clock, maxBufferedEntries: 3 });
    traffic.log(clusterId, entry(1));
    traffic.log(clusterId, entry(2));
    traffic.forwarded(portId, 'user:usr_a', 4);
    db.down = true;
    await expect(traffic.flush()).rejects.toThrow('unreachable');
    traffic.log(clusterId, entry(3));
    traffic.log(clusterId, entry(4)); // beyond the bound of 3: dropped
    traffic.forwarded(portId, 'user:usr_b', 2);
    expect(traffic.droppedEntries).toBe(1);
    db.down = false;
    await traffic.flush();
    expect((await stored()).map((r) => r.path)).toEqual(['/r/1', '/r/2', '/r/3']);
    const mapping = await database.db.prisma.proxyPortMapping.findUniqueOrThrow({ where: { id: portId } });
    expect(mapping.totalRequests).toBe(2n);
    expect(mapping.totalResponseMs).toBe(6);
    expect(mapping.lastAccessed).toEqual(new Date(T));
    expect(await database.db.prisma.proxyVisitor.count({ where: { portId } })).toBe(2);
  });

  it('adds the usage of several recorders (processes) to the same mapping, and skips deleted clusters', async () => {
    const a = new TrafficRecorder({ sql: database.db.sql, clock });
    const b = new TrafficRecorder({ sql: database.db.sql, clock });
    a.forwarded(portId, 'user:usr_a', 1);
    a.forwarded(portId, 'user:usr_a', 3);
    b.forwarded(portId, 'user:usr_a', 2);
    clock.advance(5_000);
    b.forwarded(portId, 'ip:10.0.0.9', 2);
    a.log(clusterId, entry(0, { user_agent: 'from a' }));
    b.log(clusterId, entry(1, { user_agent: 'from b' }));
    b.log('cluster_gone', entry(2));
    await Promise.all([a.flush(), b.flush()]);
    const mapping = await database.db.prisma.proxyPortMapping.findUniqueOrThrow({ where: { id: portId } });
    expect(mapping.totalRequests).toBe(4n);
    expect(mapping.totalResponseMs).toBe(8);
    expect(mapping.lastAccessed).toEqual(new Date(T + 5_000));
    expect(await database.db.prisma.proxyVisitor.count({ where: { portId } })).toBe(2);
    expect((await a.accessLogs(clusterId)).map((e) => e.user_agent)).toEqual(['from b', 'from a']);
  });
});
