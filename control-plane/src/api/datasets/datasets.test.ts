import { createHash } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');

describe('training datasets API', () => {
  let t: TestApp;
  let clock: ManualClock;
  let dataDir: string;
  let other: TestMember;
  let reader: TestMember;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-datasets-'));
    clock = new ManualClock(new Date('2026-11-26T10:00:00Z'));
    t = await createTestApp({
      clock,
      env: { ANVIL_DATA_DIR: dataDir, ANVIL_PUBLIC_URL: 'https://anvil.example.com' },
    });
    other = await addAccount(t, 'Other');
    reader = await addMember(t, { role: 'developer', keyPermissions: ['read'], keyScopes: ['training'] });
  });
  afterAll(async () => {
    await t.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  const json = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown, key?: string) =>
    call(t, { method, url, payload, key });

  const create = async (body: Record<string, unknown>, key?: string) => {
    const res = await json('POST', '/v2/training/datasets', body, key);
    expect(res.statusCode, res.body).toBe(201);
    return res.json();
  };

  const upload = (datasetId: string, bytes: Buffer | string, token: string) =>
    t.app.inject({
      method: 'PUT',
      url: `/v2/training/uploads/datasets/${datasetId}`,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      payload: Buffer.from(bytes),
    });

  const settled = async (datasetId: string) => {
    await t.context.datasets.processor.idle();
    const res = await json('GET', `/v2/training/datasets/${datasetId}`);
    expect(res.statusCode).toBe(200);
    return res.json();
  };

  it('creates a dataset in uploading with an upload URL and a one-time token, storing only its hash', async () => {
    const dataset = await create({ name: 'chat', type: 'text', format: 'jsonl', tags: ['a'] });
    expect(dataset).toMatchObject({
      id: expect.stringMatching(/^ds_/),
      status: 'uploading',
      uploadUrl: 'https://anvil.example.com/v2/training/uploads',
      uploadToken: expect.stringMatching(/^dsu_[A-Za-z0-9_-]{43}$/),
      size: { bytes: null, examples: null, compressed: null },
      schema: null,
      versions: [],
      uploadTokenExpiresAt: '2026-11-27T10:00:00.000Z',
    });
    const row = await t.context.db.prisma.dataset.findUniqueOrThrow({ where: { id: dataset.id } });
    expect(row.uploadTokenHash).toBe(sha256(dataset.uploadToken));
    expect(JSON.stringify(row)).not.toContain(dataset.uploadToken);
    const again = (await json('GET', `/v2/training/datasets/${dataset.id}`)).json();
    expect(again.uploadToken).toBeUndefined();
  });

  it('processes an uploaded jsonl: checksum, examples, schema, statistics and checks from the bytes', async () => {
    const dataset = await create({
      name: 'instructions',
      type: 'text',
      format: 'jsonl',
      validation: { required_fields: ['prompt', 'completion'], min_examples: 2, max_sequence_length: 100 },
    });
    const lines = [
      { prompt: 'Hi', completion: 'Hello there', score: 1 },
      { prompt: 'Sum 2+2', completion: '4', score: 2.5, extra: null },
      { prompt: 'é', completion: 'ok', score: 3 },
    ];
    const bytes = `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`;
    const res = await upload(dataset.id, bytes, dataset.uploadToken);
    expect(res.statusCode, res.body).toBe(202);
    expect(res.json()).toMatchObject({
      datasetId: dataset.id,
      status: 'processing',
      version: { size: Buffer.byteLength(bytes), checksum: sha256(bytes), source: 'put' },
    });
    const ready = await settled(dataset.id);
    expect(ready.status).toBe('ready');
    expect(ready.checksum).toBe(sha256(bytes));
    expect(ready.size).toEqual({ bytes: Buffer.byteLength(bytes), examples: 3, compressed: null });
    expect(ready.schema.fields).toEqual([
      { name: 'prompt', type: 'string', nullable: false },
      { name: 'completion', type: 'string', nullable: false },
      { name: 'score', type: 'number', nullable: false },
      { name: 'extra', type: 'null', nullable: true },
    ]);
    expect(ready.statistics.fields.prompt.textLength).toEqual({ min: 1, max: 7, mean: (2 + 7 + 1) / 3 });
    expect(ready.statistics.fields.score.value).toEqual({ min: 1, max: 3, mean: 6.5 / 3 });
    expect(ready.statistics.fields.extra).toMatchObject({ present: 0, nulls: 1, missing: 2 });
    expect(ready.validation.status).toBe('passed');
    expect(ready.validation.required_fields).toEqual(['prompt', 'completion']);
    expect(ready.validation.checks.map((c: { name: string; status: string }) => [c.name, c.status])).toEqual([
      ['checksum', 'pass'],
      ['parse', 'pass'],
      ['encoding', 'pass'],
      ['required_fields', 'pass'],
      ['min_examples', 'pass'],
      ['max_sequence_length', 'pass'],
    ]);
    expect(ready.versions).toEqual([
      expect.objectContaining({ size: Buffer.byteLength(bytes), checksum: sha256(bytes) }),
    ]);
    expect(ready.error).toBeNull();
  });

  it('marks a jsonl with a broken line as error, naming the parse check and the line', async () => {
    const dataset = await create({ name: 'broken', type: 'text', format: 'jsonl' });
    const bytes = '{"text":"a"}\n{"text": oops}\n{"text":"c"}\n';
    expect((await upload(dataset.id, bytes, dataset.uploadToken)).statusCode).toBe(202);
    const failed = await settled(dataset.id);
    expect(failed.status).toBe('error');
    expect(failed.size.examples).toBe(2);
    expect(failed.error).toMatchObject({
      code: 'VALIDATION_FAILED',
      details: { field: 'parse', examples: [{ line: 2, reason: expect.stringContaining('not JSON') }] },
    });
    const parse = failed.validation.checks.find((c: { name: string }) => c.name === 'parse');
    expect(parse).toMatchObject({ status: 'fail', failures: 1 });
    expect(failed.validation.status).toBe('failed');
  });

  it('fails required_fields and names UNSUPPORTED_FORMAT for a zip sent as jsonl', async () => {
    const dataset = await create({
      name: 'req',
      type: 'text',
      format: 'jsonl',
      validation: { required_fields: ['label'] },
    });
    await upload(dataset.id, '{"label":"x"}\n{"text":"no label"}\n', dataset.uploadToken);
    const failed = await settled(dataset.id);
    expect(failed.error).toMatchObject({ code: 'VALIDATION_FAILED', details: { field: 'required_fields' } });

    const zipped = await create({ name: 'zip-as-jsonl', type: 'text', format: 'jsonl' });
    await upload(zipped.id, Buffer.from([0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0]), zipped.uploadToken);
    const mismatch = await settled(zipped.id);
    expect(mismatch.status).toBe('error');
    expect(mismatch.error).toMatchObject({
      code: 'UNSUPPORTED_FORMAT',
      details: { providedFormat: 'jsonl', detectedFormat: 'zip' },
    });
  });

  it('processes a csv with its header as the schema', async () => {
    const dataset = await create({ name: 'table', type: 'structured', format: 'csv' });
    const bytes = 'id,name,price,active\n1,apple,1.5,true\n2,"pear, green",,false\n3,plum,2,TRUE\n';
    await upload(dataset.id, bytes, dataset.uploadToken);
    const ready = await settled(dataset.id);
    expect(ready.status, JSON.stringify(ready.error)).toBe('ready');
    expect(ready.checksum).toBe(sha256(bytes));
    expect(ready.size.examples).toBe(3);
    expect(ready.schema.fields).toEqual([
      { name: 'id', type: 'integer', nullable: false },
      { name: 'name', type: 'string', nullable: false },
      { name: 'price', type: 'number', nullable: true },
      { name: 'active', type: 'boolean', nullable: false },
    ]);
    expect(ready.statistics.fields.name.textLength.max).toBe('pear, green'.length);
  });

  it('accepts an empty upload as a version with no examples and says so', async () => {
    const dataset = await create({ name: 'empty', type: 'text', format: 'jsonl' });
    expect((await upload(dataset.id, Buffer.alloc(0), dataset.uploadToken)).statusCode).toBe(202);
    const ready = await settled(dataset.id);
    expect(ready).toMatchObject({ status: 'ready', checksum: sha256(''), size: { bytes: 0, examples: 0 } });
    expect(ready.validation.warnings).toContain('the file is empty');
  });

  it('refuses creation input that is invalid, changing nothing', async () => {
    const before = await t.context.db.prisma.dataset.count();
    const bad = [
      [{ type: 'text', format: 'jsonl' }, 'VALIDATION_ERROR'],
      [{ name: 'x'.repeat(101), type: 'text', format: 'jsonl' }, 'VALIDATION_ERROR'],
      [{ name: 'x', type: 'sound', format: 'jsonl' }, 'VALIDATION_ERROR'],
      [{ name: 'x', type: 'text', format: 'xlsx' }, 'UNSUPPORTED_FORMAT'],
      [{ name: 'x', type: 'text', format: 'jsonl', surprise: 1 }, 'VALIDATION_ERROR'],
      [
        { name: 'x', type: 'text', format: 'jsonl', validation: { min_examples: 5, max_examples: 2 } },
        'VALIDATION_ERROR',
      ],
      [{ name: 'x', type: 'text', format: 'jsonl', validation: { encoding: 'latin-1' } }, 'VALIDATION_ERROR'],
      [{ name: 'x', format: 'json', dataUrl: 'file:///etc/passwd' }, 'VALIDATION_ERROR'],
      [{ name: 'x', format: 'json', dataUrl: 'http://127.0.0.1:9/data.jsonl' }, 'VALIDATION_ERROR'],
      [{ name: 'x', format: 'json', dataUrl: 'http://[::1]/d' }, 'VALIDATION_ERROR'],
      [{ name: 'x', format: 'json', dataUrl: 'http://169.254.169.254/latest' }, 'VALIDATION_ERROR'],
    ] as const;
    for (const [body, code] of bad) {
      const res = await json('POST', '/v2/training/datasets', body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json()).toMatchObject({ error: code, code: 400 });
    }
    const unsupported = (await json('POST', '/v2/training/datasets', bad[3][0])).json();
    expect(unsupported.details).toMatchObject({
      providedFormat: 'xlsx',
      supportedFormats: expect.arrayContaining(['jsonl', 'tar']),
    });
    expect(await t.context.db.prisma.dataset.count()).toBe(before);
  });

  it('keeps accounts apart and needs write permission and the training scope', async () => {
    const mine = await create({ name: 'private', type: 'text', format: 'jsonl' });
    for (const [method, url] of [
      ['GET', `/v2/training/datasets/${mine.id}`],
      ['PATCH', `/v2/training/datasets/${mine.id}`],
      ['DELETE', `/v2/training/datasets/${mine.id}`],
    ] as const) {
      const res = await json(method, url, method === 'PATCH' ? { name: 'stolen' } : undefined, other.key);
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({
        error: 'DATASET_NOT_FOUND',
        message: expect.any(String),
        code: 404,
        details: { datasetId: mine.id },
      });
    }
    const list = (await json('GET', '/v2/training/datasets', undefined, other.key)).json();
    expect(list.datasets.map((d: { id: string }) => d.id)).not.toContain(mine.id);
    // Another account's key cannot upload either.
    const foreign = await upload(mine.id, '{"a":1}\n', other.key);
    expect(foreign.statusCode).toBe(404);

    const denied = await json(
      'POST',
      '/v2/training/datasets',
      { name: 'r', type: 'text', format: 'jsonl' },
      reader.key,
    );
    expect(denied.statusCode).toBe(403);
    expect(denied.json()).toMatchObject({ error: 'FORBIDDEN', required_permission: 'training:write' });
    expect((await json('GET', `/v2/training/datasets/${mine.id}`, undefined, reader.key)).statusCode).toBe(
      200,
    );
    const unscoped = await addMember(t, { role: 'admin', keyScopes: ['clusters'] });
    expect((await json('GET', '/v2/training/datasets', undefined, unscoped.key)).statusCode).toBe(403);
    expect((await upload(mine.id, '{"a":1}\n', reader.key)).statusCode).toBe(403);
  });

  it("applies the member's role: a viewer reads datasets but cannot create, change, delete or upload", async () => {
    const dataset = await create({ name: 'owned', type: 'text', format: 'jsonl' });
    const viewer = await addMember(t, { role: 'viewer' });
    const developer = await addMember(t, { role: 'developer' });
    expect((await json('GET', `/v2/training/datasets/${dataset.id}`, undefined, viewer.key)).statusCode).toBe(
      200,
    );
    expect((await json('GET', '/v2/training/datasets', undefined, viewer.key)).statusCode).toBe(200);
    const before = await t.context.db.prisma.dataset.count();
    const refused = [
      await json('POST', '/v2/training/datasets', { name: 'v', type: 'text', format: 'jsonl' }, viewer.key),
      await json('PATCH', `/v2/training/datasets/${dataset.id}`, { name: 'renamed' }, viewer.key),
      await json('DELETE', `/v2/training/datasets/${dataset.id}`, undefined, viewer.key),
      // Its key may write in the training scope; the role still decides.
      await upload(dataset.id, '{"text":"a"}\n', viewer.key),
    ];
    for (const res of refused) {
      expect(res.statusCode, res.body).toBe(403);
      expect(res.json()).toMatchObject({ error: 'INSUFFICIENT_PERMISSIONS' });
    }
    expect(await t.context.db.prisma.dataset.count()).toBe(before);
    expect((await json('GET', `/v2/training/datasets/${dataset.id}`)).json().name).toBe('owned');
    expect(await t.context.db.prisma.datasetVersion.count({ where: { datasetId: dataset.id } })).toBe(0);
    await create({ name: 'by a developer', type: 'text', format: 'jsonl' }, developer.key);
  });

  it('downloads a version whole, by range and by version id, with its checksum as ETag', async () => {
    const dataset = await create({ name: 'my set/v1', type: 'text', format: 'jsonl' });
    const empty = await json('GET', `/v2/training/datasets/${dataset.id}/download`);
    expect(empty.statusCode, empty.body).toBe(400);
    expect(empty.json()).toMatchObject({ error: 'INVALID_STATE', details: { datasetId: dataset.id } });
    const first = '{"text":"first"}\n';
    expect((await upload(dataset.id, first, dataset.uploadToken)).statusCode).toBe(202);
    await settled(dataset.id);
    const firstVersion = (await settled(dataset.id)).versions.at(-1).id as string;
    const second = Array.from({ length: 50 }, (_, i) => `{"text":"line ${i}"}\n`).join('');
    // Versions are ordered by creation time (the manual clock would otherwise give both the same).
    clock.advance(1_000);
    expect((await upload(dataset.id, second, t.ownerKey)).statusCode).toBe(202);
    await settled(dataset.id);
    const get = (headers: Record<string, string> = {}, query = '', key = reader.key) =>
      t.app.inject({
        method: 'GET',
        url: `/v2/training/datasets/${dataset.id}/download${query}`,
        headers: { authorization: `Bearer ${key}`, ...headers },
      });

    // The newest version, whole; a read-only training key and a viewer may download.
    const whole = await get();
    expect(whole.statusCode, whole.body).toBe(200);
    expect(whole.rawPayload.equals(Buffer.from(second))).toBe(true);
    expect(whole.headers).toMatchObject({
      'content-type': 'application/octet-stream',
      'content-length': String(Buffer.byteLength(second)),
      etag: `"${sha256(second)}"`,
      'x-content-sha256': sha256(second),
      'accept-ranges': 'bytes',
      'content-disposition': 'attachment; filename="my_set_v1.jsonl"',
    });
    const viewer = await addMember(t, { role: 'viewer' });
    expect((await get({}, '', viewer.key)).statusCode).toBe(200);

    const partial = await get({ range: 'bytes=5-24' });
    expect(partial.statusCode).toBe(206);
    expect(partial.body).toBe(second.slice(5, 25));
    expect(partial.headers['content-range']).toBe(`bytes 5-24/${second.length}`);
    expect((await get({ range: 'bytes=-7' })).body).toBe(second.slice(-7));

    const beyond = await get({ range: `bytes=${second.length}-` });
    expect(beyond.statusCode).toBe(416);
    expect(beyond.headers['content-range']).toBe(`bytes */${second.length}`);
    expect(beyond.json()).toMatchObject({ error: 'RANGE_NOT_SATISFIABLE' });

    expect((await get({ 'if-none-match': `"${sha256(second)}"` })).statusCode).toBe(304);
    const older = await get({}, `?version=${firstVersion}`);
    expect(older.statusCode).toBe(200);
    expect(older.body).toBe(first);
    const unknown = await get({}, '?version=dsv_nosuchversion');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ error: 'NOT_FOUND', details: { versionId: 'dsv_nosuchversion' } });
    expect((await get({}, '?version=../../etc')).statusCode).toBe(400);
    // Another account's dataset does not exist for it.
    expect((await get({}, '', other.key)).statusCode).toBe(404);
  });

  it('refuses the token of another dataset and an expired token; accepts a training write key', async () => {
    const a = await create({ name: 'A', type: 'text', format: 'jsonl' });
    const b = await create({ name: 'B', type: 'text', format: 'jsonl' });
    const crossed = await upload(b.id, '{"x":1}\n', a.uploadToken);
    expect(crossed.statusCode).toBe(401);
    expect(crossed.json()).toMatchObject({ error: 'UNAUTHORIZED' });
    expect((await upload(b.id, '{"x":1}\n', 'dsu_wrong')).statusCode).toBe(401);
    expect(
      (await t.app.inject({ method: 'PUT', url: `/v2/training/uploads/datasets/${b.id}`, payload: 'x' }))
        .statusCode,
    ).toBe(401);
    const textInit = await t.app.inject({
      method: 'POST',
      url: `/v2/training/uploads/datasets/${b.id}/multipart`,
      headers: { authorization: `Bearer ${b.uploadToken}`, 'content-type': 'text/plain' },
      payload: 'filename=x',
    });
    expect(textInit.statusCode).toBe(415);
    const byKey = await upload(b.id, '{"x":1}\n', t.ownerKey);
    expect(byKey.statusCode).toBe(202);
    await t.context.datasets.processor.idle();

    clock.advance(24 * 3600 * 1000 + 1);
    try {
      const expired = await upload(a.id, '{"x":1}\n', a.uploadToken);
      expect(expired.statusCode).toBe(401);
      expect(expired.json().message).toContain('expired');
      expect((await settled(a.id)).status).toBe('uploading');
    } finally {
      clock.advance(-(24 * 3600 * 1000 + 1));
    }
  });

  it('aborts multipart uploads left past their 7 days and removes their parts', async () => {
    const dataset = await create({ name: 'stale', type: 'text', format: 'jsonl' });
    const uploads = `/v2/training/uploads/datasets/${dataset.id}/multipart`;
    const init = await t.app.inject({
      method: 'POST',
      url: uploads,
      headers: { authorization: `Bearer ${dataset.uploadToken}` },
      payload: { filename: 'x.jsonl', size: 8 },
    });
    expect(init.statusCode, init.body).toBe(201);
    const { uploadId, expiresAt } = init.json();
    expect(expiresAt).toBe(new Date(clock.now().getTime() + 7 * 86_400_000).toISOString());
    const part = await t.app.inject({
      method: 'PUT',
      url: `${uploads}/${uploadId}/parts/1`,
      headers: { authorization: `Bearer ${dataset.uploadToken}`, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('{"a":1}\n'),
    });
    expect(part.statusCode, part.body).toBe(200);
    const dir = t.context.datasets.storage.uploadDir(dataset.id, uploadId);
    expect(await readdir(dir)).toEqual(['1.part']);
    clock.advance(7 * 86_400_000 + 1);
    try {
      await t.context.datasets.multipart.sweep();
    } finally {
      clock.advance(-(7 * 86_400_000 + 1));
    }
    await expect(readdir(dir)).rejects.toMatchObject({ code: 'ENOENT' });
    const row = await t.context.db.prisma.datasetUpload.findUniqueOrThrow({ where: { id: uploadId } });
    expect(row.status).toBe('aborted');
    const late = await t.app.inject({
      method: 'GET',
      url: `${uploads}/${uploadId}`,
      headers: { authorization: `Bearer ${dataset.uploadToken}` },
    });
    expect(late.statusCode).toBe(404);
    expect(late.json()).toMatchObject({ error: 'UPLOAD_NOT_FOUND' });
  });

  it('lists with filters, sort and pagination', async () => {
    const fresh = await addAccount(t, 'Lister');
    const names = ['delta', 'alpha', 'charlie', 'bravo'];
    const ids: string[] = [];
    for (const [i, name] of names.entries()) {
      clock.advance(1000);
      const d = await create({ name, type: i % 2 === 0 ? 'text' : 'structured', format: 'jsonl' }, fresh.key);
      ids.push(d.id);
      if (name === 'alpha' || name === 'charlie') {
        const bytes = '{"t":"x"}\n'.repeat(name === 'alpha' ? 10 : 2);
        expect((await upload(d.id, bytes, d.uploadToken)).statusCode).toBe(202);
      }
    }
    await t.context.datasets.processor.idle();
    const list = async (query: string) => {
      const res = await json('GET', `/v2/training/datasets?${query}`, undefined, fresh.key);
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    };
    const all = await list('');
    expect(all.datasets.map((d: { name: string }) => d.name)).toEqual(['bravo', 'charlie', 'alpha', 'delta']);
    expect(all.pagination).toEqual({ total: 4, limit: 50, offset: 0, hasMore: false });
    expect((await list('sort=name&order=asc')).datasets.map((d: { name: string }) => d.name)).toEqual(
      names.slice().sort(),
    );
    expect(
      (await list('sort=size&order=desc')).datasets.map((d: { name: string }) => d.name).slice(0, 2),
    ).toEqual(['alpha', 'charlie']);
    expect((await list('type=structured')).datasets.map((d: { name: string }) => d.name).sort()).toEqual([
      'alpha',
      'bravo',
    ]);
    const ready = await list('status=ready');
    expect(ready.datasets.map((d: { name: string }) => d.name).sort()).toEqual(['alpha', 'charlie']);
    expect(ready.datasets[0].size.examples).toBeGreaterThan(0);
    const page = await list('sort=created_at&order=asc&limit=2&offset=1');
    expect(page.datasets.map((d: { id: string }) => d.id)).toEqual([ids[1], ids[2]]);
    expect(page.pagination).toEqual({ total: 4, limit: 2, offset: 1, hasMore: true });
    for (const query of ['limit=0', 'limit=101', 'sort=color', 'order=up', 'status=done', 'offset=-1']) {
      const res = await json('GET', `/v2/training/datasets?${query}`, undefined, fresh.key);
      expect(res.statusCode, query).toBe(400);
      expect(res.json().error).toBe('VALIDATION_ERROR');
    }
  });

  it('patches name, description, tags and metadata', async () => {
    const dataset = await create({ name: 'old', type: 'text', format: 'jsonl', metadata: { a: 1 } });
    clock.advance(5000);
    const res = await json('PATCH', `/v2/training/datasets/${dataset.id}`, {
      name: 'new',
      description: 'described',
      tags: ['x', 'y'],
      metadata: { source: 'crawl', rows: 3 },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({
      name: 'new',
      description: 'described',
      tags: ['x', 'y'],
      metadata: { source: 'crawl', rows: 3 },
      updatedAt: clock.now().toISOString(),
    });
    expect(
      (await json('PATCH', `/v2/training/datasets/${dataset.id}`, { description: null })).json().description,
    ).toBeNull();
    for (const body of [{}, { status: 'ready' }, { name: '' }, { tags: 'x' }]) {
      const bad = await json('PATCH', `/v2/training/datasets/${dataset.id}`, body);
      expect(bad.statusCode, JSON.stringify(body)).toBe(400);
    }
    expect((await json('GET', `/v2/training/datasets/${dataset.id}`)).json().name).toBe('new');
  });

  it('deletes the rows and the stored files', async () => {
    const dataset = await create({ name: 'gone', type: 'text', format: 'jsonl' });
    await upload(dataset.id, '{"a":1}\n', dataset.uploadToken);
    await t.context.datasets.processor.idle();
    const dir = t.context.datasets.storage.datasetDir(dataset.id);
    expect((await readdir(dir)).length).toBe(1);
    const res = await json('DELETE', `/v2/training/datasets/${dataset.id}`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ id: dataset.id, deleted: true });
    await expect(readdir(dir)).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await t.context.db.prisma.datasetVersion.count({ where: { datasetId: dataset.id } })).toBe(0);
    expect((await json('GET', `/v2/training/datasets/${dataset.id}`)).statusCode).toBe(404);
    expect((await json('DELETE', `/v2/training/datasets/${dataset.id}`)).statusCode).toBe(404);
  });
});
