import { describe, expect, it } from 'vitest';
import type { Endpoint, EndpointWorker } from '../db/generated/client.ts';
import {
  duration,
  issuesOf,
  modelStatus,
  overallStatus,
  probeStatus,
  recoveryActions,
} from './health-assessment.ts';

const UPDATED = new Date('2026-11-20T12:00:00.000Z');
const endpoint = (fields: Partial<Endpoint> = {}) =>
  ({
    id: 'ep_a',
    status: 'active',
    statusReason: null,
    targetWorkers: 2,
    gpuType: 'H100',
    gpuCount: 1,
    updatedAt: UPDATED,
    ...fields,
  }) as Endpoint;
const readings = {
  readyCount: 1,
  failedRecently: [] as EndpointWorker[],
  failingProbes: [] as (string | null)[],
  probeCount: 1,
  queued: 0,
  errorRate: null,
  gpuWarnings: [] as string[],
  stamp: '2026-11-20T12:05:00.000Z',
};

describe('what an endpoint’s health readings mean', () => {
  it('finds the issues: capacity, failed workers, failing checks, backlog, error rate, hot GPUs', () => {
    const lost = {
      id: 'w_lost',
      status: 'lost',
      statusReason: 'host gone',
      stoppedAt: UPDATED,
    } as EndpointWorker;
    const issues = issuesOf({
      ...readings,
      endpoint: endpoint({ statusReason: 'waiting for 1 x H100' }),
      readyCount: 0,
      failedRecently: [lost],
      failingProbes: ['connect ECONNREFUSED', null],
      probeCount: 2,
      queued: 3,
      errorRate: 60,
      gpuWarnings: ['a worker GPU is at 90 °C'],
    });
    expect(issues.map((i) => [i.type, i.severity])).toEqual([
      ['capacity', 'high'],
      ['host_unreachable', 'critical'],
      ['health_check', 'high'],
      ['queue_backlog', 'high'],
      ['error_rate', 'high'],
      ['gpu', 'medium'],
    ]);
    expect(issues[2]!.message).toBe('2 of 2 ready workers fail GET /health: connect ECONNREFUSED');
    expect(recoveryActions(issues, endpoint(), 2.5).map((a) => a['action'])).toEqual([
      'add_worker',
      'retry_failed_jobs',
    ]);
    expect(issuesOf({ ...readings, endpoint: endpoint() })).toEqual([]);
  });

  it('derives the statuses of the report and its checks', () => {
    const n = { live: 2, ready: 2, starting: 0, failingProbes: 0, errorRate: null };
    expect(overallStatus(endpoint(), n)).toBe('healthy');
    expect(overallStatus(endpoint(), { ...n, errorRate: 11 })).toBe('degraded');
    expect(overallStatus(endpoint(), { ...n, ready: 1 })).toBe('degraded');
    expect(overallStatus(endpoint(), { ...n, ready: 0, starting: 1 })).toBe('starting');
    expect(overallStatus(endpoint({ targetWorkers: 0 }), { ...n, live: 0, ready: 0 })).toBe('stopped');
    expect(overallStatus(endpoint({ status: 'error' }), n)).toBe('error');
    expect(probeStatus(2, 2, 1, 2)).toBe('degraded');
    expect(probeStatus(2, 2, 2, 2)).toBe('unhealthy');
    expect(probeStatus(0, 0, 0, 0)).toBe('unknown');
    expect(modelStatus(endpoint(), 1, 0)).toBe('degraded');
    expect(modelStatus(endpoint({ status: 'error' }), 1, 1)).toBe('failed');
    expect(duration(90_061_000)).toBe('1d 1h 1m 1s');
  });
});
