import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../control-plane/src/testing/process.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import {
  BUSYBOX_IMAGE,
  type EndpointFleet,
  runpodWorkerCommand,
  startEndpointFleet,
  waitFor,
} from './harness.ts';

// biome-ignore lint/suspicious/noExplicitAny: the API's JSON answers are read field by field in these tests.
type Body = any;

/**
 * The RunPod worker protocol end to end: a real control plane on loopback, a real agent serving its worker
 * API port, and a busybox worker container that pulls its jobs the way RunPod's worker library does
 * (fixtures/runpod-worker.sh): job-take long polls, job-done, stream chunks, pings and job-stop, all through
 * the agent's relay with the worker's own token. Each outcome is read back through /status, /stream and
 * /health.
 */
describe.skipIf(!dockerOrFail('test/endpoints/runpod-protocol.e2e.test.ts'))(
  'serverless endpoints: workers of the RunPod protocol',
  () => {
    let f: EndpointFleet;
    let endpointId: string;
    let workerApiPort: number;

    const api = (method: 'GET' | 'POST', path: string, body?: unknown) =>
      f.cp.call<Body>(method, path, body === undefined ? {} : { body });
    const job = async (jobId: string) => (await api('GET', `/v2/${endpointId}/status/${jobId}`)).body;
    const waitJob = (jobId: string, check: (j: Body) => boolean, what: string, timeoutMs = 60_000) =>
      waitFor(
        `job ${jobId} ${what}`,
        async () => {
          const j = await job(jobId);
          return check(j) ? j : null;
        },
        timeoutMs,
      );
    const run = async (input: unknown, extra: Record<string, unknown> = {}) => {
      const r = await api('POST', `/v2/${endpointId}/run`, { input, ...extra });
      expect(r.status, r.text).toBe(200);
      return r.body.id as string;
    };
    const health = async () => (await api('GET', `/v2/${endpointId}/health`)).body;
    const worker = async () => {
      const [container] = await f.docker.listContainers({
        filters: { label: [`anvil.endpoint=${endpointId}`] },
      });
      if (!container) throw new Error('no worker container');
      return f.docker.getContainer(container.Id);
    };
    const logsOf = async () =>
      (await (await worker()).logs({ stdout: true, stderr: true, follow: false })).toString('utf8');
    /** Runs wget in the worker's container: what any process there can do with the worker API. */
    const wgetInWorker = async (args: string[]) => {
      const exec = await (await worker()).exec({
        Cmd: ['wget', '-S', '-O', '-', ...args],
        AttachStdout: true,
        AttachStderr: true,
      });
      const stream = await exec.start({});
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      await new Promise((resolve) => stream.on('end', resolve));
      return Buffer.concat(chunks).toString('utf8');
    };

    beforeAll(async () => {
      workerApiPort = await freePort();
      f = await startEndpointFleet({}, { workerApi: { port: workerApiPort } });
      await f.cp.context.clusters.prices.set({ H100: 3.6 });
      await api('POST', '/v2/auth/temporary-boost', { multiplier: 10, duration: '1h', reason: 'tests' });
      const created = await api('POST', '/v2/endpoints', {
        name: 'runpod-worker',
        image: BUSYBOX_IMAGE,
        command: await runpodWorkerCommand(),
        gpuType: 'H100',
        configuration: { workerCount: 1, maxConcurrency: 1, timeoutSeconds: 60, workerProtocol: 'runpod' },
      });
      expect(created.status, created.text).toBe(201);
      expect(created.body.configuration.workerProtocol).toBe('runpod');
      endpointId = created.body.id;
      await waitFor(
        'endpoint active',
        async () => (await api('GET', `/v2/endpoints/${endpointId}`)).body.status === 'active',
        180_000,
      );
    }, 400_000);

    afterAll(async () => {
      await f?.close();
    });

    it('runs jobs pulled through the agent: output, failure, progress and streams', {
      timeout: 180_000,
    }, async () => {
      const [container] = await f.docker.listContainers({
        filters: { label: [`anvil.endpoint=${endpointId}`] },
      });
      const env: string[] = (await f.docker.getContainer(container!.Id).inspect()).Config.Env;
      const value = (name: string) => env.find((e) => e.startsWith(`${name}=`))?.slice(name.length + 1);
      // The URLs lead to the agent's port on the host gateway; the control plane's address is nowhere.
      expect(value('RUNPOD_WEBHOOK_GET_JOB')).toBe(
        `http://anvil-agent:${workerApiPort}/v2/${endpointId}/job-take/$ID?gpu=H100`,
      );
      expect(value('RUNPOD_AI_API_KEY')).toMatch(/^anw_/);
      expect(env.join('\n')).not.toContain(new URL(f.cp.url).port);

      const sync = await api('POST', `/v2/${endpointId}/runsync?wait=60000`, { input: { prompt: 'hi' } });
      expect(sync.status, sync.text).toBe(200);
      expect(sync.body).toMatchObject({ status: 'COMPLETED', output: { echo: { prompt: 'hi' } } });
      const done = await job(sync.body.id);
      expect(done.workerId).toBe(done.output.worker);
      expect(done.delayTime).toEqual(expect.any(Number));
      expect(done.executionTime).toEqual(expect.any(Number));

      const failed = await run({ op: 'fail' });
      expect(await waitJob(failed, (j) => j.status === 'FAILED', 'FAILED')).toMatchObject({ error: 'boom' });

      // progress_update: the running job shows it as its output.
      const progress = await run({ op: 'progress', seconds: 3 });
      const midway = await waitJob(progress, (j) => j.output === 'halfway', 'shows its progress');
      expect(midway.status).toBe('IN_PROGRESS');
      expect((await health()).jobs.inProgress).toBe(1);
      expect((await health()).workers).toMatchObject({ ready: 1, running: 1, idle: 0 });
      expect(await waitJob(progress, (j) => j.status === 'COMPLETED', 'COMPLETED')).toMatchObject({
        output: 'done',
      });

      const streamed = await run({ op: 'stream' });
      const first = await api('GET', `/v2/${endpointId}/stream/${streamed}?wait=20000`);
      expect(first.body.stream[0]).toEqual({ output: 'part-1', seq: 1 });
      const final = await waitJob(streamed, (j) => j.status === 'COMPLETED', 'COMPLETED');
      expect(final.output).toEqual(['part-1', 'part-2', 'part-3']);
      const all = await api('GET', `/v2/${endpointId}/stream/${streamed}?offset=0`);
      expect(all.body.stream.map((c: Body) => c.output)).toEqual(['part-1', 'part-2', 'part-3']);

      const counts = (await health()).jobs;
      expect(counts).toMatchObject({ completed: 3, failed: 1, inProgress: 0, inQueue: 0 });
    });

    it('times out and cancels: the worker is told to stop (job-stop) and takes the next job', {
      timeout: 180_000,
    }, async () => {
      const slow = await run({ op: 'sleep', seconds: 30 }, { policy: { executionTimeout: 5_000 } });
      const timedOut = await waitJob(slow, (j) => j.status === 'TIMED_OUT', 'TIMED_OUT');
      expect(timedOut.error).toMatch(/execution timeout of 5000 ms/);
      await waitFor('the worker stopped the timed-out job', async () =>
        (await logsOf()).includes(`stopping ${slow}`),
      );

      const long = await run({ op: 'sleep', seconds: 30 });
      await waitJob(long, (j) => j.status === 'IN_PROGRESS', 'IN_PROGRESS');
      const cancelled = await api('POST', `/v2/${endpointId}/cancel/${long}`);
      expect(cancelled.body).toEqual({ id: long, status: 'CANCELLED' });
      await waitFor('the worker stopped the cancelled job', async () =>
        (await logsOf()).includes(`stopping ${long}`),
      );
      // One slot (maxConcurrency 1): the next job runs while the cancelled one would still sleep.
      const quick = await api('POST', `/v2/${endpointId}/runsync?wait=20000`, { input: 'quick' });
      expect(quick.body).toMatchObject({ status: 'COMPLETED', output: { echo: 'quick' } });
      expect((await job(long)).status).toBe('CANCELLED');
      expect((await health()).jobs).toMatchObject({ inProgress: 0, inQueue: 0 });
    });

    it('scales to zero when idle; the next job waits for a cold start, counted in its delayTime', {
      timeout: 240_000,
    }, async () => {
      const autoScaling = async (settings: Record<string, unknown>) => {
        const put = await fetch(`${f.cp.url}/v2/endpoints/${endpointId}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${f.cp.ownerKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ autoScaling: settings }),
        });
        expect(put.status).toBe(200);
      };
      await autoScaling({
        enabled: true,
        minWorkers: 0,
        maxWorkers: 1,
        scaleDownCooldown: 0,
        scaleUpCooldown: 0,
      });
      await waitFor(
        'scaled to zero',
        async () => (await api('GET', `/v2/endpoints/${endpointId}`)).body.status === 'inactive',
        120_000,
      );
      expect((await health()).workers).toMatchObject({ ready: 0, initializing: 0 });
      const cold = await run({ cold: true });
      // The worker it starts stays for the next test.
      await autoScaling({ scaleDownCooldown: 3600 });
      const done = await waitJob(cold, (j) => j.status === 'COMPLETED', 'COMPLETED', 180_000);
      const worker = await f.cp.context.db.prisma.endpointWorker.findUniqueOrThrow({
        where: { id: done.workerId },
      });
      const coldStart = worker.readyAt!.getTime() - worker.createdAt.getTime();
      expect(coldStart).toBeGreaterThan(0);
      expect(done.delayTime).toBeGreaterThanOrEqual(coldStart);
    });

    it('answers only the worker container, with its own token', { timeout: 60_000 }, async () => {
      // From the host itself (not a container of the agent's): closed before anything is relayed.
      const closed = await new Promise<string>((resolve) => {
        const socket = connect(workerApiPort, '127.0.0.1', () =>
          socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n'),
        );
        let seen = '';
        socket.on('data', (chunk) => {
          seen += chunk.toString();
        });
        socket.on('error', () => resolve(seen));
        socket.on('close', () => resolve(seen));
      });
      expect(closed).toBe('');
      // From the worker's container with a wrong token, or another worker's path: 401.
      const row = await waitFor('a ready worker', () =>
        f.cp.context.db.prisma.endpointWorker.findFirst({ where: { endpointId, status: 'ready' } }),
      );
      const ping = `http://anvil-agent:${workerApiPort}/v2/${endpointId}/ping/${row!.id}`;
      expect(await wgetInWorker(['--header', 'Authorization: anw_wrong', ping])).toContain('401');
      const env: string[] = (await (await worker()).inspect()).Config.Env;
      const token = env.find((e) => e.startsWith('RUNPOD_AI_API_KEY='))!.slice('RUNPOD_AI_API_KEY='.length);
      expect(await wgetInWorker(['--header', `Authorization: ${token}`, ping])).toContain('200 OK');
      const other = ping.replace(row!.id, 'wl_someoneelse');
      expect(await wgetInWorker(['--header', `Authorization: ${token}`, other])).toContain('401');
      // Once the worker is stopped its token is void, even from its container still running (its stop grace).
      await f.cp.context.db.prisma.endpointWorker.update({
        where: { id: row!.id },
        data: { status: 'stopped' },
      });
      expect(await wgetInWorker(['--header', `Authorization: ${token}`, ping])).toContain('401');
    });
  },
);
