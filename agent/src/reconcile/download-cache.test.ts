import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WorkloadDownload } from '@anvil/shared/protocol';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Clock } from '../clock.ts';
import { createLogger } from '../logger.ts';
import { DownloadCache, downloadPath } from './download-cache.ts';
import { controlPlaneDownloads } from './download-request.ts';

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe('download cache', () => {
  let root: string;
  let server: Server;
  let url: string;
  /** What the fake control plane serves per path, and the credentials it saw. */
  let served: Map<string, Buffer>;
  let seen: string[];
  let now: number;
  const clock: Clock = { now: () => now, setTimeout: () => null, clearTimeout: () => {} };

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'anvil-downloads-'));
    served = new Map();
    seen = [];
    now = 1_000;
    server = createServer((request, response) => {
      seen.push(`${request.headers['x-anvil-host-id']} ${request.headers.authorization}`);
      const body = served.get(request.url ?? '');
      if (!body) return response.writeHead(404).end();
      response.writeHead(200, { 'content-length': body.length }).end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterEach(async () => {
    await new Promise((resolve) => server.close(resolve));
    await rm(root, { recursive: true, force: true });
  });

  function cache(): { cache: DownloadCache; settled: () => Promise<void> } {
    let wake: () => void = () => {};
    const cache = new DownloadCache(root, {
      request: controlPlaneDownloads(url, () => ({ hostId: 'host_a', credential: 'secret' })),
      clock,
      logger: createLogger('silent'),
      retryMs: 30_000,
      onSettled: () => wake(),
    });
    return { cache, settled: () => new Promise<void>((resolve) => (wake = resolve)) };
  }

  const download = (path: string, bytes: Buffer, announced = bytes): WorkloadDownload => ({
    path,
    sha256: sha256(announced),
    sizeBytes: announced.length,
    containerPath: '/anvil/dataset/data.jsonl',
  });

  it('fetches once with the host credential, keeps the file read-only under its digest, and reports it ready', async () => {
    const bytes = randomBytes(300_000);
    served.set('/agent/v1/downloads/datasets/ds_1/versions/dsv_1', bytes);
    const wanted = download('/agent/v1/downloads/datasets/ds_1/versions/dsv_1', bytes);
    const { cache: c, settled } = cache();
    expect(await c.pending([wanted])).toEqual({ kind: 'fetching' });
    const done = settled();
    c.start([wanted], 'job_1-r0');
    c.start([wanted], 'job_2-r0');
    await done;
    expect(await c.pending([wanted])).toBeNull();
    const file = downloadPath(root, wanted.sha256);
    expect(await readFile(file)).toEqual(bytes);
    expect((await stat(file)).mode & 0o777).toBe(0o444);
    expect(seen).toEqual(['host_a Bearer secret']);
  });

  it('refuses bytes that do not match the digest or the size, keeping nothing, and retries only after retryMs', async () => {
    const bytes = randomBytes(10_000);
    served.set('/agent/v1/downloads/a', bytes);
    served.set('/agent/v1/downloads/b', Buffer.concat([bytes, bytes]));
    const cases = [
      download('/agent/v1/downloads/a', bytes, randomBytes(10_000)),
      download('/agent/v1/downloads/b', bytes, bytes),
      download('/agent/v1/downloads/missing', bytes, randomBytes(5)),
    ];
    const { cache: c, settled } = cache();
    for (const wanted of cases) {
      const done = settled();
      c.start([wanted], 'job_1-r0');
      await done;
      const state = await c.pending([wanted]);
      expect(state).toMatchObject({ kind: 'failed', retryAt: 31_000 });
    }
    expect(await c.pending([cases[0]!])).toMatchObject({ error: expect.stringContaining('SHA-256') });
    expect(await c.pending([cases[1]!])).toMatchObject({ error: expect.stringContaining('announced') });
    expect(await c.pending([cases[2]!])).toMatchObject({ error: expect.stringContaining('HTTP 404') });
    expect(await readdir(root)).toEqual([]);
    now = 31_000;
    expect(await c.pending([cases[0]!])).toEqual({ kind: 'fetching' });
  });

  it('prunes files no desired workload names', async () => {
    const one = randomBytes(1000);
    const two = randomBytes(1000);
    served.set('/agent/v1/downloads/1', one);
    served.set('/agent/v1/downloads/2', two);
    const first = download('/agent/v1/downloads/1', one);
    const second = download('/agent/v1/downloads/2', two);
    const { cache: c, settled } = cache();
    for (const wanted of [first, second]) {
      const done = settled();
      c.start([wanted], 'w');
      await done;
    }
    await c.prune(new Set([second.sha256]));
    expect(await readdir(root)).toEqual([second.sha256]);
    expect(await c.pending([first])).toEqual({ kind: 'fetching' });
    expect(await c.pending([second])).toBeNull();
  });
});
