import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { addCluster, addHost, logLine } from '../../testing/cluster-telemetry.ts';

const B = Date.parse('2026-11-20T10:00:00.000Z');
const at = (i: number) => new Date(B + i * 1000).toISOString();

/** Lines of the cluster, one second apart, and the level the documented rule gives each. */
const LINES: [string, 'stdout' | 'stderr', string][] = [
  ['server starting', 'stdout', 'info'],
  ['[WARN] disk almost full', 'stdout', 'warn'],
  ['ERROR: out of memory', 'stderr', 'error'],
  ['plain stderr line', 'stderr', 'error'],
  ['{"level":"debug","msg":"tick"}', 'stdout', 'debug'],
  ['ts=1 level=fatal msg="boom"', 'stdout', 'fatal'],
  ['FATAL crash timeout', 'stdout', 'fatal'],
  ['info: request served in 10ms', 'stdout', 'info'],
  ['warning: deprecated flag', 'stderr', 'warn'],
  ['100% done_ok', 'stdout', 'info'],
];

describe('cluster logs API', () => {
  let t: TestApp;
  let clusterId: string;
  let otherClusterId: string;
  let baseUrl: string;

  beforeAll(async () => {
    t = await createTestApp();
    const hostId = await addHost(t);
    clusterId = await addCluster(t, hostId);
    otherClusterId = await addCluster(t, hostId);
    t.context.fleet.telemetry.ingestLogs(hostId, [
      ...LINES.map(([line, stream], i) => logLine(clusterId, B + i * 1000, line, stream)),
      logLine(otherClusterId, B, 'ERROR: not this cluster', 'stderr'),
    ]);
    await t.context.fleet.telemetry.flush();
    t.context.clusterTelemetry.streamOptions.pollMs = 50;
    t.context.clusterTelemetry.streamOptions.heartbeatMs = 300;
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    baseUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await t.close();
  });

  const logs = async (query = '') => {
    const res = await call(t, { url: `/v1/clusters/${clusterId}/logs${query}` });
    expect(res.statusCode, res.body).toBe(200);
    return res.json();
  };
  const messages = (body: { data: { logs: { message: string }[] } }) => body.data.logs.map((l) => l.message);
  const pick = (...indexes: number[]) => indexes.map((i) => LINES[i]![0]);

  it('lists the lines oldest first with the spec wrapper and the documented field rule', async () => {
    const body = await logs();
    expect(body.success).toBe(true);
    expect(messages(body)).toEqual(LINES.map(([line]) => line));
    expect(body.data.logs.map((l: { level: string }) => l.level)).toEqual(LINES.map(([, , level]) => level));
    expect(body.data.logs[2]).toEqual({
      id: expect.stringMatching(/^\d+$/),
      timestamp: at(2),
      level: 'error',
      source: 'container',
      log_type: 'application',
      message: 'ERROR: out of memory',
      process: null,
      metadata: {
        host: expect.stringMatching(/^host_/),
        container_id: 'c0ffee000000',
        stream: 'stderr',
        docker_timestamp: '2026-11-20T10:00:02.000000000Z',
        thread_id: null,
        file: null,
        line: null,
        gpu_id: null,
        cuda_version: null,
        driver_version: null,
      },
      tags: ['stderr'],
      stack_trace: null,
    });
    expect(body.data.pagination).toEqual({
      total_count: 10,
      current_page: 1,
      total_pages: 1,
      has_next: false,
      has_previous: false,
    });
    expect(body.data.query_info).toEqual({
      log_type: null,
      time_range: { start: null, end: null },
      filters_applied: [],
      search_terms: [],
    });
    expect(body.meta).toMatchObject({ request_id: expect.any(String), log_retention_days: 7 });
    expect(typeof body.meta.query_time_ms).toBe('number');
  });

  it('applies every filter', async () => {
    expect(messages(await logs('?level=error'))).toEqual(pick(2, 3));
    expect(messages(await logs('?level=warn,fatal'))).toEqual(pick(1, 5, 6, 8));
    expect(messages(await logs('?level=debug&level=info'))).toEqual(pick(0, 4, 7, 9));
    expect(messages(await logs('?log_type=error'))).toEqual(pick(2, 3, 5, 6));
    expect(messages(await logs('?log_type=application'))).toHaveLength(10);
    expect(messages(await logs('?log_type=system'))).toEqual([]);
    expect(messages(await logs('?source=container'))).toHaveLength(10);
    expect(messages(await logs('?source=gpu_driver'))).toEqual([]);
    expect(messages(await logs(`?start_time=${at(3)}&end_time=${at(5)}`))).toEqual(pick(3, 4, 5));
    expect(messages(await logs('?search=OUT%20OF'))).toEqual(pick(2));
    // LIKE wildcards are literal: "%" and "_" only match themselves.
    expect(messages(await logs('?search=%25'))).toEqual(pick(9));
    expect(messages(await logs('?search=e_o'))).toEqual(pick(9));
    const combined = await logs(`?level=error&search=stderr&start_time=${at(0)}`);
    expect(messages(combined)).toEqual(pick(3));
    expect(combined.data.query_info).toEqual({
      log_type: null,
      time_range: { start: at(0), end: null },
      filters_applied: ['level', 'start_time', 'search'],
      search_terms: ['stderr'],
    });
  });

  it('pages from the newest with tail, from the oldest without', async () => {
    const newest = await logs('?limit=3');
    expect(messages(newest)).toEqual(pick(7, 8, 9));
    expect(newest.data.pagination).toEqual({
      total_count: 10,
      current_page: 1,
      total_pages: 4,
      has_next: true,
      has_previous: false,
    });
    const second = await logs('?limit=3&offset=3');
    expect(messages(second)).toEqual(pick(4, 5, 6));
    expect(second.data.pagination).toMatchObject({ current_page: 2, has_next: true, has_previous: true });
    expect(messages(await logs('?limit=3&tail=false'))).toEqual(pick(0, 1, 2));
    const last = await logs('?limit=3&offset=9&tail=false');
    expect(messages(last)).toEqual(pick(9));
    expect(last.data.pagination).toMatchObject({ current_page: 4, has_next: false, has_previous: true });
  });

  it('answers text when asked', async () => {
    const res = await call(t, { url: `/v1/clusters/${clusterId}/logs?format=text&level=error` });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/plain');
    expect(res.body).toBe(
      `${at(2)} ERROR [stderr] ERROR: out of memory\n${at(3)} ERROR [stderr] plain stderr line\n`,
    );
  });

  it('refuses bad parameters with details per parameter', async () => {
    const res = await call(t, {
      url: `/v1/clusters/${clusterId}/logs?limit=1001&offset=-1&level=loud&log_type=kernel&source=x&start_time=nope`,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('INVALID_PARAMETERS');
    expect(Object.keys(res.json().error.details).sort()).toEqual([
      'level',
      'limit',
      'log_type',
      'offset',
      'source',
      'start_time',
    ]);
    const reversed = await call(t, {
      url: `/v1/clusters/${clusterId}/logs?start_time=${at(5)}&end_time=${at(1)}`,
    });
    expect(reversed.json().error.details).toEqual({ end_time: 'must be after start_time' });
  });

  it("hides other accounts' clusters", async () => {
    const other = await addAccount(t);
    for (const path of ['logs', 'logs/stream', 'logs/download']) {
      const res = await call(t, { url: `/v1/clusters/${clusterId}/${path}`, key: other });
      expect(res.statusCode, path).toBe(404);
      expect(res.json().error.code).toBe('CLUSTER_NOT_FOUND');
    }
    const search = await call(t, {
      method: 'POST',
      url: `/v1/clusters/${clusterId}/logs/search`,
      key: other,
      payload: { query: 'x' },
    });
    expect(search.statusCode).toBe(404);
  });

  describe('search', () => {
    const search = (payload: Record<string, unknown>) =>
      call(t, { method: 'POST', url: `/v1/clusters/${clusterId}/logs/search`, payload });

    it('evaluates the boolean syntax, newest first by default', async () => {
      const res = await search({ query: 'level:error AND (memory OR "plain stderr")' });
      expect(res.statusCode, res.body).toBe(200);
      const body = res.json();
      expect(messages(body)).toEqual(pick(3, 2));
      expect(body.data.total_matches).toBe(2);
      expect(body.data.query_info).toMatchObject({
        filters_applied: ['level', 'message'],
        search_terms: ['memory', 'plain stderr'],
        sort: 'timestamp:desc',
      });
      expect(body.meta.log_retention_days).toBe(7);
    });

    it.each([
      ['NOT stream:stdout', [2, 3, 8]],
      ['stream:stderr -x OR level:debug', [4]],
      ['level:warn OR level:fatal NOT timeout', [1, 5, 8]],
      ['type:error AND NOT source:container', []],
      ['log_type:error crash', [6]],
      ['message:"served in" OR msg:tick', [4, 7]],
      ['container_id:c0ffee', [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]],
      ['"100%"', [9]],
      ['served and', []],
    ])('%s', async (query, expected) => {
      const res = await search({ query, sort: 'timestamp:asc', limit: 1000 });
      expect(res.statusCode, res.body).toBe(200);
      expect(messages(res.json())).toEqual(pick(...(expected as number[])));
    });

    it('pages, sorts and bounds time', async () => {
      const res = await search({
        query: 'level:info OR level:warn',
        limit: 2,
        offset: 1,
        sort: 'timestamp asc',
        time_range: { start: at(1), end: at(8) },
      });
      const body = res.json();
      expect(messages(body)).toEqual(pick(7, 8));
      expect(body.data.total_matches).toBe(3);
      expect(body.data.pagination).toMatchObject({ total_count: 3, has_next: false, has_previous: true });
    });

    it('answers a clear 400 naming the position of a syntax error', async () => {
      const res = await search({ query: 'level:error AND (oom OR' });
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatchObject({
        code: 'INVALID_PARAMETERS',
        message: 'query syntax error: expected a term, found end of query at position 23',
        details: { query: 'expected a term, found end of query', position: 23, near: '' },
      });
      const field = await search({ query: 'a OR colour:red' });
      expect(field.json().error.details).toMatchObject({ position: 5, near: 'colour:red' });
      const sort = await search({ query: 'a', sort: 'level' });
      expect(sort.json().error.details).toHaveProperty('sort');
    });

    it('treats injection attempts as search text', async () => {
      for (const query of [`"'; DROP TABLE log_entries; --"`, `"x' OR '1'='1"`, `message:"%' OR 1=1 --"`]) {
        const res = await search({ query });
        expect(res.statusCode, res.body).toBe(200);
        expect(res.json().data.total_matches).toBe(0);
      }
      expect((await logs()).data.pagination.total_count).toBe(10);
    });
  });

  /** Reads an SSE response until `until` holds for the events so far (or the stream ends). */
  async function readEvents(
    response: Response,
    until: (events: { id: string | null; event: string; data: string }[], raw: string) => boolean,
  ) {
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let raw = '';
    const events: { id: string | null; event: string; data: string }[] = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      raw += decoder.decode(value, { stream: true });
      events.length = 0;
      for (const block of raw.split('\n\n').slice(0, -1)) {
        const fields = Object.fromEntries(
          block
            .split('\n')
            .filter((l) => !l.startsWith(':') && l.includes(': '))
            .map((l) => [l.slice(0, l.indexOf(': ')), l.slice(l.indexOf(': ') + 2)]),
        );
        if (fields['event'])
          events.push({ id: fields['id'] ?? null, event: fields['event'], data: fields['data'] ?? '' });
      }
      if (until(events, raw)) break;
    }
    await reader.cancel().catch(() => {});
    return { events: [...events], raw };
  }

  it('streams Server-Sent Events over HTTP: tail, follow, heartbeat, resume with Last-Event-ID', async () => {
    const streamUrl = `${baseUrl}/v1/clusters/${clusterId}/logs/stream`;
    const headers = { authorization: `Bearer ${t.ownerKey}` };
    const abort = new AbortController();
    const res = await fetch(`${streamUrl}?tail=2`, { headers, signal: abort.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    expect(res.headers.get('cache-control')).toContain('no-cache');

    // A line stored while the client follows arrives as an event; a heartbeat comes while idle.
    const hostId = (await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: clusterId } }))
      .hostId!;
    let added = false;
    const { events, raw } = await readEvents(res, (events, raw) => {
      if (events.length >= 2 && !added) {
        added = true;
        t.context.fleet.telemetry.ingestLogs(hostId, [logLine(clusterId, B + 10_000, 'live line', 'stdout')]);
        void t.context.fleet.telemetry.flush();
      }
      return events.length >= 3 && raw.includes(': heartbeat');
    });
    abort.abort();
    const entries = events.map((e) => JSON.parse(e.data));
    expect(entries.map((e) => e.message)).toEqual([...pick(8, 9), 'live line']);
    expect(events.map((e) => e.event)).toEqual(['log', 'log', 'log']);
    expect(events.map((e) => e.id)).toEqual(entries.map((e) => e.id));
    expect(raw).toContain(': heartbeat');

    // Reconnect as EventSource does: everything after the last id seen, then the end (follow=false).
    const resumed = await fetch(`${streamUrl}?follow=false`, {
      headers: { ...headers, 'last-event-id': entries[0].id },
    });
    const again = await readEvents(resumed, () => false);
    expect(again.events.map((e) => e.event)).toEqual(['log', 'log', 'end']);
    expect(again.events.slice(0, 2).map((e) => JSON.parse(e.data).message)).toEqual([
      pick(9)[0],
      'live line',
    ]);

    // Filters apply to the stream; a bad Last-Event-ID is refused before streaming.
    const errors = await fetch(`${streamUrl}?follow=false&tail=100&level=error`, { headers });
    const onlyErrors = await readEvents(errors, () => false);
    expect(onlyErrors.events.filter((e) => e.event === 'log').map((e) => JSON.parse(e.data).message)).toEqual(
      pick(2, 3),
    );
    const bad = await fetch(streamUrl, { headers: { ...headers, 'last-event-id': 'abc' } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('INVALID_PARAMETERS');
  });

  it('downloads gzip in JSON lines or text, bounded by time', async () => {
    const res = await call(t, { url: `/v1/clusters/${clusterId}/logs/download` });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/gzip');
    expect(res.headers['content-disposition']).toMatch(
      new RegExp(`^attachment; filename="${clusterId}-logs-[0-9TZ-]+\\.jsonl\\.gz"$`),
    );
    const lines = gunzipSync(res.rawPayload).toString('utf8').trimEnd().split('\n');
    const entries = lines.map((l) => JSON.parse(l));
    expect(entries.slice(0, 10).map((e) => e.message)).toEqual(LINES.map(([line]) => line));
    expect(entries[0]).toMatchObject({ level: 'info', source: 'container', log_type: 'application' });

    const text = await call(t, {
      url: `/v1/clusters/${clusterId}/logs/download?format=text&compression=gzip&start_time=${at(2)}&end_time=${at(3)}`,
    });
    expect(text.headers['content-disposition']).toContain('.log.gz"');
    expect(gunzipSync(text.rawPayload).toString('utf8')).toBe(
      `${at(2)} ERROR [stderr] ERROR: out of memory\n${at(3)} ERROR [stderr] plain stderr line\n`,
    );
    const bad = await call(t, { url: `/v1/clusters/${clusterId}/logs/download?start_time=x` });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe('INVALID_PARAMETERS');
  });
});
