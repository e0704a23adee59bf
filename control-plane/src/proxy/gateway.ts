import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { LiveSessions } from '../access-revocation/live-sessions.ts';
import type { Clock } from '../auth/clock.ts';
import type { ProxyPortMapping } from '../db/generated/client.ts';
import { errorBody } from '../http/error-body.ts';
import type { ProxyAuthorization } from './authorization.ts';
import {
  clearedSessionCookie,
  corsGrant,
  crossSiteReason,
  hostOnlySetCookie,
  ownOrigin,
  readCookie,
  SESSION_COOKIE,
  sameOriginPath,
  sessionCookie,
  withoutProxyCookies,
} from './browser-policy.ts';
import type { ProxyLimit, ProxyRateLimits } from './rate-limiter.ts';
import { CLIENT_CLOSED, ResponseRelay } from './relay.ts';
import type { ProxySessions } from './sessions.ts';
import type { Route } from './store.ts';
import { PROXY_TLS_SERVER_OPTIONS, type ProxyTls } from './tls.ts';
import type { TrafficRecorder } from './traffic.ts';
import { type MappingAccess, rateLimitOf } from './types.ts';
import type { UpstreamPool } from './upstream.ts';

/**
 * What the gateway uses of the proxy around it (ProxyService builds it): routing, admission,
 * authorisation, the upstream tunnels and traffic accounting; nothing of the configuration API.
 */
export interface GatewayParts {
  /** ANVIL_PROXY_DOMAIN: hosts are `<cluster id>-<port>.<domain>`. */
  domain: string;
  clock: Clock;
  /** The compiled route of a cluster (settings, mappings, address rules), null when there is none. */
  routes: { route(clusterId: string): Promise<Route | null> };
  /**
   * The refusal when the cluster's account keeps an address allowlist without this client, else null.
   */
  accountAddressRefusal(accountId: string, req: IncomingMessage): Promise<string | null>;
  authorization: Pick<ProxyAuthorization, 'key' | 'cookie'>;
  /** Login tickets redeemed into cookie sessions, and sessions ended at logout. */
  logins: Pick<ProxySessions, 'redeem' | 'end'>;
  rateLimits: Pick<ProxyRateLimits, 'admit'>;
  upstreams: Pick<UpstreamPool, 'pool' | 'open'>;
  traffic: Pick<TrafficRecorder, 'log' | 'forwarded'>;
  /** WebSockets counted against the account's limit and ended on revocation. */
  liveSessions: Pick<LiveSessions, 'hold'>;
}

/** Paths the proxy answers itself on every mapping host (never forwarded). */
export const LOGIN_PATH = '/__anvil/login';
export const LOGOUT_PATH = '/__anvil/logout';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * `<cluster id>-<port>.<domain>`. The cluster id's underscore is written as a hyphen
 * (`cluster-abc…-8888`) because a wildcard certificate does not match labels containing `_`; the
 * literal form (`cluster_abc…-8888`) is accepted too.
 */
export function parseProxyHost(hostHeader: string | undefined, domain: string) {
  if (!hostHeader) return null;
  const host = hostHeader.toLowerCase().replace(/:\d+$/, '').replace(/\.$/, '');
  if (!host.endsWith(`.${domain}`)) return null;
  const label = host.slice(0, -domain.length - 1);
  const match = /^cluster[-_]([a-z0-9]+)-(\d{1,5})$/.exec(label);
  if (!match) return null;
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return null;
  return { clusterId: `cluster_${match[1]}`, port };
}

interface Caller {
  userId: string | null;
  role: string | null;
  /** Signed in with the browser's session cookie (ambient, so cross-site writes are refused). */
  byCookie: boolean;
  /** The API key the caller (or their cookie session) was authenticated with. */
  keyId: string | null;
  /** Rate-limit and unique-visitor identity: the user, else the client address. */
  visitor: string;
}

/** What of the client's credentials the container must not see. */
interface Credentials {
  /** The Authorization header carried an Anvil key. */
  anvilKey: boolean;
  /** The Cookie header without the proxy's session cookie ('' when nothing is left); null: unchanged. */
  cookie: string | null;
}

interface Admitted {
  route: Route;
  mapping: ProxyPortMapping;
  access: MappingAccess;
  caller: Caller;
  credentials: Credentials;
}

/** A refusal answered by the proxy itself: JSON `{error, message, details}` with the status. */
class Refusal {
  /** The authenticated user refused (over a rate limit), for the access log. */
  user: string | null = null;

  constructor(
    readonly status: number,
    readonly code: string,
    readonly message: string,
    readonly headers: Record<string, string> = {},
    readonly details: Record<string, unknown> = {},
  ) {}
}

/**
 * The HTTPS server in front of cluster ports. Per request: route (404 unknown cluster or port, 503
 * proxy disabled or cluster not running), addresses (403), CORS preflight, authentication (401/403),
 * rate limits (429), then forwarding over a pooled tunnel stream with security and CORS headers added.
 */
export class ProxyGateway {
  private server: Server | null = null;
  private readonly upgraded = new Set<Duplex>();
  private readonly targets = new Map<string, ReturnType<typeof parseProxyHost>>();

  constructor(
    private readonly proxy: GatewayParts,
    private readonly logger: Logger,
  ) {}

  /** parseProxyHost, remembered per Host header: a client sends the same one on every request. */
  private target(host: string | undefined): ReturnType<typeof parseProxyHost> {
    if (host === undefined) return null;
    let target = this.targets.get(host);
    if (target === undefined) {
      target = parseProxyHost(host, this.proxy.domain);
      if (this.targets.size >= 1_000) this.targets.clear();
      this.targets.set(host, target);
    }
    return target;
  }

  get port(): number | null {
    const address = this.server?.address() as AddressInfo | null | undefined;
    return address ? address.port : null;
  }

  async listen(tls: ProxyTls, port: number, host: string): Promise<void> {
    const server = createServer(
      { ...PROXY_TLS_SERVER_OPTIONS, cert: tls.cert, key: tls.key },
      (req, res) => void this.handle(req, res),
    );
    // No cap on how long a request or stream may last (uploads, SSE, notebooks); idle keep-alive ends.
    server.requestTimeout = 0;
    server.timeout = 0;
    server.keepAliveTimeout = 72_000;
    server.headersTimeout = 60_000;
    server.on(
      'upgrade',
      (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.upgrade(req, socket, head),
    );
    server.on('tlsClientError', () => {});
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
  }

  async close(graceMs: number): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = null;
    for (const socket of this.upgraded) socket.destroy();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const force = setTimeout(() => server.closeAllConnections(), graceMs);
    force.unref();
    await closed;
    clearTimeout(force);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const clientIp = req.socket.remoteAddress ?? '';
    let clusterId: string | null = null;
    let userId: string | null = null;
    const finish = (status: number) => {
      if (clusterId) this.proxy.traffic.log(clusterId, this.entry(req, clientIp, userId, status, started));
    };
    try {
      const target = this.target(req.headers.host);
      if (!target)
        throw new Refusal(404, 'NOT_FOUND', `expected https://<cluster_id>-<port>.${this.proxy.domain}`);
      clusterId = target.clusterId;
      const path = req.url ?? '/';
      if (path === LOGIN_PATH || path.startsWith(`${LOGIN_PATH}?`)) {
        const status = await this.login(req, res, target.clusterId, target.port, clientIp);
        finish(status);
        return;
      }
      const preflight =
        req.method === 'OPTIONS' && req.headers.origin && req.headers['access-control-request-method'];
      const admitted = await this.admit(req, target.clusterId, target.port, clientIp, Boolean(preflight));
      if (!admitted) {
        // CORS preflight answered by the proxy (no credentials travel with a preflight).
        const status = this.preflight(req, res, await this.mappingAccess(target.clusterId, target.port));
        finish(status);
        return;
      }
      userId = admitted.caller.userId;
      if (path === LOGOUT_PATH) {
        const cookie = readCookie(req.headers.cookie, SESSION_COOKIE);
        if (cookie) await this.proxy.logins.end(cookie);
        res.writeHead(204, { 'set-cookie': clearedSessionCookie() });
        res.end();
        finish(204);
        return;
      }
      this.forward(req, res, admitted, (status) => {
        finish(status);
        this.proxy.traffic.forwarded(
          admitted.mapping.id,
          admitted.caller.visitor,
          performance.now() - started,
        );
      });
    } catch (error) {
      const refusal = toRefusal(error);
      if (refusal.status >= 500)
        this.logger.warn({ err: error, cluster_id: clusterId }, 'proxy request failed');
      sendRefusal(res, refusal);
      userId ??= refusal.user;
      finish(refusal.status);
    }
  }

  private async mappingAccess(clusterId: string, port: number): Promise<MappingAccess | null> {
    const route = await this.proxy.routes.route(clusterId);
    const mapping = route && findMapping(route, port);
    return mapping ? (route.access.get(mapping.id)?.access ?? null) : null;
  }

  /** Route, address, authentication and rate-limit checks; null for a CORS preflight (answered apart). */
  private async admit(
    req: IncomingMessage,
    clusterId: string,
    port: number,
    clientIp: string,
    preflight: boolean,
  ): Promise<Admitted | null> {
    const route = await this.proxy.routes.route(clusterId);
    if (!route) throw new Refusal(404, 'CLUSTER_NOT_FOUND', `no cluster ${clusterId}`);
    const mapping = findMapping(route, port);
    if (!mapping) {
      throw new Refusal(404, 'PORT_MAPPING_NOT_FOUND', `port ${port} of ${clusterId} is not mapped`);
    }
    if (!route.settings.enabled)
      throw new Refusal(503, 'PROXY_DISABLED', `the proxy of ${clusterId} is disabled`);
    if (mapping.protocol !== 'tcp') throw new Refusal(404, 'PORT_MAPPING_NOT_FOUND', `port ${port} is udp`);
    if (route.cluster.status !== 'running') {
      throw new Refusal(503, 'INVALID_STATE', `cluster ${clusterId} is ${route.cluster.status}, not running`);
    }
    const compiled = route.access.get(mapping.id)!;
    const outsideAccountList = await this.proxy.accountAddressRefusal(route.cluster.accountId, req);
    if (outsideAccountList) throw new Refusal(403, 'IP_NOT_ALLOWED', outsideAccountList);
    if (route.blocked.matches(clientIp))
      throw new Refusal(403, 'FORBIDDEN', `address ${clientIp} is blocked`);
    if (route.whitelist.size > 0 && !route.whitelist.matches(clientIp)) {
      throw new Refusal(403, 'FORBIDDEN', `address ${clientIp} is not in the cluster's ip_whitelist`);
    }
    if (compiled.whitelist.size > 0 && !compiled.whitelist.matches(clientIp)) {
      throw new Refusal(403, 'FORBIDDEN', `address ${clientIp} is not in this port's ip_whitelist`);
    }
    if (preflight && compiled.access.cors.enabled) return null;

    const access = compiled.access;
    const required =
      !access.public_access && (access.authentication_required ?? route.settings.defaultAuthentication);
    const credentials = credentialsOf(req.headers);
    const caller = await this.authenticate(req, credentials, route, mapping, access, required, clientIp);
    if (caller.byCookie) {
      const crossSite = crossSiteReason(req.method, req.headers, access);
      if (crossSite) throw new Refusal(403, 'FORBIDDEN', crossSite);
    }
    if (caller.userId && access.allowed_users.length > 0 && !access.allowed_users.includes(caller.userId)) {
      throw new Refusal(403, 'FORBIDDEN', 'this port is open to listed users only (allowed_users)');
    }
    if (
      caller.userId &&
      access.allowed_roles.length > 0 &&
      !access.allowed_roles.includes(caller.role ?? '')
    ) {
      throw new Refusal(403, 'FORBIDDEN', 'this port is open to listed roles only (allowed_roles)');
    }

    const limits: ProxyLimit[] = [];
    const global = rateLimitOf(route.settings.globalRateLimit);
    if (global) limits.push({ bucket: `g:${clusterId}`, limit: global, name: 'global_limit' });
    const perUser = rateLimitOf(route.settings.perUserRateLimit);
    if (perUser)
      limits.push({ bucket: `u:${clusterId}:${caller.visitor}`, limit: perUser, name: 'per_user_limit' });
    if (access.rate_limit) {
      limits.push({
        bucket: `m:${mapping.id}:${caller.visitor}`,
        limit: access.rate_limit,
        name: 'port rate_limit',
      });
    }
    if (limits.length > 0) {
      const refused = await this.proxy.rateLimits.admit(limits, this.proxy.clock.now().getTime());
      if (refused) {
        const refusal = new Refusal(
          429,
          'RATE_LIMITED',
          `over the ${refused.name} of ${refused.limit.requests_per_minute} requests per minute ` +
            `(burst ${refused.limit.burst_size})`,
          { 'retry-after': String(refused.retryAfterSeconds) },
        );
        refusal.user = caller.userId;
        throw refusal;
      }
    }
    return { route, mapping, access, caller, credentials };
  }

  /**
   * An Anvil key (`Authorization: Bearer anv_…`, recognised by its prefix) or the session cookie, whose
   * user must hold the port's required_permission on the cluster. Both are kept from the container
   * (`credentials`); any other Authorization passes through.
   */
  private async authenticate(
    req: IncomingMessage,
    credentials: Credentials,
    route: Route,
    mapping: ProxyPortMapping,
    access: MappingAccess,
    required: boolean,
    clientIp: string,
  ): Promise<Caller> {
    if (!required)
      return { userId: null, role: null, byCookie: false, keyId: null, visitor: `ip:${clientIp}` };
    const permission = access.required_permission;
    if (credentials.anvilKey) {
      const user = await this.proxy.authorization.key(
        req.headers.authorization!,
        route.cluster.id,
        clientIp,
        permission,
      );
      return { ...user, byCookie: false, visitor: `user:${user.userId}` };
    }
    const cookie = credentials.cookie === null ? null : readCookie(req.headers.cookie, SESSION_COOKIE);
    if (cookie) {
      const user = await this.proxy.authorization.cookie(
        cookie,
        route.cluster,
        mapping.internalPort,
        permission,
      );
      if (user) return { ...user, byCookie: true, visitor: `user:${user.userId}` };
    }
    throw new Refusal(
      401,
      'UNAUTHORIZED',
      'send "Authorization: Bearer <Anvil API key>" or open a login link from POST /v1/clusters/{cluster_id}/proxy/ports/{port_id}/login-link',
      { 'www-authenticate': 'Bearer realm="anvil-proxy"' },
    );
  }

  private preflight(req: IncomingMessage, res: ServerResponse, access: MappingAccess | null): number {
    const origin = req.headers.origin ?? '';
    const grant = access && corsGrant(access, origin);
    if (!grant) {
      sendRefusal(res, new Refusal(403, 'FORBIDDEN', `origin ${origin} is not allowed`));
      return 403;
    }
    const requested = req.headers['access-control-request-headers'];
    res.writeHead(204, {
      ...grant,
      'access-control-allow-methods': (access.cors.allowed_methods.length > 0
        ? access.cors.allowed_methods
        : ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']
      ).join(', '),
      'access-control-allow-headers':
        access.cors.allowed_headers.length > 0 ? access.cors.allowed_headers.join(', ') : (requested ?? ''),
      'access-control-max-age': '600',
      vary: 'Origin',
    });
    res.end();
    return 204;
  }

  private forward(
    req: IncomingMessage,
    res: ServerResponse,
    admitted: Admitted,
    done: (status: number) => void,
  ) {
    const { route, mapping, access } = admitted;
    const length = req.headers['content-length'];
    const hasBody =
      req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    const origin = req.headers.origin;
    const relay = new ResponseRelay(
      res,
      (raw) => this.responseHeaders(raw, route, access, origin, admitted.caller.userId !== null),
      (error, status) => {
        if (!error) return done(status);
        if (res.headersSent || status === CLIENT_CLOSED) {
          // The container or the client went away mid-body (or the client before any of it).
          res.destroy();
          return done(status);
        }
        const refusal = toRefusal(error);
        this.logger.debug({ err: error, cluster_id: route.cluster.id }, 'proxy upstream failed');
        sendRefusal(res, refusal);
        done(refusal.status);
      },
    );
    this.proxy.upstreams.pool(route.cluster.id, mapping.internalPort).dispatch(
      {
        path: req.url ?? '/',
        method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
        headers: forwardedHeaders(req, admitted.credentials) as Record<string, string | string[]>,
        body: hasBody ? req : null,
      },
      relay,
    );
  }

  /**
   * The container's response headers (undici's raw list: name, value, …) without hop-by-hop ones, with
   * security and CORS headers added. Names and values are read as latin1, byte for byte what came.
   * On a signed-in request the container cannot grant credentialed CORS itself (reflecting any Origin
   * would let a sibling tenant's page read the signed-in answer): only the proxy's grant counts.
   */
  private responseHeaders(
    raw: Buffer[],
    route: Route,
    access: MappingAccess,
    origin: string | undefined,
    signedIn: boolean,
  ): Record<string, string | string[]> {
    const out: Record<string, string | string[]> = {};
    let listed: Set<string> | null = null;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!.toString('latin1').toLowerCase();
      let value: string | null = raw[i + 1]!.toString('latin1');
      if (HOP_BY_HOP.has(name)) {
        if (name === 'connection') listed = listedInConnection(value, listed);
        continue;
      }
      if (name === 'set-cookie') {
        value = hostOnlySetCookie(value);
        if (value === null) continue;
      }
      const prior = out[name];
      if (prior === undefined) out[name] = value;
      else if (Array.isArray(prior)) prior.push(value);
      else out[name] = [prior, value];
    }
    if (listed) for (const name of listed) delete out[name];
    for (const [name, value] of route.securityHeaders) out[name] = value;
    if (signedIn) delete out['access-control-allow-credentials'];
    const grant = origin && access.cors.enabled ? corsGrant(access, origin) : null;
    if (grant) Object.assign(out, grant);
    return out;
  }

  /** WebSocket (any Upgrade): the same checks, then the raw bytes both ways over a dedicated tunnel. */
  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const started = performance.now();
    const clientIp = (req.socket as Socket).remoteAddress ?? '';
    const target = this.target(req.headers.host);
    socket.on('error', () => socket.destroy());
    try {
      if (!target) throw new Refusal(404, 'NOT_FOUND', 'unknown proxy host');
      const admitted = await this.admit(req, target.clusterId, target.port, clientIp, false);
      if (!admitted) throw new Refusal(400, 'VALIDATION_ERROR', 'not an upgrade');
      // A revocation may come while the tunnel opens: the socket then ends as soon as it is piped.
      let stop: (() => void) | null = null;
      let revoked = false;
      const release = this.holdSocket(admitted, () => {
        if (stop) stop();
        else revoked = true;
      });
      let upstream: Duplex;
      try {
        upstream = await this.proxy.upstreams.open(target.clusterId, admitted.mapping.internalPort);
      } catch (error) {
        release();
        throw error;
      }
      const headers = forwardedHeaders(req, admitted.credentials);
      headers.connection = 'Upgrade';
      headers.upgrade = req.headers.upgrade ?? 'websocket';
      let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
      for (const [name, value] of Object.entries(headers)) {
        for (const v of Array.isArray(value) ? value : [value])
          if (v !== undefined) text += `${name}: ${v}\r\n`;
      }
      upstream.write(`${text}\r\n`);
      if (head.length > 0) upstream.write(head);
      this.upgraded.add(socket);
      const end = () => {
        release();
        this.upgraded.delete(socket);
        socket.destroy();
        upstream.destroy();
      };
      upstream.on('error', end);
      upstream.on('close', end);
      socket.on('close', end);
      upstream.pipe(socket);
      socket.pipe(upstream);
      stop = end;
      // A client gone while the tunnel opened fired its close before anyone listened.
      if (revoked || socket.destroyed) end();
      this.proxy.traffic.log(
        target.clusterId,
        this.entry(req, clientIp, admitted.caller.userId, 101, started),
      );
      this.proxy.traffic.forwarded(admitted.mapping.id, admitted.caller.visitor, performance.now() - started);
    } catch (error) {
      const refusal = toRefusal(error);
      const body = JSON.stringify(refusalBody(refusal));
      let text = `HTTP/1.1 ${refusal.status} ${statusText(refusal.status)}\r\ncontent-type: application/json\r\n`;
      for (const [name, value] of Object.entries(refusal.headers)) text += `${name}: ${value}\r\n`;
      socket.end(`${text}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
      if (target)
        this.proxy.traffic.log(
          target.clusterId,
          this.entry(req, clientIp, refusal.user, refusal.status, started),
        );
    }
  }

  /**
   * Counts a WebSocket against the cluster account's limit (429 past it) and lets a revocation of its
   * caller's key, membership or access end it. Returns the release.
   */
  private holdSocket(admitted: Admitted, end: () => void): () => void {
    const { route, caller } = admitted;
    const accountId = route.cluster.accountId;
    return this.proxy.liveSessions.hold({
      kind: 'proxy_websocket',
      accountId,
      grant: caller.userId
        ? {
            accountId,
            userId: caller.userId,
            clusterId: route.cluster.id,
            permission: 'read',
            apiKeyId: caller.keyId,
          }
        : null,
      end,
    });
  }

  /** GET /__anvil/login?ticket=…&next=/path: trades a one-time ticket for the session cookie. */
  private async login(
    req: IncomingMessage,
    res: ServerResponse,
    clusterId: string,
    port: number,
    clientIp: string,
  ): Promise<number> {
    const url = new URL(req.url ?? '/', 'https://proxy.invalid');
    const ticket = url.searchParams.get('ticket') ?? '';
    const next = url.searchParams.get('next') ?? '/';
    const route = await this.proxy.routes.route(clusterId);
    const mapping = route && findMapping(route, port);
    if (!route || !mapping)
      throw new Refusal(404, 'PORT_MAPPING_NOT_FOUND', `port ${port} of ${clusterId} is not mapped`);
    const outsideAccountList = await this.proxy.accountAddressRefusal(route.cluster.accountId, req);
    if (outsideAccountList) throw new Refusal(403, 'IP_NOT_ALLOWED', outsideAccountList);
    if (route.blocked.matches(clientIp))
      throw new Refusal(403, 'FORBIDDEN', `address ${clientIp} is blocked`);
    const access = route.access.get(mapping.id)!.access;
    const minutes = access.session_timeout_minutes ?? route.settings.sessionTimeoutMinutes;
    const session = await this.proxy.logins.redeem(ticket, clusterId, mapping.internalPort, minutes);
    if (!session) throw new Refusal(401, 'UNAUTHORIZED', 'the login ticket is unknown, used or expired');
    const location = sameOriginPath(next, ownOrigin(req.headers.host) ?? 'https://proxy.invalid');
    res.writeHead(302, {
      location,
      'set-cookie': sessionCookie(session.cookie, minutes * 60),
      'cache-control': 'no-store',
    });
    res.end();
    return 302;
  }

  private entry(
    req: IncomingMessage,
    clientIp: string,
    user: string | null,
    status: number,
    started: number,
  ) {
    const url = req.url ?? '/';
    const path = url.includes('ticket=') ? url.replace(/([?&]ticket=)[^&]*/, '$1…') : url;
    return {
      timestamp: this.proxy.clock.now().toISOString(),
      client_ip: clientIp,
      user,
      method: req.method ?? 'GET',
      path: path.length > 512 ? `${path.slice(0, 512)}…` : path,
      status_code: status,
      response_time_ms: Math.round((performance.now() - started) * 100) / 100,
      user_agent: req.headers['user-agent'] ?? null,
    };
  }
}

function findMapping(route: Route, port: number): ProxyPortMapping | undefined {
  return (
    route.mappings.find((m) => m.internalPort === port) ?? route.mappings.find((m) => m.externalPort === port)
  );
}

/** Header names a Connection header lists (hop-by-hop for this connection only), added to `into`. */
function listedInConnection(value: string | string[], into: Set<string> | null): Set<string> {
  const set = into ?? new Set<string>();
  for (const part of (Array.isArray(value) ? value.join(',') : value).split(',')) {
    const name = part.trim().toLowerCase();
    if (name) set.add(name);
  }
  return set;
}

/** What the client sent that the container must not see: an Anvil key, the proxy's session cookie. */
function credentialsOf(headers: IncomingHttpHeaders): Credentials {
  const authorization = headers.authorization;
  const anvilKey = authorization !== undefined && ANVIL_KEY.test(authorization);
  return { anvilKey, cookie: withoutProxyCookies(headers.cookie) };
}

const ANVIL_KEY = /^Bearer\s+anv_/i;

/** The request headers the container receives, built in one pass over the client's. */
function forwardedHeaders(req: IncomingMessage, credentials: Credentials): IncomingHttpHeaders {
  const input = req.headers;
  const listed = input.connection === undefined ? null : listedInConnection(input.connection, null);
  const headers: IncomingHttpHeaders = {};
  for (const name in input) {
    const value = input[name];
    if (value === undefined || HOP_BY_HOP.has(name) || listed?.has(name)) continue;
    // The proxy's own HTTP server already answered 100 Continue; the container gets the body as it comes.
    if (name === 'expect') continue;
    if (name === 'authorization' && credentials.anvilKey) continue;
    if (name === 'cookie' && credentials.cookie !== null) {
      if (credentials.cookie) headers.cookie = credentials.cookie;
      continue;
    }
    headers[name] = value;
  }
  const clientIp = req.socket.remoteAddress ?? '';
  const prior = input['x-forwarded-for'];
  headers['x-forwarded-for'] = prior ? `${prior}, ${clientIp}` : clientIp;
  headers['x-forwarded-proto'] = 'https';
  if (input.host) headers['x-forwarded-host'] = input.host;
  return headers;
}

function toRefusal(error: unknown): Refusal {
  if (error instanceof Refusal) return error;
  if (error instanceof ApiError) {
    // Upstream problems reach the browser as 502 (container port closed) or 504 (agent timeout).
    if (
      error.code === 'AGENT_COMMAND_FAILED' ||
      error.code === 'HOST_NOT_CONNECTED' ||
      error.code === 'WORKLOAD_NOT_FOUND'
    ) {
      return new Refusal(502, 'BAD_GATEWAY', error.message);
    }
    return new Refusal(error.status, error.code, error.message, error.headers, error.details ?? {});
  }
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'EHOSTUNREACH' || code === 'ETIMEDOUT') {
    return new Refusal(502, 'BAD_GATEWAY', `the container did not answer on this port (${code})`);
  }
  return new Refusal(502, 'BAD_GATEWAY', (error as Error).message ?? 'upstream failure');
}

/** The spec's flat error shape: `{error, message, code, details}`. */
function refusalBody(refusal: Refusal): Record<string, unknown> {
  return errorBody('flat', {
    status: refusal.status,
    code: refusal.code,
    message: refusal.message,
    details: refusal.details,
    requestId: '',
  });
}

function sendRefusal(res: ServerResponse, refusal: Refusal): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(refusalBody(refusal));
  res.writeHead(refusal.status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    ...refusal.headers,
  });
  res.end(body);
}

function statusText(status: number): string {
  return (
    {
      400: 'Bad Request',
      401: 'Unauthorized',
      403: 'Forbidden',
      404: 'Not Found',
      429: 'Too Many Requests',
      502: 'Bad Gateway',
      503: 'Service Unavailable',
    }[status] ?? 'Error'
  );
}
