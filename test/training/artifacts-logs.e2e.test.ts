import { createHash } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  addAccount,
  boostRateLimits,
  call,
  type TestMember,
} from '../../control-plane/src/testing/accounts.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { uploadedDataset } from './datasets.ts';

/**
 * Customers' logs and artifacts (issue 18 points 3 and 4), end to end: the control plane over loopback HTTP,
 * a real agent (simulated GPUs, the only fake) and real containers. One trainer writes a file and reports
 * it (plus a path that tries to leave the workspace, a symlink that points out of it, and a checkpoint
 * directory); one endpoint worker writes a line. The owner reads, follows, downloads (whole, ranged,
 * resumed) and deletes; another account gets 404 everywhere.
 */
const ARTIFACT_BYTES = 300_000;
const TRAINER = `
echo "trainer says hello rank $ANVIL_RANK"
head -c ${ARTIFACT_BYTES} /dev/urandom > "$ANVIL_CHECKPOINT_DIR/model.bin"
echo "model sha256 $(sha256sum "$ANVIL_CHECKPOINT_DIR/model.bin" | cut -d' ' -f1)"
echo 'ANVIL_REPORT {"type":"artifact","path":"model.bin","name":"final/model.bin"}'
echo 'ANVIL_REPORT {"type":"artifact","path":"../../../etc/passwd","name":"escape"}'
ln -s /etc/hostname "$ANVIL_CHECKPOINT_DIR/leak"
echo 'ANVIL_REPORT {"type":"artifact","path":"leak","name":"leak"}'
mkdir -p "$ANVIL_CHECKPOINT_DIR/step-1" && echo 1 > "$ANVIL_CHECKPOINT_DIR/step-1/step"
echo 'ANVIL_REPORT {"type":"checkpoint","path":"step-1","step":1}'
echo "error: disk almost full" >&2
# A container gone before the agent's next pass would leave no lines to read.
sleep 4
`;

describe.skipIf(!dockerOrFail('test/training/artifacts-logs.e2e.test.ts'))(
  'training and worker logs and artifacts for customers',
  () => {
    let fleet: ClusterFleet;
    let datasetsDir: string;
    let other: TestMember;
    let jobId: string;
    let base: string;

    beforeAll(async () => {
      datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-artifacts-'));
      fleet = await startClusterFleet({ ANVIL_DATASETS_DIR: datasetsDir });
      const address = fleet.t.app.server.address();
      base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
      other = await addAccount(fleet.t);
      await boostRateLimits(fleet.t);
      const datasetId = await uploadedDataset(fleet.t, '{"text":"a"}\n');
      const job = await call(fleet.t, {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: {
          name: 'artifacts',
          modelType: 'custom',
          datasetId: datasetId,
          gpuType: 'h100',
          config: { image: BUSYBOX_IMAGE, command: ['sh', '-c', TRAINER] },
        },
      });
      expect(job.statusCode, job.body).toBe(201);
      jobId = job.json().id;
      let last: { status?: string; statusReason?: string; checkpoints?: unknown[] } = {};
      await waitFor(
        'job completed',
        async () => {
          last = (await call(fleet.t, { url: `/v2/training/jobs/${jobId}` })).json();
          if (['failed', 'stopped', 'cancelled'].includes(last.status!))
            throw new Error(`job ${last.status}`);
          return last.status === 'completed' && last.checkpoints?.length === 1 ? last : null;
        },
        300_000,
      ).catch((error: Error) => {
        throw new Error(`${error.message}; last seen ${JSON.stringify(last)}`);
      });
    }, 500_000);

    afterAll(async () => {
      await fleet?.close();
      await rm(datasetsDir, { recursive: true, force: true });
    });

    const http = (path: string, init: RequestInit & { key?: string } = {}) =>
      fetch(`${base}${path}`, {
        ...init,
        headers: { authorization: `Bearer ${init.key ?? fleet.t.ownerKey}`, ...(init.headers ?? {}) },
      });

    it("reads, searches and follows a trainer's logs; another account and bad ranks are refused", async () => {
      const url = `/v2/training/jobs/${jobId}/logs`;
      const page = await waitFor('logs stored', async () => {
        const res = await call(fleet.t, { url });
        expect(res.statusCode, res.body).toBe(200);
        const body = res.json();
        return body.logs.some((l: { message: string }) => l.message.includes('error: disk')) ? body : null;
      });
      expect(page).toMatchObject({ jobId, rank: 0, attempt: 1, workloadId: `${jobId}-r0` });
      expect(page.logs.map((l: { message: string }) => l.message)).toContain('trainer says hello rank 0');
      const errors = (await call(fleet.t, { url: `${url}?level=error` })).json();
      expect(errors.logs.map((l: { message: string }) => l.message)).toEqual(['error: disk almost full']);
      const search = await call(fleet.t, {
        method: 'POST',
        url: `${url}/search`,
        payload: { query: 'hello AND stream:stdout' },
      });
      expect(search.json()).toMatchObject({ total_matches: 1, jobId });
      const text = await call(fleet.t, { url: `${url}?format=text&search=hello` });
      expect(text.body).toMatch(/INFO {2}\[stdout\] trainer says hello rank 0\n$/);

      // Follow: Server-Sent Events over real HTTP, the backlog first.
      const abort = new AbortController();
      const sse = await http(`${url}?follow=true&limit=50`, { signal: abort.signal });
      expect(sse.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = sse.body!.getReader();
      let received = '';
      while (!received.includes('trainer says hello')) {
        const { value, done } = await reader.read();
        if (done) break;
        received += Buffer.from(value).toString();
      }
      abort.abort();
      expect(received).toMatch(/event: log\ndata: \{.*"message":"trainer says hello rank 0"/);

      for (const path of [url, `${url}?follow=true`]) {
        const res = await call(fleet.t, { url: path, key: other });
        expect(res.statusCode).toBe(404);
        expect(res.json()).toMatchObject({ error: 'TRAINING_JOB_NOT_FOUND' });
      }
      const rank = await call(fleet.t, { url: `${url}?rank=1` });
      expect(rank.statusCode).toBe(400);
      expect(rank.json()).toMatchObject({
        error: 'INVALID_PARAMETERS',
        details: { rank: expect.any(String) },
      });
    });

    it('lists, downloads (whole, ranged, resumed) and deletes artifacts; traversal and symlinks are refused', async () => {
      const logged = (
        await call(fleet.t, { url: `/v2/training/jobs/${jobId}/logs?search=model%20sha256` })
      ).json();
      const expected = /model sha256 ([0-9a-f]{64})/.exec(logged.logs[0].message)![1];
      const list = await call(fleet.t, { url: `/v2/training/jobs/${jobId}/artifacts` });
      expect(list.statusCode, list.body).toBe(200);
      // Reports of one millisecond tie on time: compare by name.
      const artifacts = (list.json().artifacts as Record<string, string>[]).sort((a, b) =>
        a['name']!.localeCompare(b['name']!),
      );
      // The report whose path left the workspace was never recorded.
      expect(artifacts.map((a) => [a['type'], a['name'], a['fileKind']])).toEqual([
        ['artifact', 'final/model.bin', 'file'],
        ['artifact', 'leak', 'outside'],
        ['checkpoint', 'step-1', 'directory'],
      ]);
      const [model, leak, checkpoint] = artifacts as { id: string; downloadUrl: string }[];
      expect(artifacts[0]).toMatchObject({ sizeBytes: ARTIFACT_BYTES, sha256: expected, path: 'model.bin' });

      const whole = await http(model!.downloadUrl);
      expect(whole.status).toBe(200);
      const bytes = Buffer.from(await whole.arrayBuffer());
      expect(bytes.length).toBe(ARTIFACT_BYTES);
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(expected);
      expect(whole.headers.get('etag')).toBe(`"${expected}"`);
      expect(whole.headers.get('x-checksum-sha256')).toBe(expected);
      expect(whole.headers.get('accept-ranges')).toBe('bytes');
      expect(whole.headers.get('content-disposition')).toBe('attachment; filename="model.bin"');

      // Resume from the middle: the rest, glued to the first part, is the file.
      const half = ARTIFACT_BYTES / 2;
      const rest = await http(model!.downloadUrl, {
        headers: { range: `bytes=${half}-`, 'if-range': `"${expected}"` },
      });
      expect(rest.status).toBe(206);
      expect(rest.headers.get('content-range')).toBe(`bytes ${half}-${ARTIFACT_BYTES - 1}/${ARTIFACT_BYTES}`);
      const tail = Buffer.from(await rest.arrayBuffer());
      const glued = Buffer.concat([bytes.subarray(0, half), tail]);
      expect(createHash('sha256').update(glued).digest('hex')).toBe(expected);
      const middle = await http(model!.downloadUrl, { headers: { range: 'bytes=1000-1099' } });
      expect(Buffer.from(await middle.arrayBuffer()).equals(bytes.subarray(1000, 1100))).toBe(true);
      const past = await http(model!.downloadUrl, { headers: { range: `bytes=${ARTIFACT_BYTES}-` } });
      expect(past.status).toBe(416);
      expect(past.headers.get('content-range')).toBe(`bytes */${ARTIFACT_BYTES}`);
      const cached = await http(model!.downloadUrl, { headers: { 'if-none-match': `"${expected}"` } });
      expect(cached.status).toBe(304);

      // A symlink pointing out of the workspace is refused by the agent; a checkpoint directory is not a file.
      const leaked = await call(fleet.t, { url: leak!.downloadUrl });
      expect(leaked.statusCode).toBe(404);
      expect(leaked.json()).toMatchObject({
        error: 'ARTIFACT_NOT_FOUND',
        details: { reason: expect.stringMatching(/leaves/) },
      });
      expect((await call(fleet.t, { url: checkpoint!.downloadUrl })).json()).toMatchObject({
        error: 'NOT_SUPPORTED',
      });

      // Another account sees nothing of it.
      for (const [method, url] of [
        ['GET', `/v2/training/jobs/${jobId}/artifacts`],
        ['GET', model!.downloadUrl],
        ['DELETE', `/v2/training/jobs/${jobId}/artifacts/${model!.id}`],
      ] as const) {
        const res = await call(fleet.t, { method, url, key: other });
        expect(res.statusCode, `${method} ${url}`).toBe(404);
        expect(res.json()).toMatchObject({ error: 'TRAINING_JOB_NOT_FOUND' });
      }

      // The run of an experiment lists the job's artifacts.
      const experiment = await call(fleet.t, {
        method: 'POST',
        url: '/v2/training/experiments',
        payload: { name: 'artifacts', description: 'runs show artifacts' },
      });
      const run = await call(fleet.t, {
        method: 'POST',
        url: `/v2/training/experiments/${experiment.json().id}/runs`,
        payload: { trainingJobId: jobId },
      });
      expect(run.statusCode, run.body).toBe(201);
      expect(
        run
          .json()
          .artifacts.map((a: { id: string }) => a.id)
          .sort(),
      ).toEqual(artifacts.map((a) => a['id']).sort());

      // Storage: the measured bytes (the file and the checkpoint directory) are billed since the job ended.
      await fleet.t.context.storage.pass();
      const billed = await fleet.t.context.db.prisma.usageRecord.findMany({
        where: { kind: 'storage', resourceType: 'training_job', resourceId: jobId },
      });
      const record = billed.find((r) => (r.metadata as { source?: string }).source === 'training_artifacts');
      expect(record?.metadata).toMatchObject({ bytes: ARTIFACT_BYTES + 2, artifacts: 2 });
      expect(record!.quantity).toBeGreaterThan(0);

      // Delete: the file goes from the host, the artifact from the list.
      const onHost = join(fleet.agent.stateDir, 'volumes', `${jobId}-r0`, 'model.bin');
      expect((await stat(onHost)).size).toBe(ARTIFACT_BYTES);
      const deleted = await call(fleet.t, {
        method: 'DELETE',
        url: `/v2/training/jobs/${jobId}/artifacts/${model!.id}`,
      });
      expect(deleted.statusCode, deleted.body).toBe(204);
      await expect(stat(onHost)).rejects.toThrow(/ENOENT/);
      const after = (await call(fleet.t, { url: `/v2/training/jobs/${jobId}/artifacts` })).json();
      expect(after.artifacts.map((a: { id: string }) => a.id)).not.toContain(model!.id);
      expect((await call(fleet.t, { url: model!.downloadUrl })).statusCode).toBe(404);
    });

    it("reads an endpoint worker's logs; another account and unknown workers get 404", async () => {
      const created = await call(fleet.t, {
        method: 'POST',
        url: '/v2/endpoints',
        payload: {
          name: 'talker',
          image: BUSYBOX_IMAGE,
          command: ['sh', '-c', 'echo worker says hello; sleep 600'],
          gpuType: 'H100',
          configuration: { workerCount: 1 },
        },
      });
      expect(created.statusCode, created.body).toBe(201);
      const endpointId = created.json().id;
      const workerId = await waitFor('a worker', async () => {
        const res = await call(fleet.t, { url: `/v2/endpoints/${endpointId}/workers` });
        expect(res.statusCode, res.body).toBe(200);
        return res.json().workers[0]?.id ?? null;
      });
      const url = `/v2/endpoints/${endpointId}/workers/${workerId}/logs`;
      const page = await waitFor('worker logs', async () => {
        const body = (await call(fleet.t, { url })).json();
        return body.logs?.some((l: { message: string }) => l.message === 'worker says hello') ? body : null;
      });
      expect(page).toMatchObject({ endpointId, workerId, workloadId: workerId });
      const foreign = await call(fleet.t, { url, key: other });
      expect(foreign.statusCode).toBe(404);
      expect(foreign.json()).toMatchObject({ error: 'ENDPOINT_NOT_FOUND' });
      const unknown = await call(fleet.t, { url: `/v2/endpoints/${endpointId}/workers/wl_nope/logs` });
      expect(unknown.json()).toMatchObject({ error: 'ENDPOINT_WORKER_NOT_FOUND' });
      await call(fleet.t, { method: 'DELETE', url: `/v2/endpoints/${endpointId}` });
    });
  },
);
