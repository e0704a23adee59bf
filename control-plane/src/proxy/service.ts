import type { IncomingMessage } from 'node:http';
import { ApiError, newId } from '@anvil/shared';
import type { Logger } from 'pino';
import type { SessionAccessCheck } from '../access-revocation/access-check.ts';
import type { LiveSessions } from '../access-revocation/live-sessions.ts';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { AccessControl, Actor } from '../accounts/access.ts';
import type { AccountIpPolicy } from '../accounts/settings-ip-policy.ts';
import type { Clock } from '../auth/clock.ts';
import type { KeyResolver } from '../auth/key-resolver.ts';
import { ClusterAccess } from '../clusters/access.ts';
import type { ClusterViewParts } from '../clusters/view-parts.ts';
import type { Config } from '../config.ts';
import { type Cluster, Prisma, type ProxyPortMapping, type ProxySettings } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { TunnelOpener } from '../fleet/tunnels/types.ts';
import { TrustedProxies } from '../http/client-address.ts';
import { SharedCounterLimiter, SqlCounterStore } from '../ratelimit/index.ts';
import { ProxyAuthorization, refuseServiceKey } from './authorization.ts';
import { ProxyGateway } from './gateway.ts';
import { HealthScheduler } from './health.ts';
import { invalidCidrs } from './ip-rules.ts';
import { ProxyRateLimits } from './rate-limiter.ts';
import { ProxySessions } from './sessions.ts';
import { ProxyStore } from './store.ts';
import { type CertificateInfo, certificateInfo, loadProxyTls, type ProxyTls } from './tls.ts';
import { TrafficRecorder } from './traffic.ts';
import {
  DEFAULT_HEALTH_CHECK,
  EXTERNAL_PORT_RANGE,
  type HealthCheck,
  healthCheckOf,
  type MappingAccess,
  mappingAccessOf,
  type RateLimit,
  rateLimitOf,
  type SecurityHeaders,
  securityHeadersOf,
} from './types.ts';
import { UpstreamPool } from './upstream.ts';

/** Reported as meta.proxy_version. */
export const PROXY_VERSION = '1.0.0';

export interface ProxyServiceOptions {
  config: Config;
  db: Database;
  clock: Clock;
  keys: KeyResolver;
  access: AccessControl;
  /** Re-checks cookie sessions on use; revocations delete them and clear the access caches. */
  sessionAccess: SessionAccessCheck;
  revocations: AccessRevocations;
  /** Where WebSocket connections are counted against the account's limit, and ended on revocation. */
  liveSessions: LiveSessions;
  /**
   * The tunnel implementation, asked per new upstream connection; null until one exists (requests then
   * answer 502). Tests pass a named test double here (createContext's `proxyTunnels`).
   */
  tunnels: () => TunnelOpener | null;
  logger: Logger;
  /** The account-wide address allowlist (security.api_access.ip_whitelist). */
  ipPolicy: AccountIpPolicy;
}

export interface CreatePortInput {
  internal_port: number;
  external_port?: number | undefined;
  protocol?: 'tcp' | 'udp' | undefined;
  description: string;
  health_check?: Partial<HealthCheck> | undefined;
  /** A partial MappingAccess (cors partial too), validated by the route's schema. */
  access_control?: Record<string, unknown> | undefined;
  custom_domain?: string | null | undefined;
}

export interface UpdatePortInput {
  description?: string | undefined;
  health_check?: Partial<HealthCheck> | undefined;
  /** A partial MappingAccess (cors partial too), validated by the route's schema. */
  access_control?: Record<string, unknown> | undefined;
  custom_domain?: string | null | undefined;
}

export interface AccessInput {
  default_authentication?: boolean | undefined;
  session_timeout_minutes?: number | undefined;
  max_concurrent_sessions?: number | null | undefined;
  ip_whitelist?: string[] | undefined;
  blocked_ips?: string[] | undefined;
  rate_limiting?:
    | { global_limit?: RateLimit | null | undefined; per_user_limit?: RateLimit | null | undefined }
    | undefined;
  security_headers?: Partial<SecurityHeaders> | undefined;
}

const unavailableTunnels: TunnelOpener = {
  openStream: () =>
    Promise.reject(new ApiError('HOST_NOT_CONNECTED', 'no tunnel implementation is available')),
  openExec: () => Promise.reject(new ApiError('HOST_NOT_CONNECTED', 'no tunnel implementation is available')),
};

/**
 * The HTTPS port proxy: its configuration API (through ClusterAccess), the gateway serving traffic,
 * health checks and traffic accounting. Started by the server process after the API listens.
 */
export class ProxyService {
  readonly domain: string;
  readonly clock: Clock;
  readonly store: ProxyStore;
  readonly sessions: ProxySessions;
  readonly traffic: TrafficRecorder;
  /** Counters shared with every other control-plane process (rate_limit_counters). */
  readonly limiter: SharedCounterLimiter;
  readonly rateLimits: ProxyRateLimits;
  readonly pool: UpstreamPool;
  readonly clusters: ClusterAccess;
  readonly liveSessions: LiveSessions;
  private readonly health: HealthScheduler;
  /** Who may pass an authenticated port (key or login cookie), with its caches. */
  readonly authorization: ProxyAuthorization;
  private readonly gateway: ProxyGateway;
  private tls: ProxyTls | null = null;
  private readonly trustedProxies: TrustedProxies;

  constructor(private readonly options: ProxyServiceOptions) {
    this.domain = options.config.proxyDomain;
    this.trustedProxies = new TrustedProxies(options.config.trustedProxies);
    this.clock = options.clock;
    this.store = new ProxyStore(options.db, options.clock);
    this.sessions = new ProxySessions(
      options.db,
      options.clock,
      options.sessionAccess,
      options.revocations,
      options.logger.child({ component: 'proxy-sessions' }),
    );
    this.liveSessions = options.liveSessions;
    const background = options.logger.child({ component: 'proxy-traffic' });
    this.traffic = new TrafficRecorder({ sql: options.db.sql, clock: options.clock, logger: background });
    this.limiter = new SharedCounterLimiter({
      store: new SqlCounterStore(options.db.sql),
      clock: options.clock,
      logger: background,
    });
    this.rateLimits = new ProxyRateLimits(this.limiter);
    this.clusters = new ClusterAccess(options.db, options.access);
    this.authorization = new ProxyAuthorization({
      db: options.db,
      clock: options.clock,
      keys: options.keys,
      clusters: this.clusters,
      sessions: this.sessions,
      sessionAccess: options.sessionAccess,
      revocations: options.revocations,
    });
    this.pool = new UpstreamPool(() => options.tunnels() ?? unavailableTunnels);
    this.health = new HealthScheduler({
      db: options.db,
      clock: options.clock,
      pool: this.pool,
      domain: this.domain,
      logger: options.logger.child({ component: 'proxy-health' }),
      onChange: (clusterId) => this.store.invalidate(clusterId),
    });
    this.gateway = new ProxyGateway(
      {
        domain: this.domain,
        clock: this.clock,
        routes: this.store,
        accountAddressRefusal: (accountId, req) => this.accountAddressRefusal(accountId, req),
        authorization: this.authorization,
        logins: this.sessions,
        rateLimits: this.rateLimits,
        upstreams: this.pool,
        traffic: this.traffic,
        liveSessions: this.liveSessions,
      },
      options.logger.child({ component: 'proxy' }),
    );
  }

  /**
   * The refusal when the cluster's account keeps an address allowlist without this client (its address
   * from X-Forwarded-For only through ANVIL_TRUSTED_PROXIES), else null.
   */
  private async accountAddressRefusal(accountId: string, req: IncomingMessage): Promise<string | null> {
    const refusal = await this.options.ipPolicy.admit(accountId, this.trustedProxies.clientOf(req));
    return refusal ? refusal.message : null;
  }

  /** Loads (or generates) the certificate, listens on ANVIL_PROXY_PORT, starts health checks and flushes. */
  async start(): Promise<void> {
    const { config } = this.options;
    this.tls = await loadProxyTls({
      dataDir: config.dataDir,
      domain: this.domain,
      certFile: config.proxyTlsCert,
      keyFile: config.proxyTlsKey,
    });
    await this.gateway.listen(this.tls, config.proxyPort, config.host);
    await this.limiter.start();
    this.traffic.start();
    this.health.start();
    this.options.logger.info(
      { port: this.gateway.port, domain: this.domain, tls: this.tls.source },
      'HTTPS port proxy listening',
    );
  }

  async stop(graceMs = 5_000): Promise<void> {
    await this.health.stop();
    await this.gateway.close(graceMs);
    this.pool.destroy();
    await this.limiter.stop();
    await this.traffic.stop();
  }

  /** The port the proxy listens on (null before start). */
  get port(): number | null {
    return this.gateway.port;
  }

  /** PEM of the development CA, null with an operator certificate (or before start). */
  get caCertificate(): string | null {
    return this.tls?.caCert ?? null;
  }

  get certificate(): CertificateInfo | null {
    return this.tls ? certificateInfo(this.tls.cert, this.clock.now()) : null;
  }

  /** https://cluster-<id>-<port>.<domain>[:proxy port] — the id's `_` written as `-` (wildcard certificates). */
  urlFor(clusterId: string, port: number): string {
    const listening = this.gateway.port ?? this.options.config.proxyPort;
    const suffix = listening === 443 || listening === 0 ? '' : `:${listening}`;
    return `https://${clusterId.replace('_', '-')}-${port}.${this.domain}${suffix}`;
  }

  // ---- configuration API ----

  async getConfig(
    actor: Actor,
    clusterId: string,
    include: { health: boolean; accessLogs: boolean; ssl: boolean },
  ) {
    const cluster = await this.clusters.require(actor, clusterId, 'read');
    const settings = await this.store.ensure(cluster);
    await this.traffic.flush();
    const mappings = await this.store.mappings(clusterId);
    const visitors = await this.visitorCounts(mappings.map((m) => m.id));
    const views = mappings.map((m) =>
      this.mappingView(m, cluster, settings, visitors.get(m.id) ?? 0, include.health),
    );
    const data: Record<string, unknown> = {
      cluster_id: clusterId,
      proxy_url: this.proxyUrl(clusterId, mappings),
      proxy_status: settings.enabled ? 'active' : 'disabled',
      port_mappings: views,
      access_control: this.accessView(settings),
      network_configuration: {
        load_balancer: {
          enabled: false,
          algorithm: null,
          health_check_enabled: mappings.some((m) => healthCheckOf(m.healthCheck)?.enabled === true),
        },
        ssl_termination: true,
        websocket_support: true,
        compression: { enabled: false, algorithms: [] },
      },
    };
    if (include.ssl) data['ssl_certificate'] = this.certificate;
    if (include.accessLogs) data['access_logs'] = await this.traffic.accessLogs(clusterId);
    return {
      data,
      meta: {
        last_updated: latest([settings.updatedAt, ...mappings.map((m) => m.updatedAt)]).toISOString(),
        total_port_mappings: mappings.length,
        active_port_mappings: views.filter((v) => v.status === 'active').length,
        proxy_version: PROXY_VERSION,
      },
    };
  }

  async updateShort(actor: Actor, clusterId: string, input: { enabled?: boolean; allowedIps?: string[] }) {
    const cluster = await this.clusters.require(actor, clusterId, 'write');
    await this.store.ensure(cluster);
    if (input.allowedIps) checkCidrs('allowedIps', input.allowedIps);
    const settings = await this.options.db.prisma.proxySettings.update({
      where: { clusterId },
      data: {
        ...(input.enabled !== undefined ? { enabled: input.enabled } : {}),
        ...(input.allowedIps !== undefined ? { ipWhitelist: input.allowedIps.map((ip) => ip.trim()) } : {}),
      },
    });
    this.changed(clusterId);
    return {
      proxyUrl: this.proxyUrl(clusterId, await this.store.mappings(clusterId)),
      enabled: settings.enabled,
    };
  }

  async createPort(actor: Actor, clusterId: string, input: CreatePortInput) {
    const cluster = await this.clusters.require(actor, clusterId, 'write');
    const settings = await this.store.ensure(cluster);
    const existing = await this.store.mappings(clusterId);
    const clash = existing.find((m) => m.internalPort === input.internal_port);
    if (clash) {
      throw new ApiError('PORT_CONFLICT', `internal port ${input.internal_port} is already mapped`, {
        field: 'internal_port',
        internal_port: input.internal_port,
        existing_port_id: clash.id,
      });
    }
    let external = input.external_port;
    if (external !== undefined) {
      const taken = existing.find((m) => m.externalPort === external);
      if (taken) {
        throw new ApiError('PORT_CONFLICT', `external port ${external} is already used`, {
          field: 'external_port',
          external_port: external,
          existing_port_id: taken.id,
        });
      }
    } else {
      const used = new Set(existing.map((m) => m.externalPort));
      external = EXTERNAL_PORT_RANGE.min;
      while (used.has(external) && external <= EXTERNAL_PORT_RANGE.max) external++;
      if (external > EXTERNAL_PORT_RANGE.max) {
        throw new ApiError('PORT_CONFLICT', 'no free external port left in 30000-32767', {
          field: 'external_port',
        });
      }
    }
    const access = this.accessInput(mappingAccessOf({}), input.access_control);
    const health = input.health_check ? healthInput(input.health_check) : null;
    let mapping: ProxyPortMapping;
    try {
      mapping = await this.options.db.prisma.proxyPortMapping.create({
        data: {
          id: newId('port'),
          clusterId,
          internalPort: input.internal_port,
          externalPort: external,
          protocol: input.protocol ?? 'tcp',
          description: input.description,
          healthCheck: health ? (health as unknown as Prisma.InputJsonValue) : Prisma.DbNull,
          accessControl: access as unknown as Prisma.InputJsonValue,
          customDomain: input.custom_domain ?? null,
        },
      });
    } catch (error) {
      if ((error as { code?: string }).code === 'P2002') {
        throw new ApiError('PORT_CONFLICT', 'the internal or external port was mapped concurrently', {
          internal_port: input.internal_port,
          external_port: external,
        });
      }
      throw error;
    }
    this.changed(clusterId);
    return this.mappingView(mapping, cluster, settings, 0, true);
  }

  async updatePort(actor: Actor, clusterId: string, portId: string, input: UpdatePortInput) {
    const cluster = await this.clusters.require(actor, clusterId, 'write');
    const settings = await this.store.ensure(cluster);
    const current = await this.findPort(clusterId, portId);
    const data: Prisma.ProxyPortMappingUpdateInput = {};
    if (input.description !== undefined) data.description = input.description;
    if (input.custom_domain !== undefined) data.customDomain = input.custom_domain;
    if (input.access_control !== undefined) {
      data.accessControl = this.accessInput(
        mappingAccessOf(current.accessControl),
        input.access_control,
      ) as unknown as Prisma.InputJsonValue;
    }
    if (input.health_check !== undefined) {
      const merged = healthInput({ ...(healthCheckOf(current.healthCheck) ?? {}), ...input.health_check });
      data.healthCheck = merged as unknown as Prisma.InputJsonValue;
      // A changed check starts over: its earlier verdict was about other settings.
      data.healthStatus = null;
      data.consecutiveFailures = 0;
    }
    const mapping = await this.options.db.prisma.proxyPortMapping.update({ where: { id: portId }, data });
    this.changed(clusterId);
    const visitors = await this.visitorCounts([portId]);
    return this.mappingView(mapping, cluster, settings, visitors.get(portId) ?? 0, true);
  }

  async deletePort(actor: Actor, clusterId: string, portId: string) {
    const cluster = await this.clusters.require(actor, clusterId, 'write');
    await this.store.ensure(cluster);
    const mapping = await this.findPort(clusterId, portId);
    await this.options.db.prisma.proxyPortMapping.delete({ where: { id: portId } });
    this.changed(clusterId);
    this.pool.drop(clusterId);
    return {
      id: mapping.id,
      internal_port: mapping.internalPort,
      external_port: mapping.externalPort,
      deleted: true as const,
      deleted_at: this.clock.now().toISOString(),
    };
  }

  async updateAccess(actor: Actor, clusterId: string, input: AccessInput) {
    const cluster = await this.clusters.require(actor, clusterId, 'write');
    const current = await this.store.ensure(cluster);
    if (input.ip_whitelist) checkCidrs('ip_whitelist', input.ip_whitelist);
    if (input.blocked_ips) checkCidrs('blocked_ips', input.blocked_ips);
    const data: Prisma.ProxySettingsUpdateInput = {};
    if (input.default_authentication !== undefined) data.defaultAuthentication = input.default_authentication;
    if (input.session_timeout_minutes !== undefined)
      data.sessionTimeoutMinutes = input.session_timeout_minutes;
    if (input.max_concurrent_sessions !== undefined)
      data.maxConcurrentSessions = input.max_concurrent_sessions;
    if (input.ip_whitelist !== undefined) data.ipWhitelist = input.ip_whitelist.map((ip) => ip.trim());
    if (input.blocked_ips !== undefined) data.blockedIps = input.blocked_ips.map((ip) => ip.trim());
    const limits = input.rate_limiting;
    if (limits?.global_limit !== undefined) data.globalRateLimit = jsonOrNull(limits.global_limit);
    if (limits?.per_user_limit !== undefined) data.perUserRateLimit = jsonOrNull(limits.per_user_limit);
    if (input.security_headers !== undefined) {
      data.securityHeaders = {
        ...securityHeadersOf(current.securityHeaders),
        ...input.security_headers,
      } as unknown as Prisma.InputJsonValue;
    }
    const settings = await this.options.db.prisma.proxySettings.update({ where: { clusterId }, data });
    this.changed(clusterId);
    return {
      cluster_id: clusterId,
      access_control: this.accessView(settings),
      security_headers: securityHeadersOf(settings.securityHeaders),
      updated_at: settings.updatedAt.toISOString(),
    };
  }

  /** A one-time link that sets the proxy's session cookie for one port (the login path of the proxy). */
  async loginLink(actor: Actor, clusterId: string, portId: string, next: string | undefined) {
    refuseServiceKey(actor.principal);
    const cluster = await this.clusters.require(actor, clusterId, 'read');
    await this.store.ensure(cluster);
    const mapping = await this.findPort(clusterId, portId);
    // The level the port asks for, checked now too, so a link is not issued for a port it cannot open.
    await this.clusters.require(actor, clusterId, mappingAccessOf(mapping.accessControl).required_permission);
    const { ticket, expiresAt } = await this.sessions.issueTicket({
      clusterId,
      internalPort: mapping.internalPort,
      userId: actor.principal.userId,
      keyId: actor.principal.keyId,
    });
    const query = new URLSearchParams({ ticket, ...(next ? { next } : {}) });
    return {
      url: `${this.urlFor(clusterId, mapping.internalPort)}/__anvil/login?${query}`,
      expires_at: expiresAt.toISOString(),
    };
  }

  /** Contract 3: the cluster object's proxy_url and port_mappings. */
  async viewPart(cluster: Cluster) {
    await this.store.ensure(cluster);
    const mappings = await this.store.mappings(cluster.id);
    return {
      proxy_url: this.proxyUrl(cluster.id, mappings),
      port_mappings: mappings.map((m) => ({
        internal_port: m.internalPort,
        external_port: m.externalPort,
        protocol: m.protocol,
      })),
    };
  }

  // ---- helpers ----

  private changed(clusterId: string): void {
    this.store.invalidate(clusterId);
    // A port, its health check or the proxy settings changed: the health checks follow at once.
    this.health.kick();
  }

  private async findPort(clusterId: string, portId: string): Promise<ProxyPortMapping> {
    const mapping = await this.options.db.prisma.proxyPortMapping.findFirst({
      where: { id: portId, clusterId },
    });
    if (!mapping) {
      throw new ApiError('PORT_MAPPING_NOT_FOUND', `no port mapping ${portId} on cluster ${clusterId}`, {
        port_id: portId,
        cluster_id: clusterId,
      });
    }
    return mapping;
  }

  private proxyUrl(clusterId: string, mappings: ProxyPortMapping[]): string | null {
    const first = mappings.find((m) => m.protocol === 'tcp');
    return first ? this.urlFor(clusterId, first.internalPort) : null;
  }

  private async visitorCounts(portIds: string[]): Promise<Map<string, number>> {
    if (portIds.length === 0) return new Map();
    const rows = await this.options.db.sql.query<{ port_id: string; n: number | string }>(
      'SELECT port_id, count(*) AS n FROM proxy_visitors WHERE port_id = ANY($1::text[]) GROUP BY port_id',
      [portIds],
    );
    return new Map(rows.map((r) => [r.port_id, Number(r.n)]));
  }

  private accessInput(current: MappingAccess, patch: Record<string, unknown> | undefined): MappingAccess {
    if (!patch) return current;
    const input = patch as Partial<MappingAccess>;
    if (input.ip_whitelist) checkCidrs('access_control.ip_whitelist', input.ip_whitelist);
    return {
      ...current,
      ...input,
      cors: { ...current.cors, ...(input.cors ?? {}) },
    };
  }

  private accessView(settings: ProxySettings) {
    return {
      default_authentication: settings.defaultAuthentication,
      session_timeout_minutes: settings.sessionTimeoutMinutes,
      max_concurrent_sessions: settings.maxConcurrentSessions,
      ip_whitelist: settings.ipWhitelist,
      blocked_ips: settings.blockedIps,
      rate_limiting: {
        global_limit: rateLimitOf(settings.globalRateLimit),
        per_user_limit: rateLimitOf(settings.perUserRateLimit),
      },
      security_headers: securityHeadersOf(settings.securityHeaders),
    };
  }

  private mappingView(
    m: ProxyPortMapping,
    cluster: Cluster,
    settings: ProxySettings,
    uniqueVisitors: number,
    includeHealth: boolean,
  ) {
    const status =
      m.protocol !== 'tcp'
        ? 'unsupported'
        : !settings.enabled
          ? 'disabled'
          : cluster.status === 'running'
            ? 'active'
            : 'inactive';
    const check = healthCheckOf(m.healthCheck) ?? { ...DEFAULT_HEALTH_CHECK, enabled: false };
    const total = Number(m.totalRequests);
    return {
      id: m.id,
      internal_port: m.internalPort,
      external_port: m.externalPort,
      protocol: m.protocol,
      description: m.description,
      url: this.urlFor(cluster.id, m.internalPort),
      status,
      ...(includeHealth
        ? {
            health_status: m.healthStatus,
            health_check: {
              ...check,
              last_check: m.lastCheck?.toISOString() ?? null,
              consecutive_failures: m.consecutiveFailures,
            },
          }
        : {}),
      access_control: mappingAccessOf(m.accessControl),
      usage_statistics: {
        total_requests: total,
        unique_visitors: uniqueVisitors,
        last_accessed: m.lastAccessed?.toISOString() ?? null,
        avg_response_time_ms: total > 0 ? Math.round((m.totalResponseMs / total) * 100) / 100 : null,
      },
      custom_domain: m.customDomain,
      ssl_redirect: true,
      created_at: m.createdAt.toISOString(),
      updated_at: m.updatedAt.toISOString(),
    };
  }
}

function healthInput(input: Partial<HealthCheck>): HealthCheck {
  const check = { ...DEFAULT_HEALTH_CHECK, enabled: true, ...input };
  if (!check.path.startsWith('/')) {
    throw new ApiError('VALIDATION_ERROR', 'health_check.path must start with /', {
      field: 'health_check.path',
    });
  }
  if (check.timeout_seconds > check.interval_seconds) {
    throw new ApiError('VALIDATION_ERROR', 'health_check.timeout_seconds must not exceed interval_seconds', {
      field: 'health_check.timeout_seconds',
    });
  }
  return check;
}

function checkCidrs(field: string, list: string[]): void {
  const invalid = invalidCidrs(list);
  if (invalid.length > 0) {
    throw new ApiError('VALIDATION_ERROR', `${field} holds entries that are not IP addresses or CIDRs`, {
      field,
      invalid,
    });
  }
}

function jsonOrNull(value: RateLimit | null): Prisma.InputJsonValue | typeof Prisma.DbNull {
  return value === null ? Prisma.DbNull : (value as unknown as Prisma.InputJsonValue);
}

function latest(dates: Date[]): Date {
  return new Date(Math.max(...dates.map((date) => date.getTime())));
}

/**
 * Contract 3 provider: `proxyViewPart(context.proxy)` fills a cluster's proxy_url (its first TCP
 * mapping's URL, null without one) and port_mappings from the proxy's mappings.
 */
export function proxyViewPart(proxy: ProxyService): NonNullable<ClusterViewParts['proxy']> {
  return (cluster: Cluster) => proxy.viewPart(cluster);
}
