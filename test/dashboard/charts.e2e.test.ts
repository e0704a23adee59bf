import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Inventory, MetricSample } from '@anvil/shared/protocol';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { clusterRow } from '../../control-plane/src/testing/cluster-row.ts';
import { workloadSpecInput } from '../../control-plane/src/testing/workload-spec.ts';
import { FleetControlPlane } from '../fleet/control-plane.ts';
import { browserOrFail, launchChromium } from './browser.ts';

vi.setConfig({ testTimeout: 180_000, hookTimeout: 240_000 });

const canRun = browserOrFail('dashboard chart tests');

/** Where the pages' screenshots go (CI keeps the folder; each path is printed in the log). */
const ARTIFACTS = resolve('test-artifacts/dashboard');

const MINUTE = 60_000;
const GIB = 2 ** 30;
const GPUS = [
  { index: 0, uuid: 'GPU-0a0a0a0a-1111-2222-3333-444444444444' },
  { index: 1, uuid: 'GPU-1b1b1b1b-1111-2222-3333-444444444444' },
];

/** What sample i stores for each GPU and the host: distinct levels per GPU, so no two lines cross. */
function values(i: number) {
  return {
    gpu: [
      { util: 20 + (i % 10) * 2, memory: (1 + (i % 4)) * GIB, temp: 50 + (i % 7), power: 100 + (i % 10) },
      { util: 60 + (i % 5) * 5, memory: (40 + (i % 4)) * GIB, temp: 70 + (i % 3), power: 300 + (i % 10) },
    ],
    cpu: 10 + (i % 20),
  };
}

function inventory(): Inventory {
  return {
    host: {
      hostname: 'chart-host',
      os: { platform: 'linux', distro: 'debian', release: '12', kernel: '6.1', arch: 'x64' },
      cpu: { model: 'Test CPU', cores: 32, threads: 64 },
      memoryBytes: 256 * GIB,
      disks: [],
      networkInterfaces: [],
    },
    gpus: {
      simulated: true,
      source: 'simulated',
      driverVersion: null,
      cudaVersion: null,
      devices: GPUS.map((g) => ({
        index: g.index,
        uuid: g.uuid,
        name: 'NVIDIA H100 80GB HBM3',
        memoryTotalBytes: 80 * GIB,
        pciBusId: null,
      })),
      error: null,
    },
    docker: { version: null, apiVersion: null, runtimes: [], nvidiaRuntime: false, error: null },
  };
}

function sample(atMs: number, i: number): MetricSample {
  const v = values(i);
  return {
    at: atMs,
    host: {
      cpuPercent: v.cpu,
      load1: 1,
      load5: 1,
      load15: 1,
      memoryTotalBytes: 256 * GIB,
      memoryUsedBytes: (100 + (i % 8)) * GIB,
      memoryAvailableBytes: 100 * GIB,
      disks: [{ mount: '/', sizeBytes: 1000 * GIB, usedBytes: (300 + i) * GIB, availableBytes: 500 * GIB }],
      diskIo: null,
      // One megabyte a second in, since "boot".
      network: [
        {
          interface: 'eth0',
          rxBytes: atMs * 1000,
          txBytes: atMs * 10,
          rxErrors: 0,
          txErrors: 0,
          rxDropped: 0,
          txDropped: 0,
        },
      ],
    },
    gpus: GPUS.map((g, n) => ({
      index: g.index,
      uuid: g.uuid,
      utilizationPercent: v.gpu[n]!.util,
      memoryUtilizationPercent: null,
      memoryUsedBytes: v.gpu[n]!.memory,
      memoryTotalBytes: 80 * GIB,
      temperatureC: v.gpu[n]!.temp,
      powerWatts: v.gpu[n]!.power,
      smClockMhz: null,
      memoryClockMhz: null,
      processes: [],
    })),
    containers: [],
  } as unknown as MetricSample;
}

interface DrawnChart {
  name: string;
  times: number[];
  labels: string[];
  values: (number | null)[][];
  /** Per line: how many of its points have the line's colour within 2 px of where they belong. */
  hits: number[];
  points: number[];
}

/**
 * Reads every chart of the page in one go (the page redraws its charts now and then): the values each
 * figure says it drew, and, for each of those points, whether the canvas has the line's colour at the
 * position the plotted scales give it (computed here from the plot's box and scale bounds).
 */
const READ_CHARTS = `(() => [...document.querySelectorAll('figure[data-chart][data-drawn]')].map((figure) => {
  const { times, labels, colors, values } = JSON.parse(figure.dataset.lines);
  const [left, top, width, height] = figure.dataset.plot.split(',').map(Number);
  const xMin = Number(figure.dataset.xMin), xMax = Number(figure.dataset.xMax);
  const yMin = Number(figure.dataset.yMin), yMax = Number(figure.dataset.yMax);
  const canvas = figure.querySelector('canvas');
  const ratio = canvas.width / canvas.clientWidth;
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const hits = [], points = [];
  values.forEach((line, n) => {
    const want = rgb(colors[n]);
    let hit = 0, count = 0;
    line.forEach((v, i) => {
      if (v === null) return;
      count++;
      const x = left + ((times[i] - xMin) / (xMax - xMin)) * width;
      const y = top + ((yMax - v) / (yMax - yMin)) * height;
      let found = false;
      for (let dx = -2; dx <= 2 && !found; dx++) for (let dy = -2; dy <= 2 && !found; dy++) {
        const px = Math.round((x + dx) * ratio), py = Math.round((y + dy) * ratio);
        const o = (py * pixels.width + px) * 4;
        const d = Math.abs(pixels.data[o] - want[0]) + Math.abs(pixels.data[o + 1] - want[1]) + Math.abs(pixels.data[o + 2] - want[2]);
        if (pixels.data[o + 3] > 200 && d < 60) found = true;
      }
      if (found) hit++;
    });
    hits.push(hit); points.push(count);
  });
  return { name: figure.dataset.chart, times, labels, values, hits, points };
}))()`;

/**
 * The dashboard's history charts, fleet table and host timeline in a real Chromium against the real
 * control plane, over samples this test stores: the charts must draw exactly the stored values (one
 * sample per bucket over the last hour, bucket averages over the day) where their scales put them.
 */
describe.skipIf(!canRun)('dashboard charts, fleet filters and host timeline', () => {
  let cp: FleetControlPlane;
  let browser: Browser;
  let hostA = '';
  let hostB = '';
  const now = Date.now();
  /** Samples every 30 s from 55 min to 1 min ago (the hour), and every 30 s for 20 min, 20 h ago (the day). */
  const hourTimes = Array.from({ length: 109 }, (_, i) => now - 55 * MINUTE + i * 30_000);
  const dayTimes = Array.from({ length: 40 }, (_, i) => now - 20 * 60 * MINUTE + i * 30_000);
  const stored = [...dayTimes, ...hourTimes].map((at, i) => ({ at, i }));
  const problems: string[] = [];

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    cp = await FleetControlPlane.start({
      // No agent heartbeats here: the hosts must not turn unreachable while the test looks at them.
      env: { ANVIL_HOST_GRACE_SECONDS: '86400', ANVIL_METRICS_SECONDS: '15' },
    });
    const hosts = cp.context.fleet.hosts;
    const register = async (hostname: string, region: string | null, agentVersion: string) => {
      const token = await cp.call<{ value: string }>('POST', '/v2/admin/hosts/join-tokens', {
        body: region ? { region } : {},
      });
      const result = await hosts.register({ joinToken: token.body.value, hostname, agentVersion });
      if (!result.ok) throw new Error(result.reason);
      return result.hostId;
    };
    hostA = await register('chart-host', 'eu-west', '1.0.0');
    hostB = await register('spare-host', null, '1.0.0');
    await hosts.markConnected(hostA, {
      replicaId: 'test',
      connectionId: 'test-a',
      agentVersion: '1.0.0',
      protocolVersion: 1,
      inventory: inventory(),
    });
    // Host B: one A100, cordoned.
    const b = inventory();
    b.host.hostname = 'spare-host';
    b.gpus.devices = [
      { index: 0, uuid: 'GPU-b', name: 'NVIDIA A100 80GB', memoryTotalBytes: 80 * GIB, pciBusId: null },
    ];
    await hosts.markConnected(hostB, {
      replicaId: 'test',
      connectionId: 'test-b',
      agentVersion: '1.0.0',
      protocolVersion: 1,
      inventory: b,
    });
    await hosts.cordon(hostB, 'fan swap');
    cp.context.fleet.telemetry.ingestMetrics(
      hostA,
      stored.map((s) => sample(s.at, s.i)),
      0,
    );
    await cp.context.fleet.telemetry.flush();
    browser = await launchChromium(['--window-size=1400,1000']);
  });

  afterAll(async () => {
    await browser?.close();
    await cp?.close();
  });

  async function signIn(): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      if (/Content Security Policy|Refused to/i.test(message.text())) problems.push(message.text());
    });
    await page.goto(`${cp.url}/dashboard`);
    await page.fill('[data-form="sign-in"] input[name="key"]', cp.ownerKey);
    await page.click('[data-form="sign-in"] button[type="submit"]');
    await page.locator('[data-action="sign-out"]').waitFor();
    return page;
  }

  async function screenshot(page: Page, name: string): Promise<void> {
    const path = join(ARTIFACTS, `${name}.png`);
    await page.screenshot({ path, fullPage: true });
    process.stdout.write(`dashboard screenshot: ${path}\n`);
  }

  async function charts(page: Page, window: string): Promise<Map<string, DrawnChart>> {
    await page
      .locator(`[data-charts][data-window="${window}"] figure[data-chart="gpu-utilization"][data-drawn]`)
      .waitFor();
    const drawn = (await page.evaluate(READ_CHARTS)) as DrawnChart[];
    return new Map(drawn.map((chart) => [chart.name, chart]));
  }

  it("draws an hour of the host's stored GPU and host samples, one point per sample, where they belong", async () => {
    const page = await signIn();
    await page.goto(`${cp.url}/dashboard#/hosts/${hostA}`);
    const drawn = await charts(page, '1h');
    const gpu = drawn.get('gpu-utilization')!;
    expect(gpu.labels).toEqual(['GPU 0', 'GPU 1']);
    // Buckets are 30 s wide, one sample each: the drawn points are the stored values, in order.
    const expected = (pick: (i: number) => number) => hourTimes.map((_, k) => pick(dayTimes.length + k));
    const nonNull = (line: (number | null)[]) => line.filter((v): v is number => v !== null);
    expect(nonNull(gpu.values[0]!)).toEqual(expected((i) => values(i).gpu[0]!.util));
    expect(nonNull(gpu.values[1]!)).toEqual(expected((i) => values(i).gpu[1]!.util));
    expect(nonNull(drawn.get('gpu-temperature')!.values[1]!)).toEqual(
      expected((i) => values(i).gpu[1]!.temp),
    );
    expect(nonNull(drawn.get('gpu-power')!.values[0]!)).toEqual(expected((i) => values(i).gpu[0]!.power));
    expect(nonNull(drawn.get('gpu-memory')!.values[1]!)).toEqual(expected((i) => values(i).gpu[1]!.memory));
    expect(nonNull(drawn.get('host-cpu')!.values[0]!)).toEqual(expected((i) => values(i).cpu));
    // Counters are drawn as rates: 1 MB/s in, 10 kB/s out.
    const network = drawn.get('host-network')!;
    expect(network.labels).toEqual(['eth0 in', 'eth0 out']);
    for (const v of nonNull(network.values[0]!)) expect(v).toBeCloseTo(1_000_000, 3);
    expect(nonNull(network.values[0]!).length).toBe(hourTimes.length - 1);
    // Each point sits on the canvas where the chart's scales put its value.
    for (const chart of drawn.values()) {
      expect(chart.hits, `${chart.name}: points drawn where they belong`).toEqual(chart.points);
      expect(
        chart.points.reduce((a, b) => a + b, 0),
        chart.name,
      ).toBeGreaterThan(0);
    }
    // The day-old samples are not in the hour.
    expect(gpu.times[0]).toBeGreaterThan(now - 61 * MINUTE);
    await screenshot(page, 'host-last-hour');
    await page.close();
  });

  it('draws the day as bucket averages of the stored samples', async () => {
    const page = await signIn();
    await page.goto(`${cp.url}/dashboard#/hosts/${hostA}`);
    await charts(page, '1h');
    await page.click('[data-window="24h"]');
    const drawn = await charts(page, '24h');
    const gpu = drawn.get('gpu-utilization')!;
    const step = gpu.times[1]! - gpu.times[0]!;
    expect(step).toBe(240_000);
    expect(gpu.times.length).toBeLessThanOrEqual(360);
    // The averages this test expects, bucketed on the chart's own bucket starts.
    const sums = new Map<number, { sum: number; n: number }>();
    for (const s of stored) {
      const bucket = Math.floor((s.at - gpu.times[0]!) / step);
      const entry = sums.get(bucket) ?? { sum: 0, n: 0 };
      entry.sum += values(s.i).gpu[0]!.util;
      entry.n += 1;
      sums.set(bucket, entry);
    }
    const drawnBuckets = gpu.values[0]!.flatMap((v, b) => (v === null ? [] : [[b, v] as const]));
    expect(drawnBuckets.map(([b]) => b)).toEqual([...sums.keys()].sort((a, b) => a - b));
    for (const [b, v] of drawnBuckets) expect(v).toBeCloseTo(sums.get(b)!.sum / sums.get(b)!.n, 6);
    for (const chart of drawn.values()) {
      expect(chart.hits, `${chart.name}: points drawn where they belong`).toEqual(chart.points);
    }
    await screenshot(page, 'host-last-day');
    await page.close();
  });

  it('filters and sorts the fleet table', async () => {
    const page = await signIn();
    const rows = page.locator('[data-table="hosts"] tbody tr');
    await page.locator(`[data-host="${hostB}"]`).waitFor();
    const ids = async () => rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-host')));
    expect(await ids()).toEqual([hostA, hostB]);
    await page.click('[data-sort="name"]');
    await expect.poll(ids).toEqual([hostB, hostA]);
    await page.click('[data-sort="free"]');
    await expect.poll(ids).toEqual([hostB, hostA]);
    expect(await page.getAttribute('[data-column="free"]', 'aria-sort')).toBe('ascending');
    await page.click('[data-sort="free"]');
    await expect.poll(ids).toEqual([hostA, hostB]);

    await page.selectOption('[data-filter="status"]', 'cordoned');
    await expect.poll(ids).toEqual([hostB]);
    await page.selectOption('[data-filter="status"]', '');
    await page.selectOption('[data-filter="gpuType"]', 'NVIDIA H100 80GB HBM3');
    await expect.poll(ids).toEqual([hostA]);
    await page.selectOption('[data-filter="gpuType"]', '');
    await page.selectOption('[data-filter="region"]', '-');
    await expect.poll(ids).toEqual([hostB]);
    await page.selectOption('[data-filter="region"]', 'eu-west');
    await expect.poll(ids).toEqual([hostA]);
    await page.selectOption('[data-filter="region"]', '');
    await page.fill('[data-filter="minFree"]', '2');
    await expect.poll(ids).toEqual([hostA]);
    await page.fill('[data-filter="minFree"]', '3');
    await expect.poll(ids).toEqual([]);
    expect(await page.isVisible('[data-no-match]')).toBe(true);
    await page.fill('[data-filter="minFree"]', '0');
    // Simulated GPUs report no health: both hosts are "unknown", neither "failed".
    await page.selectOption('[data-filter="health"]', 'failed');
    await expect.poll(ids).toEqual([]);
    await page.selectOption('[data-filter="health"]', 'unknown');
    await expect.poll(ids).toEqual([hostA, hostB]);
    await screenshot(page, 'fleet');
    await page.close();
  });

  it("shows a host's timeline, newest first, and a cordon from the page lands on it", async () => {
    const page = await signIn();
    await page.goto(`${cp.url}/dashboard#/hosts/${hostA}`);
    const types = () =>
      page
        .locator(`[data-timeline="${hostA}"] li`)
        .evaluateAll((items) => items.map((li) => li.getAttribute('data-event-type')));
    await expect.poll(types).toEqual(['connected', 'joined']);
    await page.click('[data-view="host"] [data-action="cordon"]');
    await expect.poll(types).toEqual(['cordoned', 'connected', 'joined']);
    await page.click('[data-view="host"] [data-action="uncordon"]');
    await expect.poll(types).toEqual(['uncordoned', 'cordoned', 'connected', 'joined']);
    expect(await page.textContent(`[data-timeline="${hostA}"] li[data-event-type="joined"]`)).toContain(
      'chart-host',
    );
    await screenshot(page, 'host-timeline');
    await page.close();
  });

  it('links a cluster to its workload and the workload back to its cluster', async () => {
    const prisma = cp.context.db.prisma;
    const clusterId = 'cluster_chartlink';
    await prisma.cluster.create({
      data: clusterRow({
        id: clusterId,
        accountId: cp.accountId,
        ownerId: cp.userId,
        name: 'linked',
        status: 'running',
        hostId: hostA,
        gpuIndices: [0],
      }),
    });
    await prisma.workload.create({
      data: {
        id: clusterId,
        hostId: hostA,
        kind: 'cluster',
        ownerAccountId: cp.accountId,
        spec: { workloadId: clusterId, ...workloadSpecInput({ gpus: [{ index: 0, uuid: GPUS[0]!.uuid }] }) },
        phase: 'running',
      },
    });
    const page = await signIn();
    await page.click('a[href="#/clusters"]');
    await page.locator(`[data-cluster="${clusterId}"] [data-link="workload"]`).click();
    await page
      .locator('[data-view="workload"] [data-link="cluster"]')
      .waitFor()
      .catch(async (error: Error) => {
        await screenshot(page, 'workload-failed');
        throw new Error(`${error.message}\n${await page.textContent('body')}`);
      });
    await screenshot(page, 'workload');
    await page.click('[data-view="workload"] [data-link="cluster"]');
    await expect.poll(() => page.locator('[data-table="clusters"] tbody tr').count()).toBe(1);
    expect(await page.locator(`[data-cluster="${clusterId}"]`).count()).toBe(1);
    await screenshot(page, 'cluster');
    for (const [name, href] of [
      ['clusters', '#/clusters'],
      ['accounts', '#/accounts'],
      ['join-tokens', '#/tokens'],
    ]) {
      await page.goto(`${cp.url}/dashboard${href}`);
      await page.locator('table, form').first().waitFor();
      await screenshot(page, name!);
    }
    await page.close();
    // No script error and no refusal by the content security policy on any page.
    expect(problems).toEqual([]);
  });
});
