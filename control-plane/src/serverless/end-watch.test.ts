import { describe, expect, it } from 'vitest';
import type { EndpointJob } from '../db/generated/client.ts';
import type { JobListener } from './dispatcher.ts';
import { EndWatch } from './end-watch.ts';

function dispatcher() {
  const listeners = new Set<JobListener>();
  return {
    onFinished(listener: JobListener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    end(id: string, row: Partial<EndpointJob> | null) {
      for (const listener of listeners) listener(id, row as EndpointJob | null);
    },
    get count() {
      return listeners.size;
    },
  };
}

describe('EndWatch', () => {
  it('keeps an end heard while the job was being queued, and only that job’s', async () => {
    const d = dispatcher();
    const watch = new EndWatch(d, 'ep_a');
    d.end('job_other', { id: 'job_other', endpointId: 'ep_a' });
    d.end('job_1', { id: 'job_1', endpointId: 'ep_a', status: 'COMPLETED' });
    watch.follow('job_1');
    // Already heard: no wait at all (the safety poll would take 2 s).
    await watch.sleep(60_000);
    expect(watch.take()).toMatchObject({ id: 'job_1', status: 'COMPLETED' });
    expect(watch.take()).toBeNull();
    watch.close();
    expect(d.count).toBe(0);
  });

  it('wakes at the followed job’s end; another endpoint’s row or another replica’s end means “read it”', async () => {
    const d = dispatcher();
    const watch = new EndWatch(d, 'ep_a');
    watch.follow('job_2');
    const slept = watch.sleep(60_000);
    d.end('job_3', { id: 'job_3', endpointId: 'ep_a' });
    d.end('job_2', null);
    await slept;
    expect(watch.take()).toBe(true);
    d.end('job_2', { id: 'job_2', endpointId: 'ep_b' });
    expect(watch.take()).toBe(true);
    watch.close();
  });

  it('returns after the given time when no end comes', async () => {
    const d = dispatcher();
    const watch = new EndWatch(d, 'ep_a');
    watch.follow('job_4');
    await watch.sleep(5);
    expect(watch.take()).toBeNull();
    watch.close();
  });
});
