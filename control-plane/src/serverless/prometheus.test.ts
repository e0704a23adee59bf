import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../scheduler/simulated-hosts.ts';
import { call } from '../testing/accounts.ts';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { createEndpoint, placedWorker } from '../testing/endpoints.ts';

/**
 * Per-endpoint gauges on /metrics (serverless/prometheus.ts), read from the jobs and workers as they are:
 * queue depth, jobs running, live workers, and executionTime / delayTime percentiles of recent jobs.
 */
describe('per-endpoint Prometheus metrics', () => {
  let t: TestApp;
  let endpointId: string;
  let workerId: string;

  beforeAll(async () => {
    t = await createTestApp({ env: { ANVIL_METRICS_TOKEN: 'metrics-secret-0123456789' } });
    await insertSimulatedHosts(t.context.db, { prefix: 'pm', count: 1, gpusPerHost: 2 });
    endpointId = await createEndpoint(t, 'metered');
    workerId = (await placedWorker(t, endpointId)).id;
  });
  afterAll(async () => t?.close());

  const scrape = async () => {
    const res = await t.app.inject({
      url: '/metrics',
      headers: { authorization: 'Bearer metrics-secret-0123456789' },
    });
    expect(res.statusCode).toBe(200);
    return res.body;
  };
  const sample = (body: string, name: string, labels: string) => {
    const line = body
      .split('\n')
      .find(
        (l) => l.startsWith(`${name}{`) && l.includes(`endpoint_id="${endpointId}"`) && l.includes(labels),
      );
    return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
  };

  it('reports queue depth, running jobs, workers and p50/p95 of execution and delay time', async () => {
    const before = await scrape();
    // No job finished yet: no percentile sample (not a zero).
    expect(sample(before, 'anvil_endpoint_execution_ms', 'quantile="0.5"')).toBeNull();
    expect(sample(before, 'anvil_endpoint_jobs', 'status="IN_QUEUE"')).toBe(0);
    expect(sample(before, 'anvil_endpoint_workers', 'status="starting"')).toBe(1);

    const ids: string[] = [];
    for (let i = 0; i < 4; i += 1) {
      const r = await call(t, { method: 'POST', url: `/v2/${endpointId}/run`, payload: { input: { i } } });
      expect(r.statusCode, r.body).toBe(200);
      ids.push(r.json().id);
    }
    // Two finished jobs with known times (delay 1 s and 3 s, execution 2 s and 4 s), one running, one queued.
    const base = Date.now() - 60_000;
    const at = (ms: number) => new Date(base + ms);
    const finished = [
      { queued: 0, started: 1_000, completed: 3_000 },
      { queued: 0, started: 3_000, completed: 7_000 },
    ];
    for (const [i, times] of finished.entries()) {
      await t.context.db.prisma.endpointJob.update({
        where: { id: ids[i]! },
        data: {
          status: 'COMPLETED',
          workerId,
          queuedAt: at(times.queued),
          startedAt: at(times.started),
          completedAt: at(times.completed),
        },
      });
    }
    await t.context.db.prisma.endpointJob.update({
      where: { id: ids[2]! },
      data: { status: 'IN_PROGRESS', workerId, startedAt: new Date() },
    });

    const body = await scrape();
    expect(sample(body, 'anvil_endpoint_jobs', 'status="IN_QUEUE"')).toBe(1);
    expect(sample(body, 'anvil_endpoint_jobs', 'status="IN_PROGRESS"')).toBe(1);
    expect(sample(body, 'anvil_endpoint_execution_ms', 'quantile="0.5"')).toBe(3_000);
    expect(sample(body, 'anvil_endpoint_execution_ms', 'quantile="0.95"')).toBe(3_900);
    expect(sample(body, 'anvil_endpoint_delay_ms', 'quantile="0.5"')).toBe(2_000);
    expect(sample(body, 'anvil_endpoint_delay_ms', 'quantile="0.95"')).toBe(2_900);
  });
});
