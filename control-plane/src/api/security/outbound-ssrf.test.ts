import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';

/**
 * SSRF through every surface that makes the control plane send a request for a user: a listener this
 * test starts on loopback must not be reachable through IPv6 spellings of loopback (Node writes
 * `[::ffff:127.0.0.1]` as `[::ffff:7f00:1]`), whether the surface checks the URL when it is given or
 * when it delivers. No traffic leaves loopback: the refused ranges themselves are covered by the
 * classification table in util/outbound-guard.test.ts.
 */
describe('outbound requests cannot reach loopback through IPv6 spellings', () => {
  let t: TestApp;
  let server: Server;
  let connections = 0;
  let dataDir: string;
  let urls: string[];

  beforeAll(async () => {
    server = createServer((_req, res) => res.end('{"text":"internal secret"}\n'));
    server.on('connection', () => {
      connections += 1;
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    urls = [
      `http://[::ffff:127.0.0.1]:${port}/data.jsonl`,
      `http://[::ffff:7f00:1]:${port}/data.jsonl`,
      `http://[::127.0.0.1]:${port}/data.jsonl`,
      `http://[64:ff9b::7f00:1]:${port}/data.jsonl`,
    ];
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-ssrf-'));
    t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir, ANVIL_OUTBOUND_ALLOW_PRIVATE: 'false' } });
    await insertSimulatedHosts(t.context.db, { prefix: 'ssrf', count: 1, gpusPerHost: 2 });
    await t.context.clusters.prices.set({ H100: 2 });
  });
  afterAll(async () => {
    await t?.close();
    await new Promise((resolve) => server.close(resolve));
    await rm(dataDir, { recursive: true, force: true });
  });

  it('dataset dataUrl: refused with 400 and nothing stored', async () => {
    for (const dataUrl of urls) {
      const res = await call(t, {
        method: 'POST',
        url: '/v2/training/datasets',
        payload: { name: 'ssrf', format: 'json', dataUrl },
      });
      expect(res.statusCode, `${dataUrl}: ${res.body}`).toBe(400);
      expect(res.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'dataUrl' } });
    }
    await t.context.datasets.processor.idle();
    expect(await t.context.db.prisma.dataset.count()).toBe(0);
    expect(connections).toBe(0);
  });

  it('notification test: the receiver is never contacted and none of its answer is shown', async () => {
    for (const url of urls) {
      const res = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'slack', webhook_url: url },
      });
      // A delivery that fails is the spec's 502 NOTIFICATION_FAILED; here it never got an HTTP status.
      expect(res.statusCode, `${url}: ${res.body}`).toBe(502);
      expect(res.json()).toMatchObject({ error: 'NOTIFICATION_FAILED', details: { statusCode: null } });
      expect(res.body).not.toContain('internal secret');
    }
    expect(connections).toBe(0);
  });

  it('job webhook: refused with 400 when the job is submitted', async () => {
    const endpoint = await call(t, {
      method: 'POST',
      url: '/v2/endpoints',
      payload: { name: 'ssrf', image: 'anvil-test/busybox:latest', gpuType: 'H100' },
    });
    expect(endpoint.statusCode, endpoint.body).toBe(201);
    for (const webhook of urls) {
      const res = await call(t, {
        method: 'POST',
        url: `/v2/${endpoint.json().id}/run`,
        payload: { input: 1, webhook },
      });
      expect(res.statusCode, `${webhook}: ${res.body}`).toBe(400);
      expect(res.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'webhook' } });
    }
    expect(await t.context.db.prisma.endpointJob.count()).toBe(0);
    expect(connections).toBe(0);
  });
});
