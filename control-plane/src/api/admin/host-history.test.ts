import type { MetricSample } from '@anvil/shared/protocol';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addMember, call } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

const T0 = Date.parse('2026-03-02T10:00:00.000Z');
const MINUTE = 60_000;
const HOUR = 3_600_000;
const GPU_A = 'GPU-aaaaaaaa-0000-0000-0000-000000000000';
const GPU_B = 'GPU-bbbbbbbb-0000-0000-0000-000000000000';

interface SeriesBody {
  source: string;
  stepSeconds: number;
  times: number[];
  series: {
    series: string;
    values: Record<string, (number | null)[]>;
    rates: Record<string, (number | null)[]>;
  }[];
}

/** One agent sample: both GPUs and the host, with the values the test chooses. */
function sample(atMs: number, values: { util: number; temp: number; rx: number; cpu: number }): MetricSample {
  const gpu = (uuid: string, index: number, util: number) => ({
    index,
    uuid,
    utilizationPercent: util,
    memoryUtilizationPercent: null,
    memoryUsedBytes: 1024 * util,
    memoryTotalBytes: 80 * 2 ** 30,
    temperatureC: values.temp,
    powerWatts: 100 + util,
    smClockMhz: null,
    memoryClockMhz: null,
    processes: [],
  });
  return {
    at: atMs,
    host: {
      cpuPercent: values.cpu,
      load1: 0.5,
      load5: 0.5,
      load15: 0.5,
      memoryTotalBytes: 64 * 2 ** 30,
      memoryUsedBytes: 8 * 2 ** 30,
      memoryAvailableBytes: 56 * 2 ** 30,
      disks: [{ mount: '/', sizeBytes: 1000, usedBytes: 400, availableBytes: 600 }],
      diskIo: null,
      network: [
        {
          interface: 'eth0',
          rxBytes: values.rx,
          txBytes: 0,
          rxErrors: 0,
          txErrors: 0,
          rxDropped: 0,
          txDropped: 0,
        },
      ],
    },
    gpus: [gpu(GPU_A, 0, values.util), gpu(GPU_B, 1, 100 - values.util)],
    containers: [],
  } as unknown as MetricSample;
}

describe('admin host history: metric series and the host timeline', () => {
  let t: TestApp;
  let clock: ManualClock;
  let hostId: string;

  beforeEach(async () => {
    clock = new ManualClock(new Date(T0 - MINUTE));
    t = await createTestApp({ clock });
    const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
    const registered = await t.context.fleet.hosts.register({
      joinToken: value,
      hostname: 'gpu-box-1',
      agentVersion: '1.2.3',
    });
    if (!registered.ok) throw new Error(registered.reason);
    hostId = registered.hostId;
  });
  afterEach(async () => {
    await t.close();
  });

  /** Samples every 15 s over [T0, T0 + minutes): utilisation = the minute's number, rx at 1000 B/s. */
  async function ingestMinutes(minutes: number, skip: number[] = []): Promise<void> {
    const samples: MetricSample[] = [];
    for (let m = 0; m < minutes; m++) {
      if (skip.includes(m)) continue;
      for (let s = 0; s < 4; s++) {
        const at = T0 + m * MINUTE + s * 15_000;
        // Within a minute utilisation alternates m and m + 2, so the minute's average is m + 1.
        samples.push(sample(at, { util: s % 2 === 0 ? m : m + 2, temp: 40 + m, rx: (at - T0) * 1, cpu: 10 }));
      }
    }
    clock.set(new Date(T0 + minutes * MINUTE));
    t.context.fleet.telemetry.ingestMetrics(hostId, samples, 0);
    await t.context.fleet.telemetry.flush();
  }

  const series = (query: string, key: string | { key: string } = t.ownerKey) =>
    call(t, { url: `/v2/admin/hosts/${hostId}/metrics/series?${query}`, key: key as string });

  it('buckets raw GPU samples into averages, one line per GPU, aligned on the same times', async () => {
    await ingestMinutes(60, [10, 11]);
    const from = new Date(T0).toISOString();
    const to = new Date(T0 + HOUR).toISOString();
    const res = await series(`kind=gpu&keys=utilizationPercent,temperatureC&from=${from}&to=${to}&points=60`);
    expect(res.statusCode).toBe(200);
    const body = res.json<SeriesBody>();
    expect(body.source).toBe('raw');
    expect(body.stepSeconds).toBe(60);
    expect(body.times).toHaveLength(60);
    expect(body.times[0]).toBe(T0);
    expect(body.times[59]).toBe(T0 + 59 * MINUTE);
    expect(body.series.map((s) => s.series)).toEqual([GPU_A, GPU_B]);
    const a = body.series[0]!;
    // Only the keys asked for.
    expect(Object.keys(a.values).sort()).toEqual(['temperatureC', 'utilizationPercent']);
    expect(a.values['utilizationPercent']![0]).toBe(1);
    expect(a.values['utilizationPercent']![42]).toBe(43);
    expect(a.values['temperatureC']![42]).toBe(82);
    // Minutes without samples are gaps, not zeros.
    expect(a.values['utilizationPercent']![10]).toBeNull();
    expect(a.values['utilizationPercent']![11]).toBeNull();
    expect(body.series[1]!.values['utilizationPercent']![42]).toBe(57);

    // One GPU only, and fewer points: wider buckets average more samples.
    const one = (
      await series(`kind=gpu&series=${GPU_B}&keys=utilizationPercent&from=${from}&to=${to}&points=12`)
    ).json<SeriesBody>();
    expect(one.stepSeconds).toBe(300);
    expect(one.times).toHaveLength(12);
    expect(one.series.map((s) => s.series)).toEqual([GPU_B]);
    // Minutes 0..4 average 1..5 for GPU A, so 100 - 3 for GPU B.
    expect(one.series[0]!.values['utilizationPercent']![0]).toBe(97);
  });

  it('answers counters as per-second rates and gauges of the host as averages; a counter restart is no rate', async () => {
    await ingestMinutes(5);
    // The counter restarts (a reboot) in minute 5.
    t.context.fleet.telemetry.ingestMetrics(
      hostId,
      [sample(T0 + 5 * MINUTE + 1_000, { util: 0, temp: 40, rx: 10, cpu: 30 })],
      0,
    );
    clock.set(new Date(T0 + 6 * MINUTE));
    await t.context.fleet.telemetry.flush();
    const res = await series(
      `from=${new Date(T0).toISOString()}&to=${new Date(T0 + 6 * MINUTE).toISOString()}&points=6`,
    );
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json<SeriesBody>();
    expect(body.series.map((s) => s.series)).toEqual(['']);
    const host = body.series[0]!;
    expect(host.rates['net:eth0:rxBytes']).toEqual([1000, 1000, 1000, 1000, 1000, null]);
    expect(host.values['cpuPercent']).toEqual([10, 10, 10, 10, 10, 30]);
    expect(host.values['disk:/:usedBytes']?.[0]).toBe(400);
    // Counters never appear as averages.
    expect(host.values['net:eth0:rxBytes']).toBeUndefined();
  });

  it('reads one-minute rollups for windows past the raw retention', async () => {
    await ingestMinutes(30);
    // Rollups cover what was received until shortly before they run.
    clock.advance(MINUTE);
    await t.context.fleet.telemetry.rollup();
    clock.set(new Date(T0 + 30 * HOUR));
    const res = await series(
      `kind=gpu&series=${GPU_A}&keys=utilizationPercent&from=${new Date(T0).toISOString()}&to=${new Date(T0 + HOUR).toISOString()}&points=20`,
    );
    const body = res.json<SeriesBody>();
    expect(body.source).toBe('1m');
    expect(body.stepSeconds).toBe(180);
    // Minutes 0, 1, 2 average 1, 2, 3.
    expect(body.series[0]!.values['utilizationPercent']![0]).toBe(2);
    expect(body.series[0]!.values['utilizationPercent']![10]).toBeNull();
  });

  it('refuses bad windows, too many keys, other roles and unknown hosts', async () => {
    const bad = await series(`from=${new Date(T0).toISOString()}&to=${new Date(T0 - 1).toISOString()}`);
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ error: 'VALIDATION_ERROR' });
    const long = await series(
      `from=${new Date(T0 - 31 * 24 * HOUR).toISOString()}&to=${new Date(T0).toISOString()}`,
    );
    expect(long.statusCode).toBe(400);
    const keys = Array.from({ length: 65 }, (_, i) => `k${i}`).join(',');
    expect((await series(`keys=${keys}`)).statusCode).toBe(400);
    expect((await series('points=5000')).statusCode).toBe(400);
    const viewer = await addMember(t, { role: 'viewer' });
    expect((await series('', viewer.key)).statusCode).toBe(403);
    const missing = await call(t, { url: '/v2/admin/hosts/host_nope/metrics/series' });
    expect(missing.statusCode).toBe(404);
  });

  it('records joins, connections, unreachability, recovery and cordons on the timeline, newest first', async () => {
    const hosts = t.context.fleet.hosts;
    const inventory = {
      host: { hostname: 'gpu-box-1' },
      gpus: { simulated: true, devices: [] },
    } as unknown as Parameters<typeof hosts.markConnected>[1]['inventory'];
    await hosts.markConnected(hostId, {
      replicaId: 'r1',
      connectionId: 'c1',
      agentVersion: '1.2.3',
      protocolVersion: 1,
      inventory,
    });
    clock.advance(MINUTE);
    await hosts.markUnreachable(new Date(clock.now().getTime() - 1));
    await hosts.recordHeartbeats([{ hostId, at: clock.now() }]);
    await hosts.cordon(hostId, 'bad fan');
    await hosts.cordon(hostId, 'bad fan');
    await hosts.uncordon(hostId);
    await hosts.uncordon(hostId);
    // A stale connection's close changes nothing and says nothing.
    await hosts.markDisconnected(hostId, 'c0');
    await hosts.markDisconnected(hostId, 'c1');
    await t.context.fleet.hostEvents.recordGpuHealth({
      hostId,
      gpuIndex: 0,
      gpuUuid: 'GPU-0',
      from: 'healthy',
      to: 'failed',
      reasons: [{ code: 'xid_79', severity: 'failed', message: 'GPU has fallen off the bus' }],
      by: null,
    });

    const res = await call(t, { url: `/v2/admin/hosts/${hostId}/events` });
    expect(res.statusCode).toBe(200);
    const body = res.json<{ events: { id: string; type: string; message: string; detail: unknown }[] }>();
    expect(body.events.map((e) => e.type)).toEqual([
      'gpu_health',
      'disconnected',
      'uncordoned',
      'cordoned',
      'recovered',
      'unreachable',
      'connected',
      'joined',
    ]);
    expect(body.events[3]!.message).toBe('cordoned: bad fan');
    expect(body.events[0]).toMatchObject({
      message: 'GPU 0 healthy → failed: xid_79',
      detail: { gpuIndex: 0, from: 'healthy', to: 'failed', reasons: [{ code: 'xid_79' }] },
    });
    expect(body.events.at(-1)!.message).toContain('gpu-box-1');

    const page = await call(t, { url: `/v2/admin/hosts/${hostId}/events?limit=3` });
    const first = page.json<{ events: { id: string }[]; nextBefore: string }>();
    expect(first.events).toHaveLength(3);
    const next = await call(t, {
      url: `/v2/admin/hosts/${hostId}/events?limit=3&before=${first.nextBefore}`,
    });
    expect(next.json<{ events: { type: string }[] }>().events.map((e) => e.type)).toEqual([
      'cordoned',
      'recovered',
      'unreachable',
    ]);
    const filtered = await call(t, { url: `/v2/admin/hosts/${hostId}/events?type=cordoned,uncordoned` });
    expect(filtered.json<{ events: { type: string }[] }>().events.map((e) => e.type)).toEqual([
      'uncordoned',
      'cordoned',
    ]);
    const unknown = await call(t, { url: `/v2/admin/hosts/${hostId}/events?type=exploded` });
    expect(unknown.statusCode).toBe(400);
    const viewer = await addMember(t, { role: 'viewer' });
    expect((await call(t, { url: `/v2/admin/hosts/${hostId}/events`, key: viewer })).statusCode).toBe(403);
  });
});
