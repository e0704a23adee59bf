import { describe, expect, it } from 'vitest';
import { checkConfiguration, mergeConfiguration } from './configuration.ts';
import { FINAL_STATUSES, isFinal, JOB_STATUSES, next } from './states.ts';

describe('job state machine', () => {
  it('allows exactly the moves of the execution API', () => {
    expect(next('IN_QUEUE', 'claim')).toBe('IN_PROGRESS');
    expect(next('IN_PROGRESS', 'complete')).toBe('COMPLETED');
    expect(next('IN_PROGRESS', 'fail')).toBe('FAILED');
    expect(next('IN_QUEUE', 'timeout')).toBe('TIMED_OUT');
    expect(next('IN_PROGRESS', 'timeout')).toBe('TIMED_OUT');
    expect(next('IN_QUEUE', 'cancel')).toBe('CANCELLED');
    expect(next('IN_PROGRESS', 'requeue')).toBe('IN_QUEUE');
    expect(next('FAILED', 'retry')).toBe('IN_QUEUE');
    expect(next('TIMED_OUT', 'retry')).toBe('IN_QUEUE');
    // Final statuses stay final, but for a retry of FAILED and TIMED_OUT.
    for (const status of FINAL_STATUSES) {
      for (const trigger of ['claim', 'complete', 'fail', 'timeout', 'cancel', 'requeue'] as const) {
        expect(next(status, trigger), `${status} ${trigger}`).toBeNull();
      }
    }
    expect(next('COMPLETED', 'retry')).toBeNull();
    expect(next('CANCELLED', 'retry')).toBeNull();
    expect(next('IN_QUEUE', 'complete')).toBeNull();
    expect(JOB_STATUSES.filter(isFinal)).toEqual(['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT']);
  });
});

describe('endpoint configuration', () => {
  it('fills defaults and keeps stored values on a partial update', () => {
    const created = mergeConfiguration(null, { workerCount: 3 });
    expect(created).toEqual({
      workerCount: 3,
      maxConcurrency: 1,
      timeoutSeconds: 600,
      environmentVariables: {},
      workerProtocol: 'http',
      autoScaling: {
        enabled: false,
        minWorkers: 0,
        maxWorkers: 3,
        targetUtilization: 70,
        scaleUpCooldown: 30,
        scaleDownCooldown: 300,
      },
    });
    const updated = mergeConfiguration(created, { autoScaling: { enabled: true, maxWorkers: 5 } });
    expect(updated.workerCount).toBe(3);
    expect(updated.autoScaling).toMatchObject({ enabled: true, maxWorkers: 5, targetUtilization: 70 });
  });

  it('names the field, the value and the bound that was crossed', () => {
    const refusal = (input: Parameters<typeof checkConfiguration>[0]) => {
      try {
        checkConfiguration(input);
      } catch (error) {
        return (error as { code: string; details: unknown }).details;
      }
      return null;
    };
    expect(refusal({ workerCount: 51 })).toEqual({ field: 'workerCount', value: 51, maximum: 50 });
    expect(refusal({ timeoutSeconds: 9 })).toEqual({ field: 'timeoutSeconds', value: 9, minimum: 10 });
    expect(refusal({ autoScaling: { targetUtilization: 91 } })).toEqual({
      field: 'autoScaling.targetUtilization',
      value: 91,
      maximum: 90,
    });
    expect(
      refusal({ workerCount: 50, timeoutSeconds: 3600, autoScaling: { targetUtilization: 10 } }),
    ).toBeNull();
  });
});
