import type { MetricSample } from '@anvil/shared/protocol';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database, Sql } from '../../db/index.ts';
import { ManualClock } from '../../testing/clock.ts';
import { createTestDatabase, type TestDatabase } from '../../testing/database.ts';
import { ControlPlaneMetrics } from './prometheus.ts';
import { DEFAULT_RETENTION, TelemetryService } from './telemetry.ts';

const HOST = 'host_telemetrytest0001';
const T0 = Date.parse('2026-03-02T10:00:00.000Z');
const MINUTE = 60_000;
const DAY = 86_400_000;

function containerSample(atMs: number, cpuPercent: number, memoryUsedBytes: number): MetricSample {
  return {
    at: atMs,
    host: null,
    gpus: [],
    containers: [
      {
        workloadId: 'wl_rollup',
        containerId: 'c1',
        cpuPercent,
        cpuTotalNs: atMs * 10,
        memoryUsedBytes,
        memoryLimitBytes: null,
        networkRxBytes: null,
        networkTxBytes: null,
        blockReadBytes: null,
        blockWriteBytes: null,
      },
    ],
  } as MetricSample;
}

describe('telemetry rollups and retention', () => {
  let database: TestDatabase;
  let clock: ManualClock;
  let telemetry: TelemetryService;

  beforeEach(async () => {
    database = await createTestDatabase();
    clock = new ManualClock(new Date(T0 + 2 * MINUTE));
    // Writes only on flush(): the test decides when rows are received.
    telemetry = new TelemetryService(database.db, clock, new ControlPlaneMetrics(), {
      flushIntervalMs: 3_600_000,
      onError: (error) => {
        throw error;
      },
    });
  });

  afterEach(async () => {
    await telemetry.stop();
    await database.drop();
  });

  const range = {
    hostId: HOST,
    kind: 'container' as const,
    from: new Date(T0 - 10 * DAY),
    to: new Date(T0 + 400 * DAY),
  };

  it('rolls raw samples up per minute (avg, min, max, last) and corrects a minute when late samples arrive', async () => {
    telemetry.ingestMetrics(HOST, [containerSample(T0 + 5_000, 10, 100)], 0);
    telemetry.ingestMetrics(
      HOST,
      [containerSample(T0 + 20_000, 30, 300), containerSample(T0 + 40_000, 20, 200)],
      0,
    );
    telemetry.ingestMetrics(HOST, [containerSample(T0 + 65_000, 50, 500)], 0);
    await telemetry.flush();
    expect(await telemetry.queryMetrics(range)).toHaveLength(4);

    // Rows younger than the rollup lag wait for the next run.
    expect(await telemetry.rollup()).toBe(0);
    clock.advance(15_000);
    expect(await telemetry.rollup()).toBe(2);
    let rollups = await telemetry.queryRollups(range);
    expect(rollups.map((r) => [r.bucket, r.samples])).toEqual([
      [new Date(T0).toISOString(), 3],
      [new Date(T0 + MINUTE).toISOString(), 1],
    ]);
    expect(rollups[0]!.data['cpuPercent']).toEqual({ avg: 20, min: 10, max: 30, last: 20 });
    expect(rollups[0]!.data['memoryUsedBytes']).toEqual({ avg: 200, min: 100, max: 300, last: 200 });
    expect(rollups[1]!.data['cpuPercent']).toEqual({ avg: 50, min: 50, max: 50, last: 50 });

    // Nothing new: nothing rewritten.
    clock.advance(15_000);
    expect(await telemetry.rollup()).toBe(0);

    // An agent catching up after a disconnect sends a sample of the first minute late.
    telemetry.ingestMetrics(HOST, [containerSample(T0 + 50_000, 60, 600)], 0);
    await telemetry.flush();
    clock.advance(15_000);
    expect(await telemetry.rollup()).toBe(1);
    rollups = await telemetry.queryRollups(range);
    expect(rollups[0]).toMatchObject({ samples: 4 });
    expect(rollups[0]!.data['cpuPercent']).toEqual({ avg: 30, min: 10, max: 60, last: 60 });
    expect(rollups[1]!.data['cpuPercent']).toEqual({ avg: 50, min: 50, max: 50, last: 50 });
  });

  it('purges raw samples, rollups and logs past their retention, counted from receipt', async () => {
    telemetry.ingestMetrics(HOST, [containerSample(T0, 10, 100), containerSample(T0 + 30_000, 20, 200)], 0);
    telemetry.ingestLogs(HOST, [
      {
        workloadId: 'wl_rollup',
        containerId: 'c1',
        stream: 'stdout',
        ts: '2026-03-02T10:00:01.000000000Z',
        line: 'a',
      },
      {
        workloadId: 'wl_rollup',
        containerId: 'c1',
        stream: 'stderr',
        ts: '2026-03-02T10:00:02.000000000Z',
        line: 'b',
      },
    ]);
    await telemetry.recordLogLosses(HOST, [
      { workloadId: 'wl_rollup', containerId: 'c1', lines: 3, bytes: 30, firstTs: null, lastTs: null },
    ]);
    await telemetry.flush();
    clock.advance(15_000);
    expect(await telemetry.rollup()).toBe(1);

    // Within every retention: nothing goes.
    clock.advance(DEFAULT_RETENTION.rawMetricsMs - 60_000);
    expect(await telemetry.purge()).toEqual({
      metricSamples: 0,
      metricRollups: 0,
      logEntries: 0,
      logLosses: 0,
    });

    // Past a day: raw samples go, the minute's rollup stays.
    clock.advance(2 * MINUTE);
    expect(await telemetry.purge()).toEqual({
      metricSamples: 2,
      metricRollups: 0,
      logEntries: 0,
      logLosses: 0,
    });
    expect(await telemetry.queryMetrics(range)).toEqual([]);
    expect(await telemetry.queryRollups(range)).toHaveLength(1);
    expect((await telemetry.queryLogs({ workloadId: 'wl_rollup' })).map((l) => l.line)).toEqual(['a', 'b']);

    // Past a week: logs and their losses go.
    clock.advance(DEFAULT_RETENTION.logsMs);
    expect(await telemetry.purge()).toEqual({
      metricSamples: 0,
      metricRollups: 0,
      logEntries: 2,
      logLosses: 1,
    });
    expect(await telemetry.queryLogs({ workloadId: 'wl_rollup' })).toEqual([]);
    expect(await telemetry.logLosses('wl_rollup')).toEqual([]);

    // Past a month: the rollup goes too.
    clock.advance(DEFAULT_RETENTION.rollupMs);
    expect((await telemetry.purge()).metricRollups).toBe(1);
    expect(await telemetry.queryRollups(range)).toEqual([]);
  });

  it('keeps retention independent of the agent clock: an old timestamp received now stays', async () => {
    telemetry.ingestMetrics(HOST, [containerSample(T0 - 3 * DAY, 10, 100)], 0);
    await telemetry.flush();
    expect((await telemetry.purge()).metricSamples).toBe(0);
    expect(await telemetry.queryMetrics(range)).toHaveLength(1);
  });

  it('in a sole process, a maintenance round with nothing new runs no statement; purges come every 10 min', async () => {
    // The same database, seen as a sole process (PGlite's kind) whose statements are counted.
    const statements: string[] = [];
    const counted = (sql: Sql): Sql => ({
      ...sql,
      query: (text, params, name) => {
        statements.push(text);
        return sql.query(text, params, name);
      },
    });
    const sole: Database = {
      ...database.db,
      kind: 'pglite',
      sql: counted(database.db.sql),
      session: (work) => database.db.session((sql) => work(counted(sql))),
    };
    const quiet = new TelemetryService(sole, clock, new ControlPlaneMetrics(), {
      flushIntervalMs: 3_600_000,
    });
    try {
      quiet.ingestMetrics(HOST, [containerSample(T0 + 5_000, 10, 100)], 0);
      await quiet.flush();
      clock.advance(15_000);
      await quiet.maintain();
      expect(await quiet.queryRollups(range)).toHaveLength(1);
      expect(statements.some((text) => text.includes('DELETE FROM metric_samples'))).toBe(true);
      // No advisory lock: no other process to keep out.
      expect(statements.some((text) => text.includes('pg_try_advisory_lock'))).toBe(false);

      statements.length = 0;
      clock.advance(60_000);
      await quiet.maintain();
      expect(statements).toEqual([]);

      // A late sample is rolled up at the next round; retention waits for its 10 minutes.
      quiet.ingestMetrics(HOST, [containerSample(T0 + 50_000, 30, 300)], 0);
      await quiet.flush();
      clock.advance(60_000);
      statements.length = 0;
      await quiet.maintain();
      expect(statements.some((text) => text.includes('INSERT INTO metric_rollups'))).toBe(true);
      expect(statements.some((text) => text.includes('DELETE FROM'))).toBe(false);
      expect((await quiet.queryRollups(range))[0]).toMatchObject({ samples: 2 });

      clock.advance(10 * MINUTE);
      statements.length = 0;
      await quiet.maintain();
      expect(statements.some((text) => text.includes('DELETE FROM metric_samples'))).toBe(true);
    } finally {
      await quiet.stop();
    }
  });

  it('rolls a large fleet’s minute up a few hundred hosts per statement where statements run in the API’s thread', async () => {
    const rollupStatements: string[] = [];
    const sql = database.db.sql;
    const counted: Database = {
      ...database.db,
      sql: {
        ...sql,
        inThread: sql.inThread === true,
        query: (text, params, name) => {
          if (text.includes('INSERT INTO metric_rollups')) rollupStatements.push(text);
          return sql.query(text, params, name);
        },
      },
    };
    const fleet = new TelemetryService(counted, clock, new ControlPlaneMetrics(), {
      flushIntervalMs: 3_600_000,
    });
    try {
      const hosts = Array.from({ length: 300 }, (_, i) => `host_rollupchunk${String(i).padStart(4, '0')}`);
      for (const host of hosts) fleet.ingestMetrics(host, [containerSample(T0 + 5_000, 10, 100)], 0);
      await fleet.flush();
      clock.advance(15_000);
      expect(await fleet.rollup()).toBe(300);
      // 250 hosts a statement in the API's thread (PGlite); one statement on a database server.
      expect(rollupStatements).toHaveLength(sql.inThread ? 2 : 1);
      const [row] = await sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM metric_rollups WHERE host_id LIKE 'host_rollupchunk%'`,
      );
      expect(row!.n).toBe(300);
    } finally {
      await fleet.stop();
    }
  });
});
