import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type Static, Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { flatErrors, wrappedErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import {
  AccessBody,
  AccessView,
  ClusterParams,
  CreatePortBody,
  PortMapping,
  PortParams,
  ProxyConfig,
  ShortBody,
  ShortResponse,
  UpdatePortBody,
} from './proxy.schemas.ts';

const tags = ['proxy'];

const ENFORCEMENT =
  'Everything here is enforced by the HTTPS proxy itself (ANVIL_PROXY_PORT) on ' +
  'https://cluster-<id>-<port>.<ANVIL_PROXY_DOMAIN> (the cluster id with `-` for `_`, since wildcard ' +
  'certificates do not match `_`). Per request: unknown cluster or port 404; proxy disabled or cluster ' +
  'not running 503; blocked_ips / ip_whitelist (cluster, then port; CIDR, IPv4 and IPv6) 403; CORS ' +
  'preflights answered by the proxy; authentication unless public_access (or authentication_required ' +
  'false, or default_authentication false): an Anvil key as `Authorization: Bearer anv_…` (not a service ' +
  "key) holding the port's access_control.required_permission on the cluster (default write, as SSH; " +
  'read when the owner lowers it), or the session cookie from a login link, whose member must hold the ' +
  'same; neither reaches the container; with the cookie, a state-changing request (not GET/HEAD/OPTIONS) ' +
  "or WebSocket whose Origin is neither the port's own nor listed in cors.allowed_origins, or whose " +
  'Sec-Fetch-Site is cross-site or same-site (sibling cluster hosts are one site to a browser), is 403; ' +
  "the container's Set-Cookie loses any Domain attribute (cookies stay on the port's host); CORS " +
  'echoes an origin with credentials only when listed by name (`*` answers `*` without credentials); ' +
  'allowed_users / ' +
  'allowed_roles 403; global_limit (per cluster), per_user_limit (per user or client address) and the ' +
  "port's rate_limit (per user and port) → 429 with Retry-After; then HSTS, CSP and X-Frame-Options are " +
  'added to responses. Rate limits hold across control-plane replicas: each limit is counted in a fixed ' +
  'window of burst_size ÷ requests_per_minute minutes (at least 1 s, then requests_per_minute ÷ 60 per ' +
  'second) aligned to the clock, admitting burst_size per window (so up to twice that across a window ' +
  'boundary), in counters every replica shares through the database. Each replica counts locally and ' +
  'syncs every second, and holds at most A = max(1, ⌊limit ÷ 100⌋) admissions the database has not ' +
  'confirmed, so with N replicas at most N×A − 1 requests above a limit are admitted per window (one ' +
  'replica: exact); a refused request counts against no limit; while the database is unreachable each ' +
  'replica counts on its own. max_concurrent_sessions is checked and the session stored under a lock ' +
  "of the cluster's proxy settings row, so it is exact across replicas. Cached routes (2 s) and cached " +
  'key checks (5 s) are per replica.';

export const proxyRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const proxy = context.proxy;
  app.addSchema(PortMapping);
  app.addSchema(AccessView);
  const config = { scope: 'clusters' as const };

  app.get(
    '/v1/clusters/:cluster_id/proxy',
    {
      config,
      schema: {
        tags,
        summary: "A cluster's proxy configuration",
        description:
          `${ENFORCEMENT} include_health (default true) adds health_status and health_check to each ` +
          'mapping; include_ssl_info (default true) adds ssl_certificate, read from the certificate the ' +
          'proxy serves (null when this process does not run the proxy); include_access_logs (default ' +
          'false) adds the last 100 requests of this cluster (forwarded or refused, through the proxy of ' +
          'any replica), newest first. Every replica buffers its access log entries (the newest 100 per ' +
          'cluster) and usage counts in memory and writes them to the database in batches every second, ' +
          'before answering this request and at shutdown, so entries and counts of other replicas appear ' +
          'within about a second; what a failed write could not store is retried, up to 50,000 buffered ' +
          'entries (beyond that new entries are dropped). Retention: the newest 100 entries per cluster, ' +
          'none older than 7 days. usage_statistics (total_requests, unique_visitors, last_accessed, ' +
          'avg_response_time_ms) count forwarded requests of every replica the same way. Mappings are ' +
          'seeded from the ports the cluster was created with. meta.last_updated is the latest change of settings or mappings.',
        params: ClusterParams,
        querystring: Type.Object(
          {
            include_health: Type.Boolean({ default: true }),
            include_access_logs: Type.Boolean({ default: false }),
            include_ssl_info: Type.Boolean({ default: true }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Envelope(ProxyConfig, {
            last_updated: Type.String({ format: 'date-time' }),
            total_port_mappings: Type.Integer(),
            active_port_mappings: Type.Integer(),
            proxy_version: Type.String(),
          }),
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const { data, meta } = await proxy.getConfig(actorOf(request), request.params.cluster_id, {
        health: request.query.include_health,
        accessLogs: request.query.include_access_logs,
        ssl: request.query.include_ssl_info,
      });
      return ok(request, data as unknown as Static<typeof ProxyConfig>, meta);
    },
  );

  const shortDescription =
    'Short form. enabled=false makes the proxy answer 503 PROXY_DISABLED for every port of the cluster; ' +
    "allowedIps replaces the cluster's ip_whitelist (addresses or CIDRs; empty: every address). " +
    'proxyUrl is the URL of the first tcp mapping (null without one).';
  // The same short form under both versions; only the error shape differs.
  for (const [version, errors] of [
    ['v1', wrappedErrors],
    ['v2', flatErrors],
  ] as const) {
    app.put(
      `/${version}/clusters/:cluster_id/proxy`,
      {
        config,
        schema: {
          tags,
          summary: 'Enable or disable the proxy; set the allowed addresses',
          description: shortDescription,
          params: ClusterParams,
          body: ShortBody,
          response: { 200: ShortResponse, ...errors(400, 401, 403, 404, 429) },
        },
      },
      async (request) => proxy.updateShort(actorOf(request), request.params.cluster_id, request.body),
    );
  }

  app.post(
    '/v1/clusters/:cluster_id/proxy/ports',
    {
      config,
      schema: {
        tags,
        summary: 'Map a container port',
        description:
          'Answers 201 with the created mapping. external_port, when omitted, is the lowest port of ' +
          '30000-32767 not used by another mapping of the cluster. An internal or external port already ' +
          'mapped in the cluster is 409 PORT_CONFLICT (details field, existing_port_id). A health_check ' +
          'sent is enabled unless it says enabled:false; it runs every interval_seconds through the ' +
          'tunnel (GET path, expected_status within timeout_seconds). custom_domain is recorded, not routed.',
        params: ClusterParams,
        body: CreatePortBody,
        response: {
          201: Envelope(Type.Ref('ProxyPortMapping')),
          ...wrappedErrors(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const mapping = await proxy.createPort(actorOf(request), request.params.cluster_id, request.body);
      return reply.code(201).send(ok(request, mapping));
    },
  );

  app.put(
    '/v1/clusters/:cluster_id/proxy/ports/:port_id',
    {
      config,
      schema: {
        tags,
        summary: 'Change a port mapping',
        description:
          'Answers the whole updated mapping. health_check and access_control are merged into the current ' +
          'values; a changed health_check resets health_status and consecutive_failures. Unknown id: 404 ' +
          'PORT_MAPPING_NOT_FOUND.',
        params: PortParams,
        body: UpdatePortBody,
        response: {
          200: Envelope(Type.Ref('ProxyPortMapping')),
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) =>
      ok(
        request,
        await proxy.updatePort(
          actorOf(request),
          request.params.cluster_id,
          request.params.port_id,
          request.body,
        ),
      ),
  );

  app.delete(
    '/v1/clusters/:cluster_id/proxy/ports/:port_id',
    {
      config,
      schema: {
        tags,
        summary: 'Remove a port mapping',
        description:
          'The port stops being reachable through the proxy at once (pooled tunnels are closed). Unknown ' +
          'id: 404 PORT_MAPPING_NOT_FOUND.',
        params: PortParams,
        response: {
          200: Envelope(
            Type.Object({
              id: Type.String(),
              internal_port: Type.Integer(),
              external_port: Type.Integer(),
              deleted: Type.Literal(true),
              deleted_at: Type.String({ format: 'date-time' }),
            }),
          ),
          ...wrappedErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) =>
      ok(
        request,
        await proxy.deletePort(actorOf(request), request.params.cluster_id, request.params.port_id),
      ),
  );

  app.put(
    '/v1/clusters/:cluster_id/proxy/access',
    {
      config,
      schema: {
        tags,
        summary: "Change the cluster's proxy access control",
        description:
          `${ENFORCEMENT} Fields not sent keep their value; null clears a limit. blocked_ips is accepted ` +
          'here as well. session_timeout_minutes is the lifetime of a login-link session (default 480); ' +
          'max_concurrent_sessions caps live sessions of the cluster (a login beyond it is 429). Answers ' +
          'the whole access_control and security_headers.',
        params: ClusterParams,
        body: AccessBody,
        response: {
          200: Envelope(
            Type.Object({
              cluster_id: Type.String(),
              access_control: Type.Ref('ProxyAccessControl'),
              security_headers: Type.Object({
                hsts_enabled: Type.Boolean(),
                content_security_policy: Type.Union([Type.String(), Type.Null()]),
                x_frame_options: Type.Union([Type.String(), Type.Null()]),
              }),
              updated_at: Type.String({ format: 'date-time' }),
            }),
          ),
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) =>
      ok(request, await proxy.updateAccess(actorOf(request), request.params.cluster_id, request.body)),
  );

  app.post(
    '/v1/clusters/:cluster_id/proxy/ports/:port_id/login-link',
    {
      config,
      schema: {
        tags,
        summary: 'A one-time browser login link for a port',
        description:
          'Not in the spec. Opening the URL (within 60 s, once) makes the proxy set a host-only, HttpOnly, ' +
          'Secure session cookie for that port and redirect to `next` (a path, default /). The session ' +
          "lasts the port's session_timeout_minutes, else the cluster's. Needs the port's " +
          'access_control.required_permission on the cluster (default write; and, being a POST, a key with ' +
          'the write permission); service keys are refused. The cookie is `__Host-` prefixed (host-only, ' +
          'Secure, Path=/): it reaches no other port or cluster.',
        params: PortParams,
        body: Type.Object(
          {
            next: Type.Optional(
              Type.String({
                // A path on the port's own origin: no `//host`, no backslash or control characters
                // (browsers read `/\host` and `/<tab>/host` as another host).
                pattern: '^/(?!/)[^\\\\\\u0000-\\u0020\\u007f]*$',
                maxLength: 2048,
                description: 'A path on the port itself (`/lab?x=1`); other hosts are refused',
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Envelope(
            Type.Object({ url: Type.String(), expires_at: Type.String({ format: 'date-time' }) }),
          ),
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const link = await proxy.loginLink(
        actorOf(request),
        request.params.cluster_id,
        request.params.port_id,
        request.body.next,
      );
      return reply.code(201).send(ok(request, link));
    },
  );

  app.get(
    '/proxy/ca.pem',
    {
      config: { public: true },
      schema: {
        tags,
        summary: "The proxy's development CA certificate",
        description:
          'PEM of the CA Anvil generated (in <ANVIL_DATA_DIR>/proxy-tls) to issue the proxy certificate ' +
          'when no ANVIL_PROXY_TLS_CERT is configured; install it as a trusted root to browse ' +
          'https://*.<ANVIL_PROXY_DOMAIN> without warnings. 404 with an operator certificate.',
        response: { 200: Type.String(), ...wrappedErrors(404) },
      },
    },
    async (_request, reply) => {
      const pem = proxy.caCertificate;
      if (!pem) {
        throw new ApiError(
          'NOT_FOUND',
          'no development CA: the proxy serves an operator certificate (or does not run in this process)',
        );
      }
      return reply.type('application/x-pem-file').send(pem);
    },
  );
};
