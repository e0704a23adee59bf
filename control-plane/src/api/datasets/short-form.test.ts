import { createHash } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../testing/index.ts';
import { isPrivateAddress } from '../../util/outbound-guard.ts';

const sha256 = (bytes: string) => createHash('sha256').update(bytes).digest('hex');
const BODY = '{"text":"one"}\n{"text":"two"}\n{"text":"three"}\n';

describe('short creation form (dataUrl)', () => {
  let server: Server;
  let origin: string;
  let dataDir: string;
  let requests: string[];

  beforeAll(async () => {
    requests = [];
    server = createServer((req, res) => {
      requests.push(req.url ?? '');
      if (req.url === '/data.jsonl') {
        res.writeHead(200, { 'content-type': 'application/jsonl' });
        res.end(BODY);
      } else if (req.url === '/moved') {
        res.writeHead(302, { location: '/data.jsonl' });
        res.end();
      } else if (req.url === '/to-file') {
        res.writeHead(302, { location: 'file:///etc/passwd' });
        res.end();
      } else {
        res.writeHead(404);
        res.end('no');
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-dataset-url-'));
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    await rm(dataDir, { recursive: true, force: true });
  });

  async function withApp(allowPrivate: boolean, run: (t: TestApp) => Promise<void>) {
    const t = await createTestApp({
      env: { ANVIL_DATA_DIR: dataDir, ANVIL_OUTBOUND_ALLOW_PRIVATE: String(allowPrivate) },
    });
    try {
      await run(t);
    } finally {
      await t.close();
    }
  }

  const create = (t: TestApp, dataUrl: string) =>
    t.app.inject({
      method: 'POST',
      url: '/v2/training/datasets',
      headers: t.auth(),
      payload: {
        name: 'from url',
        description: 'downloaded',
        format: 'json',
        dataUrl,
        splitRatio: { train: 0.8, validation: 0.1, test: 0.1 },
      },
    });

  const settled = async (t: TestApp, id: string) => {
    await t.context.datasets.processor.idle();
    return (await t.app.inject({ url: `/v2/training/datasets/${id}`, headers: t.auth() })).json();
  };

  it('downloads the URL (following a redirect), stores it as a version and processes it', async () => {
    await withApp(true, async (t) => {
      const res = await create(t, `${origin}/moved`);
      expect(res.statusCode, res.body).toBe(201);
      const body = res.json();
      expect(body).toMatchObject({
        datasetId: body.id,
        name: 'from url',
        status: 'uploading',
        format: 'jsonl',
      });
      expect(body.uploadToken).toBeUndefined();
      const ready = await settled(t, body.id);
      expect(ready).toMatchObject({
        status: 'ready',
        type: 'text',
        checksum: sha256(BODY),
        size: { bytes: BODY.length, examples: 3 },
        sourceUrl: `${origin}/moved`,
        splitRatio: { train: 0.8, validation: 0.1, test: 0.1 },
        versions: [{ source: 'url', checksum: sha256(BODY) }],
      });
      expect(requests).toEqual(expect.arrayContaining(['/moved', '/data.jsonl']));

      const missing = await settled(t, (await create(t, `${origin}/absent`)).json().id);
      expect(missing.status).toBe('error');
      expect(missing.error).toMatchObject({
        code: 'FETCH_FAILED',
        details: { reason: expect.stringContaining('404') },
      });
      const toFile = await settled(t, (await create(t, `${origin}/to-file`)).json().id);
      expect(toFile.error).toMatchObject({
        code: 'FETCH_FAILED',
        details: { reason: expect.stringContaining('redirect refused') },
      });
    });
  });

  it('refuses private targets unless the operator allows them', async () => {
    await withApp(false, async (t) => {
      const literal = await create(t, `${origin}/data.jsonl`);
      expect(literal.statusCode).toBe(400);
      expect(literal.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'dataUrl' } });
      expect(requests.filter((r) => r === '/data.jsonl')).toHaveLength(1);
    });
  });

  it('refuses at connection time a name that resolves to a private address', async (ctx) => {
    const name = hostname();
    const resolved = await lookup(name, { all: true }).catch(() => []);
    if (resolved.length === 0 || !resolved.every((a) => isPrivateAddress(a.address))) {
      process.stderr.write(`skipped: ${name} does not resolve to private addresses only here\n`);
      ctx.skip();
    }
    await withApp(false, async (t) => {
      const port = new URL(origin).port;
      const res = await create(t, `http://${name}:${port}/data.jsonl`);
      expect(res.statusCode).toBe(201);
      const failed = await settled(t, res.json().id);
      expect(failed.error).toMatchObject({
        code: 'FETCH_FAILED',
        details: { reason: expect.stringContaining('private address') },
      });
    });
  });
});
