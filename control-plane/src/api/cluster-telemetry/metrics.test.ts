import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, addMember, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { ManualClock } from '../../testing/clock.ts';
import { addCluster, addHost, sample } from '../../testing/cluster-telemetry.ts';

const MIN = 60_000;
// Minute-aligned so interval buckets are predictable.
const T0 = Math.floor((Date.now() - 3 * 3_600_000) / 3_600_000) * 3_600_000;

describe('cluster metrics API', () => {
  let t: TestApp;
  const clock = new ManualClock(new Date(T0));
  let hostId: string;
  let clusterId: string;
  const url = (path = '') => `/v1/clusters/${clusterId}/metrics${path}`;

  beforeAll(async () => {
    t = await createTestApp({ clock });
    hostId = await addHost(t);
    clusterId = await addCluster(t, hostId);
    // Ten minutes of samples every 15 s: GPU utilisation rises 0..39, block reads grow 1 MB per sample.
    const samples = Array.from({ length: 40 }, (_, i) =>
      sample(T0 + i * 15_000, clusterId, { gpuUtil: i, cpu: 100 + i * 10, read: i * 1e6, write: i * 2e6 }),
    );
    clock.set(new Date(T0 + 10 * MIN));
    t.context.fleet.telemetry.ingestMetrics(hostId, samples, 0);
    await t.context.fleet.telemetry.flush();
  });

  afterAll(async () => {
    await t.close();
  });

  const get = (path: string, key?: string) => call(t, { url: url(path), ...(key ? { key } : {}) });

  it('answers the snapshot from the latest samples, only for the cluster GPUs', async () => {
    const res = await get('?include_processes=true');
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body.success).toBe(true);
    expect(body.meta).toMatchObject({ metrics_version: '1' });
    expect(typeof body.meta.collection_time_ms).toBe('number');
    const d = body.data;
    expect(d.cluster_id).toBe(clusterId);
    expect(d.timestamp).toBe(new Date(T0 + 39 * 15_000).toISOString());
    // Host GPUs 1 and 2 are the cluster's gpu_0 and gpu_1; GPU 0 (always 99) is not there.
    expect(d.gpu.utilization).toEqual({ gpu_0: 40, gpu_1: 41 });
    expect(d.gpu.memory.gpu_0).toEqual({ used: 20e9, total: 80e9, utilization_percent: 25 });
    expect(d.gpu.temperature).toEqual({ gpu_0: 61, gpu_1: 62 });
    expect(d.gpu.power).toEqual({ gpu_0: 301, gpu_1: 302 });
    expect(d.gpu.clock_speeds.gpu_1).toEqual({ graphics_clock: 1980, memory_clock: 2619 });
    // 490 % of one core over 4 cores.
    expect(d.cpu).toEqual({
      utilization: 122.5,
      load_avg: [1.5, 1.25, 1],
      memory_used: 4e9,
      memory_total: 16e9,
      cores: 4,
      threads: null,
    });
    // 1 MB and 2 MB more per 15 s.
    expect(d.storage).toEqual({
      disk_used: null,
      disk_total: null,
      utilization_percent: null,
      io_stats: {
        read_bytes_per_sec: 66666.7,
        write_bytes_per_sec: 133333.3,
        read_ops_per_sec: null,
        write_ops_per_sec: null,
      },
    });
    expect(d.network).toEqual({
      bytes_sent: 2000,
      bytes_received: 1000,
      packets_sent: null,
      packets_received: null,
      interfaces: [],
    });
    expect(d.processes).toEqual([
      {
        pid: 4242,
        name: null,
        command: null,
        cpu_percent: null,
        memory_bytes: null,
        gpu_memory_usage: 1e9,
        gpu_utilization: null,
        user: null,
        runtime_seconds: null,
        gpu_id: 'gpu_0',
      },
    ]);
    expect(d.custom_metrics).toEqual({});
  });

  it('applies the snapshot query parameters', async () => {
    const plain = (await get('')).json().data;
    expect(plain.processes).toBeUndefined();
    const noTemp = (await get('?include_temperature=false&include_power=false')).json().data;
    expect(noTemp.gpu.temperature).toBeUndefined();
    expect(noTemp.gpu.power).toBeUndefined();
    const cpuOnly = (await get('?metrics=cpu')).json().data;
    expect(Object.keys(cpuOnly).sort()).toEqual(['cluster_id', 'cpu', 'timestamp']);
    const two = (await get('?metrics=gpu.utilization,network')).json().data;
    expect(Object.keys(two).sort()).toEqual(['cluster_id', 'gpu', 'network', 'timestamp']);
    const oneGpu = (await get('?gpu_id=gpu_1')).json().data;
    expect(oneGpu.gpu.utilization).toEqual({ gpu_1: 41 });
    expect((await get('?gpu_id=GPU-11111111-bbbb')).json().data.gpu.utilization).toEqual({ gpu_0: 40 });
    const noCustom = (await get('?include_custom=false')).json().data;
    expect(noCustom.custom_metrics).toBeUndefined();
  });

  it('refuses bad snapshot parameters with details per parameter', async () => {
    const res = await get('?gpu_id=gpu_7&metrics=gpu,bogus');
    expect(res.statusCode).toBe(400);
    const body = res.json();
    expect(body.success).toBe(false);
    expect(body.error.code).toBe('INVALID_PARAMETERS');
    expect(Object.keys(body.error.details).sort()).toEqual(['gpu_id', 'metrics']);
    expect(body.error.details.metrics).toContain('bogus');
  });

  it('answers nulls, not old values, when the latest samples are stale', async () => {
    clock.advance(30 * MIN);
    try {
      const d = (await get('')).json().data;
      expect(d.timestamp).toBeNull();
      expect(d.gpu.utilization).toEqual({ gpu_0: null, gpu_1: null });
      expect(d.cpu.utilization).toBeNull();
      expect(await t.context.clusterTelemetry.metrics.current(await cluster())).toBeNull();
    } finally {
      clock.advance(-30 * MIN);
    }
  });

  async function cluster() {
    return t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: clusterId } });
  }

  it('provides the cluster view part (contract 3)', async () => {
    const { metricsViewPart } = await import('../../cluster-telemetry/index.ts');
    const part = metricsViewPart(t.context.clusterTelemetry.metrics);
    expect(await part(await cluster())).toEqual({
      gpu_utilization: 40.5,
      memory_utilization: 25,
      cpu_utilization: 122.5,
    });
  });

  it('answers METRICS_NOT_AVAILABLE for a cluster that is not running', async () => {
    const stopped = await addCluster(t, hostId, { status: 'stopped' });
    const res = await call(t, { url: `/v1/clusters/${stopped}/metrics` });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({
      code: 'METRICS_NOT_AVAILABLE',
      details: { cluster_status: 'stopped', reason: expect.any(String), suggestion: expect.any(String) },
    });
    expect(res.json().meta.request_id).toEqual(expect.any(String));
  });

  it('hides other accounts clusters and enforces the key scope', async () => {
    const other = await addAccount(t);
    for (const path of [
      '',
      '/historical?start_time=2026-01-01T00:00:00Z&end_time=2026-01-01T01:00:00Z',
      '/aggregated',
    ]) {
      const res = await get(path, other.key);
      expect(res.statusCode, path).toBe(404);
      expect(res.json().error.code).toBe('CLUSTER_NOT_FOUND');
    }
    const posted = await call(t, {
      method: 'POST',
      url: url('/custom'),
      key: other,
      payload: { name: 'x', value: 1 },
    });
    expect(posted.statusCode).toBe(404);
    const noScope = await addMember(t, { role: 'owner', keyScopes: ['endpoints'] });
    expect((await get('', noScope.key)).statusCode).toBe(403);
    const readOnly = await addMember(t, { role: 'owner', keyPermissions: ['read'] });
    expect((await get('', readOnly.key)).statusCode).toBe(200);
    const write = await call(t, {
      method: 'POST',
      url: url('/custom'),
      key: readOnly,
      payload: { name: 'x', value: 1 },
    });
    expect(write.statusCode).toBe(403);
    const viewer = await addMember(t, { role: 'viewer' });
    expect((await get('', viewer.key)).statusCode).toBe(200);
  });

  it('returns history in intervals with each aggregation, per GPU, from raw samples', async () => {
    const start = new Date(T0).toISOString();
    const end = new Date(T0 + 10 * MIN).toISOString();
    const res = await get(
      `/historical?start_time=${start}&end_time=${end}&interval=5m&metrics=gpu.utilization,cpu.utilization`,
    );
    expect(res.statusCode, res.body).toBe(200);
    const data = res.json().data;
    expect(data).toMatchObject({ interval: '5m', aggregation: 'avg', resolution: 'raw' });
    // Minutes 0-5 hold samples 0..19 (gpuUtil i): avg 9.5, +1 for host GPU 1 (gpu_0).
    expect(data.data_points).toEqual([
      { timestamp: start, metric: 'cpu.utilization', gpu_id: null, value: (100 + 95) / 4, samples: 20 },
      { timestamp: start, metric: 'gpu.utilization', gpu_id: 'gpu_0', value: 10.5, samples: 20 },
      { timestamp: start, metric: 'gpu.utilization', gpu_id: 'gpu_1', value: 11.5, samples: 20 },
      {
        timestamp: new Date(T0 + 5 * MIN).toISOString(),
        metric: 'cpu.utilization',
        gpu_id: null,
        value: (100 + 295) / 4,
        samples: 20,
      },
      {
        timestamp: new Date(T0 + 5 * MIN).toISOString(),
        metric: 'gpu.utilization',
        gpu_id: 'gpu_0',
        value: 30.5,
        samples: 20,
      },
      {
        timestamp: new Date(T0 + 5 * MIN).toISOString(),
        metric: 'gpu.utilization',
        gpu_id: 'gpu_1',
        value: 31.5,
        samples: 20,
      },
    ]);
    const max = (
      await get(
        `/historical?start_time=${start}&end_time=${end}&interval=1h&aggregation=max&gpu_id=gpu_1&metrics=gpu`,
      )
    ).json().data;
    const util = max.data_points.filter((p: { metric: string }) => p.metric === 'gpu.utilization');
    expect(util).toEqual([
      { timestamp: start, metric: 'gpu.utilization', gpu_id: 'gpu_1', value: 41, samples: 40 },
    ]);
    const sum = (
      await get(
        `/historical?start_time=${start}&end_time=${end}&interval=1h&aggregation=sum&metrics=network.bytes_sent`,
      )
    ).json().data;
    expect(sum.data_points).toEqual([
      { timestamp: start, metric: 'network.bytes_sent', gpu_id: null, value: 80000, samples: 40 },
    ]);
    const min = (
      await get(
        `/historical?start_time=${start}&end_time=${end}&interval=1h&aggregation=min&metrics=cpu.load_avg`,
      )
    ).json().data;
    expect(min.data_points).toEqual([
      { timestamp: start, metric: 'cpu.load_avg', gpu_id: null, value: 1.5, samples: 40 },
    ]);
  });

  it('reads minute rollups for long ranges', async () => {
    // The rollup covers samples received more than 10 s ago.
    clock.advance(MIN);
    await t.context.fleet.telemetry.rollup();
    const start = new Date(T0 - 12 * 3_600_000).toISOString();
    const end = new Date(T0 + 12 * 3_600_000).toISOString();
    const res = await get(
      `/historical?start_time=${start}&end_time=${end}&interval=1d&aggregation=avg&metrics=gpu.utilization&gpu_id=0`,
    );
    expect(res.statusCode, res.body).toBe(200);
    const data = res.json().data;
    expect(data.resolution).toBe('rollup');
    // All 40 samples in one day bucket: avg of 0..39 + 1.
    expect(data.data_points).toEqual([
      {
        timestamp: new Date(Math.floor(T0 / 86_400_000) * 86_400_000).toISOString(),
        metric: 'gpu.utilization',
        gpu_id: 'gpu_0',
        value: 20.5,
        samples: 40,
      },
    ]);
    const stats = (
      await get(`/aggregated?start_time=${start}&end_time=${end}&metrics=gpu.utilization&gpu_id=gpu_0`)
    ).json().data;
    expect(stats.resolution).toBe('rollup');
    expect(stats.metrics[0]).toMatchObject({
      metric: 'gpu.utilization',
      gpu_id: 'gpu_0',
      count: 40,
      min: 1,
      max: 40,
      avg: 20.5,
      last: 40,
    });
    clock.advance(-MIN);
  });

  it('refuses bad history parameters with details per parameter', async () => {
    const missing = await get('/historical');
    expect(missing.statusCode).toBe(400);
    expect(missing.json().error).toMatchObject({
      code: 'INVALID_PARAMETERS',
      details: {
        start_time: expect.stringContaining('required'),
        end_time: expect.stringContaining('required'),
      },
    });
    const bad = await get(
      '/historical?start_time=yesterday&end_time=2026-01-01T00:00:00Z&interval=2m&aggregation=median&metrics=nope',
    );
    expect(Object.keys(bad.json().error.details).sort()).toEqual([
      'aggregation',
      'interval',
      'metrics',
      'start_time',
    ]);
    const reversed = await get('/historical?start_time=2026-01-02T00:00:00Z&end_time=2026-01-01T00:00:00Z');
    expect(reversed.json().error.details).toEqual({ end_time: 'must be after start_time' });
    const tooMany = await get(
      '/historical?start_time=2026-01-01T00:00:00Z&end_time=2026-01-03T00:00:00Z&interval=1m',
    );
    expect(tooMany.json().error.details.interval).toContain('2880 intervals');
  });

  it('summarises each metric over a window', async () => {
    const start = new Date(T0).toISOString();
    const end = new Date(T0 + 10 * MIN).toISOString();
    const res = await get(
      `/aggregated?start_time=${start}&end_time=${end}&metrics=gpu.utilization,cpu.utilization,storage.disk_used`,
    );
    expect(res.statusCode, res.body).toBe(200);
    const data = res.json().data;
    expect(data).toMatchObject({ window: null, resolution: 'raw', start_time: start, end_time: end });
    const byName = Object.fromEntries(
      data.metrics.map((m: { metric: string; gpu_id: string | null }) => [`${m.metric}/${m.gpu_id}`, m]),
    );
    // gpu_0 = host GPU 1: values 1..40.
    expect(byName['gpu.utilization/gpu_0']).toEqual({
      metric: 'gpu.utilization',
      gpu_id: 'gpu_0',
      unit: 'percent',
      count: 40,
      min: 1,
      max: 40,
      avg: 20.5,
      p50: 20.5,
      p95: 38.05,
      last: 40,
    });
    expect(byName['cpu.utilization/null']).toMatchObject({ count: 40, min: 25, max: 122.5, last: 122.5 });
    expect(byName['storage.disk_used/null']).toEqual({
      metric: 'storage.disk_used',
      gpu_id: null,
      unit: 'bytes',
      count: 0,
      min: null,
      max: null,
      avg: null,
      p50: null,
      p95: null,
      last: null,
    });
    const windowed = await get('/aggregated?window=15m&metrics=cpu');
    expect(windowed.json().data).toMatchObject({ window: '15m', resolution: 'raw' });
    const bad = await get('/aggregated?window=2y&start_time=x');
    expect(bad.json().error.code).toBe('INVALID_PARAMETERS');
    expect(Object.keys(bad.json().error.details).sort()).toEqual(['start_time', 'window']);
  });

  it('stores custom metrics and returns them in the snapshot, history and statistics', async () => {
    const post = (payload: unknown) => call(t, { method: 'POST', url: url('/custom'), payload });
    const first = await post({
      name: 'training_loss',
      description: 'loss',
      type: 'gauge',
      unit: 'ratio',
      tags: ['train'],
      value: 0.9,
      timestamp: new Date(T0 + MIN).toISOString(),
    });
    expect(first.statusCode, first.body).toBe(201);
    expect(first.json().data).toMatchObject({
      cluster_id: clusterId,
      name: 'training_loss',
      type: 'gauge',
      unit: 'ratio',
      tags: ['train'],
      value: 0.9,
      timestamp: new Date(T0 + MIN).toISOString(),
    });
    expect(
      (await post({ name: 'training_loss', value: 0.5, timestamp: new Date(T0 + 2 * MIN).toISOString() }))
        .statusCode,
    ).toBe(201);
    expect((await post({ name: 'tokens_per_sec', value: 1200 })).statusCode).toBe(201);

    const snap = (await get('')).json().data;
    expect(snap.custom_metrics).toEqual({ training_loss: 0.5, tokens_per_sec: 1200 });
    expect((await get('?metrics=custom.tokens_per_sec')).json().data.custom_metrics).toEqual({
      tokens_per_sec: 1200,
    });

    const start = new Date(T0).toISOString();
    const end = new Date(T0 + 10 * MIN).toISOString();
    const hist = (
      await get(`/historical?start_time=${start}&end_time=${end}&interval=1m&metrics=custom.training_loss`)
    ).json().data;
    expect(hist.data_points).toEqual([
      {
        timestamp: new Date(T0 + MIN).toISOString(),
        metric: 'custom.training_loss',
        gpu_id: null,
        value: 0.9,
        samples: 1,
      },
      {
        timestamp: new Date(T0 + 2 * MIN).toISOString(),
        metric: 'custom.training_loss',
        gpu_id: null,
        value: 0.5,
        samples: 1,
      },
    ]);
    const later = new Date(T0 + 11 * MIN).toISOString();
    const stats = (
      await get(`/aggregated?start_time=${start}&end_time=${later}&metrics=custom_metrics`)
    ).json().data;
    expect(stats.metrics).toEqual([
      expect.objectContaining({ metric: 'custom.tokens_per_sec', count: 1, last: 1200 }),
      expect.objectContaining({
        metric: 'custom.training_loss',
        unit: 'ratio',
        count: 2,
        min: 0.5,
        max: 0.9,
        avg: 0.7,
        last: 0.5,
      }),
    ]);

    const bad = await post({ name: '1bad name', value: 'x' });
    expect(bad.statusCode).toBe(400);
    const future = await post({ name: 'x', value: 1, timestamp: new Date(T0 + 3_600_000).toISOString() });
    expect(future.json().error).toMatchObject({
      code: 'INVALID_PARAMETERS',
      details: { timestamp: expect.any(String) },
    });
  });
});
