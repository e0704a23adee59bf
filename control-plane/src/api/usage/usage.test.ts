import { createHmac, timingSafeEqual } from 'node:crypto';
import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp, testLogger, waitFor } from '../../testing/index.ts';
import { documentedOperations } from '../../testing/openapi.ts';
import {
  type HttpReceiver,
  type SmtpReceiver,
  startHttpReceiver,
  startSmtpReceiver,
} from '../../testing/receivers.ts';
import { DETAILED_PERIODS, USAGE_PERIODS } from '../../usage/periods.ts';
import { createUsageServices } from '../../usage/service.ts';

const NOW = new Date('2026-11-24T12:00:00Z'); // a Tuesday
const KEY = 'c'.repeat(64);
const WEBHOOK_SECRET = 'whsec_usage_alerts_42';

async function addCluster(
  t: TestApp,
  accountId: string,
  ownerId: string,
  fields: {
    gpuType: string;
    gpuCount: number;
    region?: string;
    hourlyRate?: number;
    sessionStartedAt?: Date;
  },
): Promise<string> {
  const id = newId('cluster');
  await t.context.db.prisma.cluster.create({
    data: {
      id,
      accountId,
      ownerId,
      name: `train-${id.slice(-4)}`,
      status: fields.sessionStartedAt ? 'running' : 'stopped',
      cpuCores: 8,
      memoryGb: 32,
      storageGb: 100,
      dockerImage: 'anvil-test/busybox:latest',
      command: [],
      gpuIndices: [],
      ...fields,
    },
  });
  return id;
}

async function addRecord(
  t: TestApp,
  accountId: string,
  fields: {
    resourceType?: string;
    resourceId: string;
    kind?: string;
    gpuType?: string | null;
    gpuCount?: number;
    quantity: number;
    unit?: string;
    cost: number;
    startedAt: string;
    endedAt: string;
    userId?: string | null;
    metadata?: Record<string, string>;
  },
) {
  const kind = fields.kind ?? 'gpu_compute';
  const gpuCount = fields.gpuCount ?? 0;
  await t.context.db.prisma.usageRecord.create({
    data: {
      id: newId('use'),
      accountId,
      userId: fields.userId ?? null,
      resourceType: fields.resourceType ?? 'cluster',
      resourceId: fields.resourceId,
      kind,
      gpuType: fields.gpuType ?? null,
      gpuCount,
      quantity: fields.quantity,
      unit: fields.unit ?? 'hours',
      gpuHours: kind === 'gpu_compute' ? fields.quantity * gpuCount : 0,
      cost: fields.cost,
      startedAt: new Date(fields.startedAt),
      endedAt: new Date(fields.endedAt),
      ...(fields.metadata ? { metadata: fields.metadata } : {}),
    },
  });
}

describe('usage reports and alerts API', () => {
  let t: TestApp;
  let clock: ManualClock;
  let webhook: HttpReceiver;
  let chat: HttpReceiver;
  let smtp: SmtpReceiver;
  let stranger: TestMember;
  let admin: TestMember;
  let adminNoBilling: TestMember;
  let developer: TestMember;
  let noAccountsScope: TestMember;
  let h100: string;
  let a100: string;

  beforeAll(async () => {
    webhook = await startHttpReceiver();
    chat = await startHttpReceiver();
    smtp = await startSmtpReceiver();
    clock = new ManualClock(NOW);
    t = await createTestApp({
      clock,
      env: {
        ANVIL_SECRET_KEY: KEY,
        ANVIL_OUTBOUND_ALLOW_PRIVATE: 'true',
        ANVIL_SMTP_URL: smtp.url,
        // Tests call evaluateAll() themselves.
        ANVIL_USAGE_ALERT_SECONDS: '0',
      },
    });
    stranger = await addAccount(t, 'Stranger');
    admin = await addMember(t, { role: 'admin' });
    adminNoBilling = await addMember(t, { role: 'admin', keyScopes: ['accounts', 'clusters'] });
    developer = await addMember(t, { role: 'developer' });
    noAccountsScope = await addMember(t, { role: 'admin', keyScopes: ['billing'] });

    h100 = await addCluster(t, t.accountId, t.userId, { gpuType: 'H100', gpuCount: 2, region: 'us-east-1' });
    // Running since 10:00 at 3 USD/h: an open session of 2 h (6 USD) at NOW.
    a100 = await addCluster(t, t.accountId, admin.userId, {
      gpuType: 'A100',
      gpuCount: 1,
      hourlyRate: 3,
      sessionStartedAt: new Date('2026-11-24T10:00:00Z'),
    });
    // The A100 cluster holds GPU index 1 of a host; its one-minute GPU rollups feed includeMetrics.
    await t.context.db.prisma.host.create({
      data: {
        id: 'host_usage',
        name: 'gpu-07',
        hostname: 'gpu-07.internal',
        credentialHash: 'd'.repeat(64),
        inventory: {
          gpus: {
            simulated: true,
            devices: [
              { index: 0, uuid: 'GPU-other' },
              { index: 1, uuid: 'GPU-ours' },
            ],
          },
        },
        simulated: true,
        gpuCount: 2,
      },
    });
    await t.context.db.prisma.cluster.update({
      where: { id: a100 },
      data: { hostId: 'host_usage', gpuIndices: [1] },
    });
    const gib = 1024 ** 3;
    const rollup = (series: string, bucket: string, util: [number, number], temp: number) => ({
      hostId: 'host_usage',
      kind: 'gpu',
      series,
      bucket: new Date(bucket),
      samples: 4,
      data: {
        utilizationPercent: { avg: util[0], min: util[0], max: util[1], last: util[0] },
        memoryUsedBytes: { avg: 40 * gib, min: 40 * gib, max: 40 * gib, last: 40 * gib },
        memoryTotalBytes: { avg: 80 * gib, min: 80 * gib, max: 80 * gib, last: 80 * gib },
        temperatureC: { avg: temp, min: temp, max: temp, last: temp },
      },
      computedAt: NOW,
    });
    await t.context.db.prisma.metricRollup.createMany({
      data: [
        rollup('GPU-ours', '2026-11-24T10:30:00Z', [50, 70], 60),
        rollup('GPU-ours', '2026-11-24T11:30:00Z', [90, 100], 70),
        // Before its session began, and another cluster's GPU: not counted.
        rollup('GPU-ours', '2026-11-24T09:00:00Z', [0, 0], 30),
        rollup('GPU-other', '2026-11-24T11:00:00Z', [5, 5], 30),
      ],
    });
    const rows = [
      // Today 08:00-10:00, 2 GPUs: 2 h, 4 GPU hours, 10 USD.
      {
        resourceId: h100,
        gpuType: 'H100',
        gpuCount: 2,
        quantity: 2,
        cost: 10,
        startedAt: '2026-11-24T08:00:00Z',
        endedAt: '2026-11-24T10:00:00Z',
      },
      // Across midnight 22 → 23 Nov: 2 h, 4 USD (half of it on the 23rd).
      {
        resourceId: h100,
        gpuType: 'H100',
        gpuCount: 2,
        quantity: 2,
        cost: 4,
        startedAt: '2026-11-22T23:00:00Z',
        endedAt: '2026-11-23T01:00:00Z',
      },
      // Last month: 1 h, 2 USD.
      {
        resourceId: h100,
        gpuType: 'H100',
        gpuCount: 2,
        quantity: 1,
        cost: 2,
        startedAt: '2026-10-20T10:00:00Z',
        endedAt: '2026-10-20T11:00:00Z',
      },
      // Storage: 240 GB-hours over today's first 12 hours, 0.5 USD.
      {
        resourceType: 'storage',
        resourceId: 'vol_datasets',
        kind: 'storage',
        quantity: 240,
        unit: 'gb_hours',
        cost: 0.5,
        startedAt: '2026-11-24T00:00:00Z',
        endedAt: '2026-11-24T12:00:00Z',
        metadata: { name: 'datasets' },
      },
      // Transfer: 3 GB at 09:00, 0.27 USD.
      {
        resourceId: h100,
        kind: 'transfer',
        quantity: 3,
        unit: 'gb',
        cost: 0.27,
        startedAt: '2026-11-24T09:00:00Z',
        endedAt: '2026-11-24T09:00:00Z',
      },
    ];
    for (const row of rows) await addRecord(t, t.accountId, row);
    // Another account's usage, never counted here.
    const theirs = await addCluster(t, stranger.accountId, stranger.userId, { gpuType: 'H100', gpuCount: 8 });
    await addRecord(t, stranger.accountId, {
      resourceId: theirs,
      gpuType: 'H100',
      gpuCount: 8,
      quantity: 5,
      cost: 1000,
      startedAt: '2026-11-24T05:00:00Z',
      endedAt: '2026-11-24T10:00:00Z',
    });
  });
  afterAll(async () => {
    await t.close();
    await webhook.close();
    await chat.close();
    await smtp.close();
  });

  const get = (url: string, key?: TestMember) => call(t, { url, ...(key ? { key } : {}) });

  it('summarises the last day from records and open sessions', async () => {
    const res = await get('/v2/accounts/usage?period=1d');
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      period: '1d',
      periodStart: '2026-11-23T12:00:00.000Z',
      periodEnd: '2026-11-24T12:00:00.000Z',
      timezone: 'UTC',
      summary: {
        totalCost: 16.77,
        totalComputeHours: 4,
        totalEndpointExecutions: 0,
        totalDataTransfer: 3,
        averageDailyCost: 16.77,
        // Previous day: 4 USD (the session across midnight) → +319.25 %.
        costTrend: 319.25,
      },
      breakdown: {
        compute: { cost: 16, hours: 4, percentage: 95.41 },
        storage: { cost: 0.5, gb: 10, percentage: 2.98 },
        dataTransfer: { cost: 0.27, gb: 3, percentage: 1.61 },
        other: { cost: 0, percentage: 0 },
      },
    });
    expect(body.topResources).toEqual([
      {
        id: h100,
        type: 'cluster',
        name: expect.stringMatching(/^train-/),
        cost: 10.27,
        hours: 2,
        percentage: 61.24,
      },
      {
        id: a100,
        type: 'cluster',
        name: expect.stringMatching(/^train-/),
        cost: 6,
        hours: 2,
        percentage: 35.78,
      },
      { id: 'vol_datasets', type: 'storage', name: 'datasets', cost: 0.5, hours: 0, percentage: 2.98 },
    ]);
  });

  it('accepts every period of the spec and refuses others with INVALID_PERIOD', async () => {
    for (const period of USAGE_PERIODS) {
      for (const path of ['', '/gpu', '/endpoints', '/costs']) {
        const res = await get(`/v2/accounts/usage${path}?period=${period}`);
        expect(res.statusCode, `${path} ${period}`).toBe(200);
        expect(res.json().period).toBe(period);
      }
    }
    for (const period of DETAILED_PERIODS) {
      expect((await get(`/v2/accounts/usage/detailed?period=${period}`)).statusCode, period).toBe(200);
    }
    const month = (await get('/v2/accounts/usage')).json();
    expect(month).toMatchObject({ period: 'month', periodStart: '2026-11-01T00:00:00.000Z' });
    // November so far: 16.77 today + the 4 USD session of 22/23 Nov; October: 2 USD.
    expect(month.summary).toMatchObject({ totalCost: 20.77, costTrend: 938.5 });
    const week = (await get('/v2/accounts/usage?period=week&timezone=America/New_York')).json();
    expect(week.periodStart).toBe('2026-11-23T05:00:00.000Z');
    const day = (await get('/v2/accounts/usage?period=day&timezone=Asia/Tokyo')).json();
    expect(day.periodStart).toBe('2026-11-23T15:00:00.000Z');

    const bad: [string, string][] = [
      ['/v2/accounts/usage?period=2d', '2d'],
      ['/v2/accounts/usage?period=year', 'year'],
      ['/v2/accounts/usage/detailed?period=180d', '180d'],
      ['/v2/accounts/usage/detailed?period=month', 'month'],
      ['/v2/accounts/usage/gpu?period=24h', '24h'],
      ['/v2/accounts/usage/endpoints?period=7', '7'],
      ['/v2/accounts/usage/costs?period=1w', '1w'],
    ];
    for (const [url, received] of bad) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(400);
      expect(res.json()).toMatchObject({
        error: 'INVALID_PERIOD',
        code: 400,
        details: { received, validPeriods: expect.arrayContaining(['7d', '30d']) },
      });
    }
  });

  it('answers bad query values with VALIDATION_ERROR and the field', async () => {
    const cases: [string, string][] = [
      ['/v2/accounts/usage?timezone=Mars/Olympus', 'timezone'],
      ['/v2/accounts/usage?format=long', 'format'],
      ['/v2/accounts/usage?nope=1', 'nope'],
      ['/v2/accounts/usage/detailed?resources=cpu', 'resources.0'],
      ['/v2/accounts/usage/gpu?includeMetrics=maybe', 'includeMetrics'],
      ['/v2/accounts/usage/costs?currency=BTC', 'currency'],
      ['/v2/accounts/usage/costs?breakdown=planet', 'breakdown'],
    ];
    for (const [url, field] of cases) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(400);
      expect(res.json(), url).toMatchObject({ error: 'VALIDATION_ERROR', code: 400, details: { field } });
    }
  });

  it('answers the short summary form with real API call counts', async () => {
    const res = await get('/v2/accounts/usage?period=1d&format=short');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      period: '1d',
      computeMinutes: 240,
      storageGB: 10,
      apiCalls: expect.any(Number),
      totalCost: 16.77,
    });
  });

  it('builds the detailed timeline per hour and per day', async () => {
    const hourly = (await get('/v2/accounts/usage/detailed?period=1d&granularity=hour')).json();
    expect(hourly.timeline).toHaveLength(24);
    const at = (date: string) => hourly.timeline.find((p: { date: string }) => p.date === date);
    expect(at('2026-11-24T08:00:00.000Z')).toMatchObject({
      cost: 5.0417, // 5 of the H100 session + 1/12 of the storage
      computeHours: 1,
      resources: { gpu: { H100: { hours: 2, cost: 5 } }, storage: { gbHours: 20 } },
    });
    expect(at('2026-11-24T09:00:00.000Z')).toMatchObject({ dataTransfer: 3 });
    expect(at('2026-11-24T11:00:00.000Z').resources.gpu).toEqual({ A100: { hours: 1, cost: 3 } });
    expect(at('2026-11-23T12:00:00.000Z')).toMatchObject({ cost: 0, resources: { gpu: {} } });

    const daily = (await get('/v2/accounts/usage/detailed?period=7d&resources=gpu')).json();
    expect(daily.granularity).toBe('day');
    expect(daily.timeline.map((p: { date: string }) => p.date.slice(0, 10))).toEqual([
      '2026-11-17',
      '2026-11-18',
      '2026-11-19',
      '2026-11-20',
      '2026-11-21',
      '2026-11-22',
      '2026-11-23',
      '2026-11-24',
    ]);
    expect(daily.timeline[5]).toMatchObject({ cost: 2, resources: { gpu: { H100: { hours: 2, cost: 2 } } } });
    expect(daily.timeline[5].resources).not.toHaveProperty('storage');
    expect(daily.timeline[7].cost).toBe(16.77);
    expect(daily.projections).toMatchObject({ dailyAverage: 2.9671, monthlyEstimate: 89.0143 });
    expect(daily.projections.confidence).toBeGreaterThanOrEqual(0);
    const bad = await get('/v2/accounts/usage/detailed?granularity=minute');
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error).toBe('VALIDATION_ERROR');
  });

  it('reports GPU usage by type, endpoint usage (none yet) and costs by dimension', async () => {
    const gpu = (await get('/v2/accounts/usage/gpu?period=1d&includeMetrics=true')).json();
    expect(gpu.gpuUsage.map((g: { gpuType: string }) => g.gpuType)).toEqual(['A100', 'H100']);
    expect(gpu.gpuUsage[0]).toMatchObject({
      totalHours: 2,
      totalCost: 6,
      sessions: 1,
      averageSessionDuration: 2,
      averageUtilization: 70,
      peakUtilization: 100,
      performance: { averageMemoryUsage: 50, averageTemperature: 65, efficiency: null },
    });
    const withoutMetrics = (await get('/v2/accounts/usage/gpu?period=1d')).json();
    expect(withoutMetrics.includeMetrics).toBe(false);
    expect(withoutMetrics.gpuUsage[0].averageUtilization).toBeNull();
    expect(gpu.gpuUsage[1]).toMatchObject({
      totalHours: 4,
      totalCost: 10,
      sessions: 1,
      averageUtilization: null,
      performance: { averageMemoryUsage: null, averageTemperature: null, efficiency: null },
    });
    expect(gpu.gpuUsage[1].usage.at(-1)).toMatchObject({ hours: 4, cost: 10, sessions: 1 });

    const endpoints = (await get('/v2/accounts/usage/endpoints?period=30d')).json();
    expect(endpoints.endpointUsage).toEqual([]);
    expect(endpoints.summary).toEqual({
      totalExecutions: 0,
      totalCost: 0,
      averageExecutionCost: null,
      mostUsedEndpoint: null,
    });

    const services = (await get('/v2/accounts/usage/costs?period=1d')).json();
    expect(services).toMatchObject({ currency: 'USD', breakdown: 'service', totalCost: 16.77 });
    expect(services.services.map((s: { service: string; cost: number }) => [s.service, s.cost])).toEqual([
      ['compute', 16],
      ['storage', 0.5],
      ['data_transfer', 0.27],
    ]);
    // Last 7 days vs the 7 before (nothing): null; last 30 vs the 30 before (October's 2 USD).
    expect(services.trends).toEqual({ weekOverWeek: null, monthOverMonth: 938.5 });
    const regions = (await get('/v2/accounts/usage/costs?period=1d&breakdown=region')).json();
    expect(regions.services.map((s: { service: string; cost: number }) => [s.service, s.cost])).toEqual([
      ['us-east-1', 10.27],
      ['unassigned', 6.5],
    ]);
    const team = (await get('/v2/accounts/usage/costs?period=1d&breakdown=team')).json();
    expect(team.services.find((s: { service: string }) => s.service === admin.userId)).toMatchObject({
      cost: 6,
      details: { userId: admin.userId },
    });
    const eur = await get('/v2/accounts/usage/costs?currency=EUR');
    expect(eur.statusCode).toBe(400);
    expect(eur.json().details.field).toBe('currency');
    const badBreakdown = await get('/v2/accounts/usage/costs?breakdown=planet');
    expect(badBreakdown.statusCode).toBe(400);
  });

  it('requires the billing scope and billing permission', async () => {
    const routes = ['', '/detailed', '/gpu', '/endpoints', '/costs', '/alerts', '/alerts/rules'];
    for (const path of routes) {
      const url = `/v2/accounts/usage${path}`;
      expect((await get(url, admin)).statusCode, url).toBe(200);
      const noScope = await get(url, adminNoBilling);
      expect(noScope.statusCode, url).toBe(403);
      expect(noScope.json()).toMatchObject({
        error: 'INSUFFICIENT_PERMISSIONS',
        details: { requiredScope: 'billing' },
      });
      const dev = await get(url, developer);
      expect(dev.statusCode, url).toBe(403);
      expect(dev.json().error).toBe('INSUFFICIENT_PERMISSIONS');
      const wrongArea = await get(url, noAccountsScope);
      expect(wrongArea.statusCode, url).toBe(403);
      expect(wrongArea.json()).toMatchObject({ error: 'FORBIDDEN', required_permission: 'accounts:read' });
    }
    const create = await call(t, {
      method: 'POST',
      url: '/v2/accounts/usage/alerts/rules',
      key: developer,
      payload: { name: 'x', threshold: 1 },
    });
    expect(create.statusCode).toBe(403);
    expect(await t.context.db.prisma.usageAlert.count()).toBe(0);
  });

  it('keeps each account to its own usage', async () => {
    const theirs = (await get('/v2/accounts/usage?period=1d', stranger)).json();
    expect(theirs.summary.totalCost).toBe(1000);
    expect(theirs.topResources).toHaveLength(1);
    const ours = (await get('/v2/accounts/usage/costs?period=1d&breakdown=resource')).json();
    expect(ours.totalCost).toBe(16.77);
    expect(ours.services.map((s: { service: string }) => s.service)).not.toContain(theirs.topResources[0].id);
  });

  it('validates alert rules', async () => {
    const before = await t.context.db.prisma.usageAlert.count();
    const cases: [unknown, string][] = [
      [{ threshold: 10 }, 'name'],
      [{ name: 'x' }, 'threshold'],
      [{ name: 'x', threshold: 0 }, 'threshold'],
      [{ name: 'x', threshold: -5 }, 'threshold'],
      [{ name: 'x', threshold: '10' }, 'threshold'],
      [{ name: 'x', threshold: 10, type: 'gpu_hours' }, 'type'],
      [{ name: 'x', threshold: 10, period: 'hourly' }, 'period'],
      [{ name: '', threshold: 10 }, 'name'],
      [{ name: 'x', threshold: 10, channels: ['sms'] }, 'channels'],
    ];
    for (const [payload, field] of cases) {
      const res = await call(t, { method: 'POST', url: '/v2/accounts/usage/alerts/rules', payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field } });
    }
    expect(await t.context.db.prisma.usageAlert.count()).toBe(before);
  });

  it('records a crossed threshold once and notifies webhook, chat and e-mail', async () => {
    const put = (section: string, payload: unknown) =>
      call(t, { method: 'PUT', url: `/v2/accounts/settings/${section}`, payload });
    expect(
      (
        await put('notifications', {
          webhook: {
            enabled: true,
            url: `${webhook.url}/anvil`,
            secret: WEBHOOK_SECRET,
            events: ['cost.threshold_exceeded'],
          },
          slack: { enabled: true, webhook_url: `${chat.url}/services/T1/B1/x`, channel: '#costs' },
        })
      ).statusCode,
    ).toBe(200);
    // Weekly 5 USD (crossed: 18.77 since Monday), monthly 100 USD (not crossed).
    const billing = await put('billing', {
      cost_alerts: [
        { threshold: 5, period: 'weekly' },
        { threshold: 100, period: 'monthly' },
      ],
    });
    expect(billing.statusCode, billing.body).toBe(200);
    const rule = await call(t, {
      method: 'POST',
      url: '/v2/accounts/usage/alerts/rules',
      payload: { name: 'Daily spend', type: 'cost', threshold: 15, period: 'daily' },
    });
    expect(rule.statusCode).toBe(201);
    const ruleId = rule.json().id;
    const hours = await call(t, {
      method: 'POST',
      url: '/v2/accounts/usage/alerts/rules',
      payload: { name: 'Compute hours', type: 'compute_hours', threshold: 50, period: 'monthly' },
    });
    expect(hours.statusCode).toBe(201);
    // The stranger's own rule (far below its 1000 USD) triggers for the stranger only.
    const theirRule = await call(t, {
      method: 'POST',
      url: '/v2/accounts/usage/alerts/rules',
      key: stranger,
      payload: { name: 'Theirs', threshold: 1, period: 'daily' },
    });
    expect(theirRule.statusCode).toBe(201);

    await t.context.usage.alerts.evaluateAll();
    await t.context.usage.alerts.evaluateAll();

    const ours = await t.context.db.prisma.usageAlertTrigger.findMany({ where: { accountId: t.accountId } });
    expect(ours.map((x) => x.ruleKey).sort()).toEqual([ruleId, 'settings:weekly:5'].sort());
    expect(
      await t.context.db.prisma.usageAlertTrigger.count({ where: { accountId: stranger.accountId } }),
    ).toBe(1);

    // Webhook: two signed cost.threshold_exceeded events.
    expect(webhook.requests).toHaveLength(2);
    for (const delivery of webhook.requests) {
      expect(delivery.headers['x-anvil-event']).toBe('cost.threshold_exceeded');
      const expected = `sha256=${createHmac('sha256', WEBHOOK_SECRET).update(delivery.body).digest('hex')}`;
      const given = String(delivery.headers['x-anvil-signature']);
      expect(timingSafeEqual(Buffer.from(given), Buffer.from(expected))).toBe(true);
    }
    const events = webhook.requests.map((r) => JSON.parse(r.body));
    expect(events.find((e) => e.data.alert_id === ruleId)).toMatchObject({
      type: 'cost.threshold_exceeded',
      account_id: t.accountId,
      data: {
        type: 'cost',
        period: 'daily',
        threshold: 15,
        value: 16.77,
        period_start: '2026-11-24T00:00:00.000Z',
      },
    });
    expect(events.find((e) => e.data.source === 'settings')).toMatchObject({
      data: { period: 'weekly', threshold: 5, value: 18.77, period_start: '2026-11-23T00:00:00.000Z' },
    });
    // Chat: two messages to the configured channel.
    expect(chat.requests).toHaveLength(2);
    expect(JSON.parse(chat.requests[0]!.body)).toMatchObject({
      channel: '#costs',
      text: expect.stringContaining('USD'),
    });
    // E-mail: two messages to the owner's address (and the stranger's one to the stranger's owner).
    const owner = await t.context.db.prisma.user.findUniqueOrThrow({ where: { id: t.userId } });
    const toOwner = () => smtp.messages.filter((m) => m.to.includes(owner.email));
    expect(toOwner()).toHaveLength(2);
    expect(smtp.messages.filter((m) => m.to.includes(stranger.email))).toHaveLength(1);
    expect(
      toOwner()
        .map((m) => m.raw)
        .join('\n'),
    ).toContain('Subject: Anvil usage alert: Daily spend');

    const status = (await get('/v2/accounts/usage/alerts')).json();
    expect(status.settings).toEqual({
      emailNotifications: true,
      slackNotifications: true,
      webhookUrl: `${webhook.url}/anvil`,
    });
    const byId = (id: string) => status.alerts.find((a: { id: string }) => a.id === id);
    expect(byId(ruleId)).toMatchObject({
      name: 'Daily spend',
      type: 'cost',
      threshold: 15,
      current: 16.77,
      percentage: 111.8,
      status: 'triggered',
      triggeredAt: NOW.toISOString(),
      notificationsSent: 3,
    });
    expect(byId(hours.json().id)).toMatchObject({
      type: 'compute_hours',
      current: 6,
      status: 'ok',
      triggeredAt: null,
    });
    expect(byId('settings.cost_alerts.1')).toMatchObject({ threshold: 100, current: 20.77, status: 'ok' });
    expect(byId('settings.cost_alerts.0')).toMatchObject({ status: 'triggered', notificationsSent: 3 });

    // Next day: the daily rule fires again (the A100 session keeps running: 12 h × 3 USD by noon).
    clock.set('2026-11-25T12:00:00Z');
    await t.context.usage.alerts.evaluateAll();
    expect(webhook.requests).toHaveLength(3);
    expect(JSON.parse(webhook.requests[2]!.body).data).toMatchObject({ alert_id: ruleId, value: 36 });
    expect(toOwner()).toHaveLength(3);
    clock.set(NOW);

    // Others cannot see or delete these rules; the owner can.
    const theirs = (await get('/v2/accounts/usage/alerts', stranger)).json();
    expect(theirs.alerts.map((a: { name: string }) => a.name)).toEqual(['Theirs']);
    const steal = await call(t, {
      method: 'DELETE',
      url: `/v2/accounts/usage/alerts/rules/${ruleId}`,
      key: stranger,
    });
    expect(steal.statusCode).toBe(404);
    expect(steal.json().error).toBe('USAGE_ALERT_NOT_FOUND');
    expect(await t.context.db.prisma.usageAlert.count({ where: { id: ruleId } })).toBe(1);
    const del = await call(t, { method: 'DELETE', url: `/v2/accounts/usage/alerts/rules/${ruleId}` });
    expect(del.json()).toEqual({ id: ruleId, deleted: true });
    const again = await call(t, { method: 'DELETE', url: `/v2/accounts/usage/alerts/rules/${ruleId}` });
    expect(again.statusCode).toBe(404);
    const rules = (await get('/v2/accounts/usage/alerts/rules')).json().rules;
    expect(rules.map((r: { name: string }) => r.name)).toEqual(['Compute hours']);
  });

  it('records a trigger once when evaluations race', async () => {
    const rule = await call(t, {
      method: 'POST',
      url: '/v2/accounts/usage/alerts/rules',
      payload: { name: 'Raced', threshold: 2, period: 'weekly' },
    });
    const ruleId = rule.json().id;
    const before = webhook.requests.length;
    const results = await Promise.all([
      t.context.usage.alerts.evaluateAccount(t.accountId),
      t.context.usage.alerts.evaluateAccount(t.accountId),
      t.context.usage.alerts.evaluateAccount(t.accountId),
    ]);
    const recorded = results.flat().filter((r) => r.ruleKey === ruleId);
    expect(recorded).toHaveLength(1);
    expect(await t.context.db.prisma.usageAlertTrigger.count({ where: { ruleKey: ruleId } })).toBe(1);
    const events = webhook.requests.slice(before).map((r) => JSON.parse(r.body).data.alert_id);
    expect(events.filter((id) => id === ruleId)).toHaveLength(1);
  });

  it('evaluates on its own timer once started, and stops with it', async () => {
    const services = createUsageServices({
      db: t.context.db,
      clock: t.context.clock,
      accounts: t.context.accounts,
      intervalSeconds: 1,
      logger: testLogger(),
    });
    const rule = await call(t, {
      method: 'POST',
      url: '/v2/accounts/usage/alerts/rules',
      payload: { name: 'Timer', threshold: 1, period: 'monthly' },
    });
    const ruleId = rule.json().id;
    services.start();
    try {
      await waitFor(
        'the timer to evaluate the rule',
        async () => (await t.context.db.prisma.usageAlertTrigger.count({ where: { ruleKey: ruleId } })) > 0,
        15_000,
      );
    } finally {
      await services.stop();
    }
    expect(await t.context.db.prisma.usageAlertTrigger.count({ where: { ruleKey: ruleId } })).toBe(1);
  });

  it('documents its routes in the OpenAPI document', async () => {
    const operations = await documentedOperations(t, ['/v2/accounts/usage']);
    expect(operations.length).toBeGreaterThan(1);
    expect(operations.filter((o) => o.lacking.length > 0)).toEqual([]);
  });
});
