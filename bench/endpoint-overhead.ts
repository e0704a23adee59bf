// runsync overhead over the handler's own time, printed, never asserted on: a real control plane on
// loopback, a real agent (simulated 2xH100) and one worker container per worker contract, each the same
// Node worker (fixtures/node-worker/worker.mjs: an echo handler that reports its own time). Requests go
// one at a time, alternating between the endpoints so both see the same machine; the overhead of one is
// its runsync wall time (client side) minus the handler's own time. Printed: p50 and p99 per contract,
// the RunPod-protocol/HTTP ratio, and the jobs' delayTime p50 (queued to started, RunPod's field).
// The control plane and the agent run with their production timings (heartbeat 10 s, metrics 15 s, the
// agent's resync every 30 s and flush every 500 ms), not the test harness's second-sized ones: the agent's
// resync reconciles the firewall with a burst of iptables processes, every 2 s in tests, which took half
// of this one process's time on a loaded machine and is no part of a job's path.
// Run: `node --import tsx bench/endpoint-overhead.ts` (needs Docker). BENCH_RUNSYNC_ROUNDS (200).
import { pathToFileURL } from 'node:url';
import { freePort } from '../control-plane/src/testing/process.ts';
import { type EndpointFleet, startEndpointFleet, waitFor } from '../test/endpoints/harness.ts';
import { dockerAvailable } from '../test/fixtures/images/docker.ts';
import { ensureNodeWorkerImage, NODE_WORKER_IMAGE } from './fixtures/node-worker/image.ts';

const ROUNDS = Number(process.env['BENCH_RUNSYNC_ROUNDS'] ?? 200);
const WARMUP = 20;

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

export interface RunsyncOverhead {
  protocol: 'http' | 'runpod';
  p50: number;
  p99: number;
  delayP50: number;
}

export async function runEndpointOverheadBench(rounds = ROUNDS): Promise<RunsyncOverhead[] | null> {
  if (!dockerAvailable()) {
    print('runsync overhead: skipped (no Docker engine)');
    return null;
  }
  let f: EndpointFleet | null = null;
  try {
    f = await startEndpointFleet(
      { ANVIL_HEARTBEAT_SECONDS: '10', ANVIL_HOST_GRACE_SECONDS: '30', ANVIL_METRICS_SECONDS: '15' },
      { workerApi: { port: await freePort() }, resyncIntervalMs: 30_000, flushIntervalMs: 500 },
    );
    const fleet = f;
    await ensureNodeWorkerImage(fleet.docker);
    await fleet.cp.call('POST', '/v2/auth/temporary-boost', {
      body: { multiplier: 10, duration: '1h', reason: 'bench' },
    });
    const endpoints: Record<'http' | 'runpod', string> = { http: '', runpod: '' };
    for (const protocol of ['http', 'runpod'] as const) {
      const created = await fleet.cp.call<{ id: string }>('POST', '/v2/endpoints', {
        body: {
          name: `overhead-${protocol}`,
          image: NODE_WORKER_IMAGE,
          command: [process.execPath, '/worker.mjs'],
          gpuType: 'H100',
          configuration: { workerCount: 1, maxConcurrency: 1, timeoutSeconds: 60, workerProtocol: protocol },
        },
      });
      if (created.status !== 201) throw new Error(`create ${protocol}: ${created.text}`);
      endpoints[protocol] = created.body.id;
    }
    for (const id of Object.values(endpoints)) {
      await waitFor(
        `endpoint ${id} active`,
        async () =>
          (await fleet.cp.call<{ status: string }>('GET', `/v2/endpoints/${id}`)).body.status === 'active',
        180_000,
      );
    }
    const samples: Record<'http' | 'runpod', { overhead: number[]; delay: number[] }> = {
      http: { overhead: [], delay: [] },
      runpod: { overhead: [], delay: [] },
    };
    for (let i = 0; i < WARMUP + rounds; i += 1) {
      for (const protocol of ['http', 'runpod'] as const) {
        const started = performance.now();
        const answer = await fleet.cp.call<{
          status: string;
          delayTime: number;
          output: { handlerMs: number };
        }>('POST', `/v2/${endpoints[protocol]}/runsync?wait=60000`, { body: { input: { i } } });
        const wall = performance.now() - started;
        if (answer.body.status !== 'COMPLETED') throw new Error(`${protocol} runsync: ${answer.text}`);
        if (i < WARMUP) continue;
        samples[protocol].overhead.push(wall - answer.body.output.handlerMs);
        samples[protocol].delay.push(answer.body.delayTime);
      }
    }
    const results = (['http', 'runpod'] as const).map((protocol) => ({
      protocol,
      p50: percentile(samples[protocol].overhead, 50),
      p99: percentile(samples[protocol].overhead, 99),
      delayP50: percentile(samples[protocol].delay, 50),
    }));
    for (const r of results) {
      print(
        `runsync overhead over the handler (${r.protocol} worker contract, ${rounds} requests): ` +
          `p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms; delayTime p50 ${r.delayP50} ms`,
      );
    }
    const [http, runpod] = results as [RunsyncOverhead, RunsyncOverhead];
    print(
      `runsync overhead ratio runpod/http: p50 ${(runpod.p50 / http.p50).toFixed(2)}x, p99 ${(runpod.p99 / http.p99).toFixed(2)}x`,
    );
    return results;
  } finally {
    await f?.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await runEndpointOverheadBench();
}
