import { describe, expect, it } from 'vitest';
import { boosted, classify, priorityReserve, tierLimits, unversionedPath, windowStart } from './policy.ts';

describe('rate-limit policy', () => {
  it.each([
    ['GET', '/v2/accounts/usage', 'read', 'GET /accounts/*'],
    ['GET', '/accounts', 'read', 'GET /accounts/*'],
    ['POST', '/v2/accounts/team/invite', 'write', 'POST /accounts/*'],
    ['PUT', '/v2/accounts/profile', 'write', 'PUT /accounts/*'],
    ['PATCH', '/v2/accounts/profile', 'write', 'PUT /accounts/*'],
    ['DELETE', '/v2/accounts/team/:user_id', 'write', 'DELETE /accounts/*'],
    ['GET', '/v1/clusters/:id', 'read', 'GET /clusters/*'],
    ['HEAD', '/v1/clusters', 'read', 'GET /clusters/*'],
    ['POST', '/v1/clusters', 'write', 'POST /clusters'],
    ['POST', '/v2/clusters', 'write', 'POST /clusters'],
    ['POST', '/v1/clusters/:id/start', 'write', null],
    ['PUT', '/v1/clusters/:id', 'write', 'PUT /clusters/*'],
    ['DELETE', '/v1/clusters/:id', 'write', 'DELETE /clusters/*'],
    ['GET', '/v2/endpoints', 'read', 'GET /endpoints/*'],
    ['POST', '/v2/endpoints', 'write', 'POST /endpoints'],
    ['POST', '/v2/endpoints/:id/execute', 'write', 'POST /endpoints/*/execute'],
    ['POST', '/v2/ai/chat', 'ai', 'POST /ai/chat'],
    ['POST', '/ai/text-to-image', 'ai', 'POST /ai/text-to-image'],
    ['POST', '/v2/ai/text-to-video?x=1', 'ai', 'POST /ai/text-to-video'],
    ['POST', '/v2/ai/text-to-speech', 'ai', 'POST /ai/text-to-speech'],
    ['GET', '/v2/ai/models', 'ai', null],
    ['GET', '/v2/training/jobs/:id', 'read', 'GET /training/*'],
    ['POST', '/v2/training/jobs', 'write', 'POST /training/jobs'],
    ['PUT', '/v2/training/jobs/:id', 'write', 'PUT /training/*'],
    ['GET', '/v2/auth/verify', 'read', null],
    ['POST', '/v2/auth/api-keys', 'write', null],
    ['GET', '/v2/accountsx', 'read', null],
  ])('%s %s is %s with rule %s', (method, path, tierClass, rule) => {
    const found = classify(method, path);
    expect(found.tierClass).toBe(tierClass);
    expect(found.rule?.operation ?? null).toBe(rule);
  });

  it('counts only POST /training/jobs against training jobs per day', () => {
    expect(classify('POST', '/v2/training/jobs').trainingJob).toBe(true);
    expect(classify('GET', '/v2/training/jobs').trainingJob).toBe(false);
    expect(classify('POST', '/v2/training/jobs/:id/stop').trainingJob).toBe(false);
  });

  it('strips only a version prefix', () => {
    expect(unversionedPath('/v2/clusters?x=1')).toBe('/clusters');
    expect(unversionedPath('/v1')).toBe('/');
    expect(unversionedPath('/v2x/clusters')).toBe('/v2x/clusters');
  });

  it('knows the tiers, and gives unknown tiers the Free limits', () => {
    expect(tierLimits('pro')).toEqual({ read: 1000, write: 200, ai: 500, trainingJobsPerDay: 20 });
    expect(tierLimits('enterprise').trainingJobsPerDay).toBeNull();
    expect(tierLimits('platinum')).toEqual(tierLimits('free'));
  });

  it('computes boosts, reserves and windows', () => {
    expect(boosted(20, 2.5)).toBe(50);
    expect(boosted(3, 1.1)).toBe(3);
    expect(priorityReserve(100)).toBe(10);
    expect(priorityReserve(5)).toBe(1);
    expect(windowStart(Date.parse('2026-03-04T05:06:07Z'), 3_600_000)).toBe(
      Date.parse('2026-03-04T05:00:00Z'),
    );
    expect(windowStart(Date.parse('2026-03-04T05:06:07Z'), 86_400_000)).toBe(
      Date.parse('2026-03-04T00:00:00Z'),
    );
  });
});
