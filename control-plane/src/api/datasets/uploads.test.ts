import { createHash } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, createTestDatabase, type TestApp } from '../../testing/index.ts';

// biome-ignore lint/suspicious/noExplicitAny: the API's JSON answers are read field by field, loosely, in these tests.
type AnswerBody = any;

const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');
const MiB = 1024 * 1024;

/** JSON Lines of about `bytes` bytes, one record per line. */
function jsonlOf(bytes: number): { data: Buffer; lines: number } {
  const parts: string[] = [];
  let size = 0;
  let i = 0;
  while (size < bytes) {
    const line = `${JSON.stringify({ i, text: `row ${i} ${'x'.repeat(i % 200)}` })}\n`;
    parts.push(line);
    size += line.length;
    i += 1;
  }
  return { data: Buffer.from(parts.join('')), lines: i };
}

/** A request body sent as a stream in small chunks (chunked transfer encoding: no Content-Length). */
function streamed(data: Buffer, chunk = 64 * 1024): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= data.length) {
        controller.close();
        return;
      }
      controller.enqueue(new Uint8Array(data.subarray(at, at + chunk)));
      at += chunk;
    },
  });
}

describe('dataset uploads over HTTP', () => {
  let t: TestApp;
  let dataDir: string;
  let base: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-dataset-uploads-'));
    t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir } });
    base = await t.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await t.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  const api = async (method: string, path: string, body?: unknown, auth = t.ownerKey) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${auth}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as AnswerBody };
  };

  const putBytes = async (url: string, data: Buffer, token: string, stream = true) => {
    const res = await fetch(url, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      body: stream ? streamed(data) : data,
      ...(stream ? { duplex: 'half' } : {}),
    } as RequestInit);
    return { status: res.status, body: (await res.json()) as AnswerBody };
  };

  const createDataset = async (body: Record<string, unknown>) => {
    const res = await api('POST', '/v2/training/datasets', body);
    expect(res.status).toBe(201);
    return res.body;
  };

  const settled = async (id: string) => {
    await t.context.datasets.processor.idle();
    return (await api('GET', `/v2/training/datasets/${id}`)).body;
  };

  it('streams a single PUT to disk and processes it', async () => {
    const dataset = await createDataset({ name: 'streamed', type: 'text', format: 'jsonl' });
    const { data, lines } = jsonlOf(3 * MiB);
    const url = `${base}/v2/training/uploads/datasets/${dataset.id}`;
    expect(dataset.uploadUrl).toBe(`${t.context.config.publicUrl}/v2/training/uploads`);
    const res = await putBytes(url, data, dataset.uploadToken);
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    expect(res.body.version).toMatchObject({ size: data.length, checksum: sha256(data) });
    const ready = await settled(dataset.id);
    expect(ready).toMatchObject({
      status: 'ready',
      checksum: sha256(data),
      size: { bytes: data.length, examples: lines, compressed: null },
    });
    // A second upload is a second version; the dataset describes the newest.
    // Sent without a Content-Type, as `curl -T` does.
    const next = Buffer.from('{"i":1}\n');
    const bare = await fetch(url, {
      method: 'PUT',
      headers: { authorization: `Bearer ${dataset.uploadToken}` },
      body: new Uint8Array(next),
    });
    expect(bare.status, await bare.clone().text()).toBe(202);
    const updated = await settled(dataset.id);
    expect(updated.versions.map((v: { checksum: string }) => v.checksum)).toEqual([
      sha256(data),
      sha256(next),
    ]);
    expect(updated.size.examples).toBe(1);
    expect(updated.currentVersionId).toBe(updated.versions[1].id);
  });

  it('assembles a multipart upload of several parts sent out of order, with the right checksum', async () => {
    const dataset = await createDataset({
      name: 'big',
      type: 'text',
      format: 'jsonl',
      validation: { required_fields: ['i', 'text'] },
    });
    const { data, lines } = jsonlOf(10 * MiB + 12_345);
    const uploads = `${base}/v2/training/uploads/datasets/${dataset.id}`;
    const init = await fetch(`${uploads}/multipart`, {
      method: 'POST',
      headers: { authorization: `Bearer ${dataset.uploadToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ filename: 'big.jsonl', size: data.length }),
    });
    expect(init.status).toBe(201);
    const upload = (await init.json()) as AnswerBody;
    expect(upload).toMatchObject({
      uploadId: expect.stringMatching(/^dsup_/),
      size: data.length,
      minPartSize: 5 * MiB,
    });
    const chunks = [data.subarray(0, 5 * MiB), data.subarray(5 * MiB, 10 * MiB), data.subarray(10 * MiB)];
    const partUrl = (n: number) =>
      `${base}${new URL(upload.partUrl.replace('{partNumber}', String(n))).pathname}`;
    const answers = await Promise.all(
      [3, 1, 2].map((n) => putBytes(partUrl(n), chunks[n - 1]!, dataset.uploadToken)),
    );
    for (const answer of answers) expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    const byNumber = new Map(answers.map((a) => [a.body.partNumber as number, a.body.checksum as string]));
    expect(byNumber.get(2)).toBe(sha256(chunks[1]!));

    const listed = await api('GET', new URL(upload.abortUrl).pathname, undefined, dataset.uploadToken);
    expect(listed.body.parts.map((p: { partNumber: number }) => p.partNumber)).toEqual([1, 2, 3]);

    const complete = (parts: unknown) =>
      api('POST', new URL(upload.completeUrl).pathname, { parts }, dataset.uploadToken);
    const wrong = await complete([
      { partNumber: 1, checksum: byNumber.get(1) },
      { partNumber: 2, checksum: 'f'.repeat(64) },
      { partNumber: 3, checksum: byNumber.get(3) },
    ]);
    expect(wrong.status).toBe(400);
    expect(wrong.body.details).toMatchObject({ field: 'parts', partNumber: 2 });
    const unordered = await complete([
      { partNumber: 2, checksum: byNumber.get(2) },
      { partNumber: 1, checksum: byNumber.get(1) },
    ]);
    expect(unordered.status).toBe(400);
    const short = await complete([1, 3].map((n) => ({ partNumber: n, checksum: byNumber.get(n) })));
    expect(short.status).toBe(400);

    const done = await complete([1, 2, 3].map((n) => ({ partNumber: n, checksum: byNumber.get(n) })));
    expect(done.status, JSON.stringify(done.body)).toBe(202);
    expect(done.body.version).toMatchObject({
      size: data.length,
      checksum: sha256(data),
      source: 'multipart',
    });
    const ready = await settled(dataset.id);
    expect(ready).toMatchObject({
      status: 'ready',
      checksum: sha256(data),
      size: { bytes: data.length, examples: lines },
    });
    // Parts are gone from disk; the upload cannot be completed twice.
    expect(await readdir(t.context.datasets.storage.datasetDir(dataset.id))).toEqual([
      `${ready.currentVersionId}.data`,
    ]);
    expect((await complete([{ partNumber: 1, checksum: byNumber.get(1) }])).status).toBe(404);
  });

  it('aborts a multipart upload and removes its parts; refuses parts over the declared size', async () => {
    const dataset = await createDataset({ name: 'aborted', type: 'text', format: 'jsonl' });
    const uploads = `/v2/training/uploads/datasets/${dataset.id}`;
    const init = await api('POST', `${uploads}/multipart`, { filename: 'a.jsonl', size: 10 });
    expect(init.status).toBe(201);
    const part = `${base}${uploads}/multipart/${init.body.uploadId}/parts/1`;
    expect((await putBytes(part, Buffer.from('{"a":1}\n'), t.ownerKey)).status).toBe(200);
    const tooBig = await putBytes(part, Buffer.alloc(11, 0x61), t.ownerKey);
    expect(tooBig.status).toBe(413);
    const dir = t.context.datasets.storage.uploadDir(dataset.id, init.body.uploadId);
    expect(await readdir(dir)).toEqual(['1.part']);
    const aborted = await api('DELETE', `${uploads}/multipart/${init.body.uploadId}`);
    expect(aborted.body).toMatchObject({ status: 'aborted' });
    await expect(readdir(dir)).rejects.toMatchObject({ code: 'ENOENT' });
    expect((await putBytes(part, Buffer.from('x'), t.ownerKey)).status).toBe(404);
  });
});

describe('dataset processing across a restart', () => {
  it('processes at start the datasets an earlier process left in processing', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'anvil-dataset-restart-'));
    const database = await createTestDatabase();
    const env = { ANVIL_DATA_DIR: dataDir };
    const first = await createTestApp({ env, database });
    try {
      const created = await first.app.inject({
        method: 'POST',
        url: '/v2/training/datasets',
        headers: first.auth(),
        payload: { name: 'restart', type: 'text', format: 'jsonl' },
      });
      const dataset = created.json();
      // The process "dies" after storing the upload, before its pass over the bytes ran.
      await first.context.datasets.processor.stop();
      const bytes = '{"a":"x"}\n{"a":"y"}\n';
      const res = await first.app.inject({
        method: 'PUT',
        url: `/v2/training/uploads/datasets/${dataset.id}`,
        headers: {
          authorization: `Bearer ${dataset.uploadToken}`,
          'content-type': 'application/octet-stream',
        },
        payload: Buffer.from(bytes),
      });
      expect(res.statusCode).toBe(202);
      await first.app.close();
      await first.context.stop();
      const row = await database.db.prisma.dataset.findUniqueOrThrow({ where: { id: dataset.id } });
      expect(row.status).toBe('processing');
      expect(row.examples).toBeNull();

      const second = await createTestApp({ env, database });
      await second.context.datasets.processor.idle();
      const after = await second.app.inject({
        url: `/v2/training/datasets/${dataset.id}`,
        headers: { authorization: `Bearer ${first.ownerKey}` },
      });
      expect(after.json()).toMatchObject({
        status: 'ready',
        checksum: sha256(bytes),
        size: { bytes: Buffer.byteLength(bytes), examples: 2 },
      });
      await second.close();
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
