import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { proxyViewPart } from '../../proxy/service.ts';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { clusterRow } from '../../testing/cluster-row.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

describe('proxy configuration API', () => {
  let t: TestApp;
  let stranger: TestMember;
  let viewer: TestMember;
  const clusterId = newId('cluster');

  beforeAll(async () => {
    t = await createTestApp();
    stranger = await addAccount(t);
    viewer = await addMember(t, { role: 'viewer' });
    await t.context.db.prisma.cluster.create({
      data: clusterRow({
        id: clusterId,
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'api',
        status: 'stopped',
        ports: [
          { internal_port: 8888, protocol: 'tcp', description: 'jupyter' },
          { internal_port: 6006, protocol: 'tcp', description: 'tensorboard' },
        ],
      }),
    });
  }, 300_000);
  afterAll(async () => t?.close(), 120_000);

  it('shows the seeded configuration in the wrapped envelope, with nulls for what is not measured', async () => {
    const res = await call(t, { url: `/v1/clusters/${clusterId}/proxy` });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ success: true, meta: { total_port_mappings: 2, active_port_mappings: 0 } });
    expect(body.data.proxy_url).toMatch(/^https:\/\/cluster-[a-z0-9]+-6006\.proxy\.localhost:8443$/);
    // The proxy does not run in this process: no certificate to report.
    expect(body.data.ssl_certificate).toBeNull();
    expect(body.data.access_logs).toBeUndefined();
    expect(body.data.port_mappings.map((m: { external_port: number }) => m.external_port).sort()).toEqual([
      30000, 30001,
    ]);
    expect(body.data.port_mappings[0]).toMatchObject({
      status: 'inactive',
      health_status: null,
      usage_statistics: {
        total_requests: 0,
        unique_visitors: 0,
        last_accessed: null,
        avg_response_time_ms: null,
      },
    });
    expect(body.data.network_configuration).toEqual({
      load_balancer: { enabled: false, algorithm: null, health_check_enabled: false },
      ssl_termination: true,
      websocket_support: true,
      compression: { enabled: false, algorithms: [] },
    });
    const lean = await call(t, {
      url: `/v1/clusters/${clusterId}/proxy?include_health=false&include_ssl_info=false`,
    });
    expect(lean.json().data.port_mappings[0].health_status).toBeUndefined();
    expect(lean.json().data.ssl_certificate).toBeUndefined();
    // Contract 3.
    const cluster = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: clusterId } });
    expect(await proxyViewPart(t.context.proxy)(cluster)).toMatchObject({
      port_mappings: [
        { internal_port: 6006, external_port: expect.any(Number), protocol: 'tcp' },
        { internal_port: 8888, external_port: expect.any(Number), protocol: 'tcp' },
      ],
    });
  });

  it('validates port mappings, auto-assigns external ports and refuses conflicts', async () => {
    const url = `/v1/clusters/${clusterId}/proxy/ports`;
    expect(
      (await call(t, { method: 'POST', url, payload: { internal_port: 0, description: 'x' } })).statusCode,
    ).toBe(400);
    expect(
      (await call(t, { method: 'POST', url, payload: { internal_port: 70000, description: 'x' } }))
        .statusCode,
    ).toBe(400);
    expect((await call(t, { method: 'POST', url, payload: { internal_port: 80 } })).statusCode).toBe(400);
    const created = await call(t, {
      method: 'POST',
      url,
      payload: {
        internal_port: 80,
        description: 'web',
        health_check: { path: '/healthz', interval_seconds: 10 },
      },
    });
    expect(created.statusCode).toBe(201);
    expect(created.json().data).toMatchObject({
      id: expect.stringMatching(/^port_/),
      external_port: 30002,
      protocol: 'tcp',
      health_check: {
        enabled: true,
        path: '/healthz',
        interval_seconds: 10,
        timeout_seconds: 5,
        expected_status: 200,
        retries: 3,
      },
      ssl_redirect: true,
    });
    const conflict = await call(t, {
      method: 'POST',
      url,
      payload: { internal_port: 80, description: 'again' },
    });
    expect(conflict.statusCode).toBe(409);
    expect(conflict.json()).toMatchObject({ success: false, error: { code: 'PORT_CONFLICT' } });
    const bad = await call(t, {
      method: 'POST',
      url,
      payload: { internal_port: 81, description: 'x', access_control: { ip_whitelist: ['300.1.1.1'] } },
    });
    expect(bad.statusCode).toBe(400);
    const missing = await call(t, { method: 'DELETE', url: `${url}/port_nope` });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('PORT_MAPPING_NOT_FOUND');
  });

  it('updates access settings and the short form on /v1 and /v2', async () => {
    const access = await call(t, {
      method: 'PUT',
      url: `/v1/clusters/${clusterId}/proxy/access`,
      payload: {
        default_authentication: true,
        session_timeout_minutes: 60,
        max_concurrent_sessions: 3,
        ip_whitelist: ['10.0.0.0/8', '::1/128'],
        rate_limiting: { global_limit: { requests_per_minute: 600, burst_size: 100 } },
        security_headers: { x_frame_options: 'DENY' },
      },
    });
    expect(access.statusCode).toBe(200);
    expect(access.json().data.access_control).toMatchObject({
      max_concurrent_sessions: 3,
      rate_limiting: { global_limit: { requests_per_minute: 600, burst_size: 100 }, per_user_limit: null },
      security_headers: { hsts_enabled: true, x_frame_options: 'DENY', content_security_policy: null },
    });
    const v2 = await call(t, {
      method: 'PUT',
      url: `/v2/clusters/${clusterId}/proxy`,
      payload: { enabled: false, allowedIps: [] },
    });
    expect(v2.statusCode).toBe(200);
    expect(v2.json()).toEqual({ proxyUrl: expect.stringContaining('https://'), enabled: false });
    const after = await call(t, { url: `/v1/clusters/${clusterId}/proxy` });
    expect(after.json().data).toMatchObject({
      proxy_status: 'disabled',
      access_control: { ip_whitelist: [] },
    });
  });

  it("hides other accounts' clusters (404) and keeps viewers to reading (403)", async () => {
    const foreign = await call(t, { url: `/v1/clusters/${clusterId}/proxy`, key: stranger });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json().error.code).toBe('CLUSTER_NOT_FOUND');
    expect((await call(t, { url: `/v1/clusters/${clusterId}/proxy`, key: viewer })).statusCode).toBe(200);
    const write = await call(t, {
      method: 'PUT',
      url: `/v1/clusters/${clusterId}/proxy`,
      key: viewer,
      payload: { enabled: true },
    });
    expect(write.statusCode).toBe(403);
  });
});
