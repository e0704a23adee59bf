import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMember, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { type Tenant, TenantWorld } from './tenant-world.ts';

/**
 * The HTTPS proxy's browser-facing isolation over real HTTPS on loopback (issue 15, points 2, 4, 8):
 * the `__Host-` session cookie, host-only upstream cookies, cross-site writes refused, CORS without
 * credentials for `*`, the level a port asks for, service keys refused, and the login's redirect.
 */
describe('HTTPS proxy: tenant isolation in browsers', () => {
  let world: TenantWorld;
  /** Authenticated port, default access (required_permission write). */
  let a: Tenant;
  /** Another tenant's authenticated port (the target of cross-site requests). */
  let b: Tenant;
  /** CORS: `*` only. */
  let star: Tenant;
  /** CORS: one origin listed by name. */
  let listed: Tenant;
  /** required_permission lowered to read. */
  let readable: Tenant;
  let cookieB: string;
  let viewer: TestMember;
  let serviceKey: string;

  beforeAll(async () => {
    world = await TenantWorld.start();
    a = await world.tenant('tenant-a');
    b = await world.tenant('tenant-b');
    star = await world.tenant('cors-star', { cors: { enabled: true, allowed_origins: ['*'] } });
    listed = await world.tenant('cors-listed', {
      cors: { enabled: true, allowed_origins: ['https://app.example.com'] },
    });
    readable = await world.tenant('readable', { required_permission: 'read' });
    cookieB = await world.sessionCookie(b);
    viewer = await addMember(world.t, { role: 'viewer' });
    const owner = await world.t.context.keys.resolve(`Bearer ${world.t.ownerKey}`);
    serviceKey = (
      await world.t.context.apiKeys.create(owner, {
        name: 'service',
        type: 'service',
        permissions: ['read', 'write'],
      })
    ).value;
  });

  afterAll(async () => {
    await world?.close();
  });

  it('sets a host-only __Host- session cookie (Secure, Path=/, no Domain) and keeps it from the container', async () => {
    const link = await world.loginPath(b);
    const login = await world.request(b, 'GET', link.path);
    expect(login.status).toBe(302);
    const setCookie = String(login.headers['set-cookie']);
    expect(setCookie).toMatch(/^__Host-anvil_proxy_session=[A-Za-z0-9_-]+; /);
    expect(setCookie).toContain('; Path=/;');
    expect(setCookie).toContain('; Secure');
    expect(setCookie).toContain('; HttpOnly');
    expect(setCookie).not.toMatch(/domain=/i);
    const session = /^([^;]+)/.exec(setCookie)![1]!;
    const echo = await world.request(b, 'GET', '/echo', {
      cookie: `x=1; ${session}; anvil_proxy_session=old; y=2`,
    });
    expect(echo.status).toBe(200);
    expect(JSON.parse(echo.body).cookie).toBe('x=1; y=2');
    // The pre-`__Host-` name is no sign-in.
    const legacy = session.replace('__Host-', '');
    expect((await world.request(b, 'GET', '/echo', { cookie: legacy })).status).toBe(401);
  });

  it("strips Domain from the container's Set-Cookie and drops cookies named like the proxy's", async () => {
    const planted = await world.request(a, 'GET', '/plant', { authorization: `Bearer ${world.t.ownerKey}` });
    expect(planted.status).toBe(200);
    expect(planted.headers['set-cookie']).toEqual([
      'planted=from-a; Path=/; Secure; SameSite=Lax',
      'also=from-a; path=/; Secure',
      'own=kept; Path=/; Secure',
    ]);
  });

  // Cookie-authenticated requests to tenant B from elsewhere: [what, status, method, headers].
  const crossSite: [string, number, string, Record<string, string>][] = [
    ['POST from a sibling tenant (Sec-Fetch-Site same-site)', 403, 'POST', { 'sec-fetch-site': 'same-site' }],
    ['POST from another site', 403, 'POST', { 'sec-fetch-site': 'cross-site' }],
    ['DELETE from another site', 403, 'DELETE', { 'sec-fetch-site': 'cross-site' }],
    ['PUT with a foreign Origin', 403, 'PUT', { origin: 'https://evil.example' }],
    ['POST with Origin null (sandboxed frame)', 403, 'POST', { origin: 'null' }],
    ['POST from the same origin (Sec-Fetch-Site)', 200, 'POST', { 'sec-fetch-site': 'same-origin' }],
    ['POST typed in by the user (Sec-Fetch-Site none)', 200, 'POST', { 'sec-fetch-site': 'none' }],
    ['POST without browser headers (a script or curl)', 200, 'POST', {}],
    ['GET from a sibling tenant (a link)', 200, 'GET', { 'sec-fetch-site': 'same-site' }],
    ['HEAD from another site', 200, 'HEAD', { 'sec-fetch-site': 'cross-site' }],
  ];
  it.each(crossSite)('%s → %d', async (_what, status, method, headers) => {
    const answer = await world.request(b, method, '/echo', { cookie: cookieB, ...headers }, '');
    expect(answer.status, answer.body).toBe(status);
    if (status === 403) {
      // The spec's flat error shape.
      expect(JSON.parse(answer.body)).toMatchObject({ error: 'FORBIDDEN', code: 403, details: {} });
      expect(JSON.parse(answer.body).message).toMatch(/session cookie/);
    }
  });

  it("accepts the port's own Origin and a listed origin, and a foreign Origin with a key (not ambient)", async () => {
    const own = await world.request(b, 'POST', '/echo', {
      cookie: cookieB,
      origin: b.origin,
      'sec-fetch-site': 'same-origin',
    });
    expect(own.status).toBe(200);
    const listedCookie = await world.sessionCookie(listed);
    const fromListed = await world.request(listed, 'POST', '/echo', {
      cookie: listedCookie,
      origin: 'https://app.example.com',
      'sec-fetch-site': 'cross-site',
    });
    expect(fromListed.status).toBe(200);
    const withKey = await world.request(b, 'POST', '/echo', {
      authorization: `Bearer ${world.t.ownerKey}`,
      origin: 'https://evil.example',
      'sec-fetch-site': 'cross-site',
    });
    expect(withKey.status).toBe(200);
  });

  it('refuses a cookie-authenticated WebSocket upgrade from a sibling origin', async () => {
    const upgrade = (origin: string) =>
      world.request(b, 'GET', '/socket', {
        cookie: cookieB,
        origin,
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-version': '13',
        'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
      });
    const before = b.app.seen.length;
    const refused = await upgrade(a.origin);
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body)).toMatchObject({ error: 'FORBIDDEN' });
    expect(b.app.seen.length).toBe(before);
  });

  // CORS answers: [what, tenant, origin, allow-origin, allow-credentials].
  it.each([
    ["'*' answers * without credentials", () => star, 'https://evil.example', '*', undefined],
    [
      'a listed origin is echoed with credentials',
      () => listed,
      'https://app.example.com',
      'https://app.example.com',
      'true',
    ],
    ['an unlisted origin gets nothing', () => listed, 'https://evil.example', undefined, undefined],
  ] as const)('CORS: %s', async (_what, tenant, origin, allowOrigin, allowCredentials) => {
    const answer = await world.request(tenant(), 'GET', '/echo', {
      authorization: `Bearer ${world.t.ownerKey}`,
      origin,
    });
    expect(answer.status).toBe(200);
    expect(answer.headers['access-control-allow-origin']).toBe(allowOrigin);
    expect(answer.headers['access-control-allow-credentials']).toBe(allowCredentials);
    const preflight = await world.request(tenant(), 'OPTIONS', '/echo', {
      origin,
      'access-control-request-method': 'POST',
    });
    expect(preflight.status).toBe(allowOrigin ? 204 : 403);
    expect(preflight.headers['access-control-allow-origin']).toBe(allowOrigin);
    expect(preflight.headers['access-control-allow-credentials']).toBe(allowCredentials);
  });

  it("keeps a signed-in answer's credentialed CORS to the proxy's grant, whatever the container says", async () => {
    const answer = await world.request(b, 'GET', '/reflect', { cookie: cookieB, origin: a.origin });
    expect(answer.status).toBe(200);
    expect(answer.headers['access-control-allow-credentials']).toBeUndefined();
  });

  // Who passes which port: [what, key, tenant, status].
  it.each([
    ['the owner (write) passes a default port', () => world.t.ownerKey, () => a, 200],
    ['a viewer (read) is refused a default port: it needs write, as SSH', () => viewer.key, () => a, 403],
    ['a viewer passes a port lowered to read', () => viewer.key, () => readable, 200],
    ['a service key is refused a default port', () => serviceKey, () => a, 403],
    ['a service key is refused a read port', () => serviceKey, () => readable, 403],
  ] as const)('permission: %s', async (_what, key, tenant, status) => {
    const answer = await world.request(tenant(), 'GET', '/echo', { authorization: `Bearer ${key()}` });
    expect(answer.status, answer.body).toBe(status);
  });

  it('gives login links and sessions the same level: a viewer gets none for a write port, and loses one when the port is raised', async () => {
    const refused = await world.loginPath(a, viewer.key);
    expect(refused.status).toBe(403);
    const service = await world.loginPath(readable, serviceKey);
    expect(service.status).toBe(403);

    const session = await world.sessionCookie(readable, viewer.key);
    expect((await world.request(readable, 'GET', '/echo', { cookie: session })).status).toBe(200);
    const raised = await world.t.app.inject({
      method: 'PUT',
      url: `/v1/clusters/${readable.clusterId}/proxy/ports/${readable.portId}`,
      headers: world.t.auth(),
      payload: { access_control: { required_permission: 'write' } },
    });
    expect(raised.statusCode).toBe(200);
    expect(raised.json().data.access_control.required_permission).toBe('write');
    // The route cache (2 s) and the session verdict cache (3 s) are per replica: wait them out by polling.
    const status = await waitFor(
      'the raised permission to apply',
      async () => {
        const answer = (await world.request(readable, 'GET', '/echo', { cookie: session })).status;
        return answer !== 200 && answer;
      },
      15_000,
      200,
    );
    expect(status).toBe(403);
  });

  it('shows required_permission (default write), and refuses other values with 400', async () => {
    const config = await world.t.app.inject({
      method: 'GET',
      url: `/v1/clusters/${a.clusterId}/proxy`,
      headers: world.t.auth(),
    });
    expect(config.json().data.port_mappings[0].access_control.required_permission).toBe('write');
    const bad = await world.t.app.inject({
      method: 'PUT',
      url: `/v1/clusters/${a.clusterId}/proxy/ports/${a.portId}`,
      headers: world.t.auth(),
      payload: { access_control: { required_permission: 'admin' } },
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe('VALIDATION_ERROR');
  });

  // The login's `next` as it arrives in the link's query: [next, Location].
  it.each([
    ['/lab/tree?x=1', '/lab/tree?x=1'],
    ['/\\evil.com', '/'],
    ['//evil.com', '/'],
    ['https://evil.com', '/'],
    ['/\t/evil.com', '/'],
    ['/\n/evil.com', '/'],
    ['\\/evil.com', '/'],
    ['%2F%2Fevil.com', '/'],
    ['/%5Cevil.com', '/%5Cevil.com'],
    ['javascript:alert(1)', '/'],
  ])('login next=%j redirects to %j', async (next, location) => {
    const link = await world.loginPath(b);
    const path = `${link.path}&next=${encodeURIComponent(next)}`;
    const login = await world.request(b, 'GET', path);
    expect(login.status).toBe(302);
    expect(login.headers.location).toBe(location);
    // What the browser makes of it: always this port's own origin.
    expect(new URL(location, b.origin).origin).toBe(b.origin);
  });

  it.each(['/\\evil.com', '//evil.com', 'https://evil.com', '/\t/evil.com'])(
    'refuses a login link with next=%j (400)',
    async (next) => {
      const link = await world.loginPath(b, world.t.ownerKey, next);
      expect(link.status).toBe(400);
      expect(JSON.parse(link.body).error.code).toBe('VALIDATION_ERROR');
    },
  );
});
