import { newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Cluster, ProxyPortMapping, ProxySettings } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { IpRules } from './ip-rules.ts';
import { EXTERNAL_PORT_RANGE, type MappingAccess, mappingAccessOf, securityHeadersOf } from './types.ts';

/** What the proxy needs to route one request for a cluster, compiled once and cached briefly. */
export interface Route {
  cluster: Pick<Cluster, 'id' | 'accountId' | 'status' | 'hostId'>;
  settings: ProxySettings;
  mappings: ProxyPortMapping[];
  blocked: IpRules;
  whitelist: IpRules;
  access: Map<string, { access: MappingAccess; whitelist: IpRules }>;
  /** HSTS, CSP and X-Frame-Options as configured: added to every forwarded response. */
  securityHeaders: [name: string, value: string][];
}

function securityHeaderList(stored: unknown): [string, string][] {
  const security = securityHeadersOf(stored);
  const list: [string, string][] = [];
  if (security.hsts_enabled) list.push(['strict-transport-security', 'max-age=31536000']);
  if (security.content_security_policy)
    list.push(['content-security-policy', security.content_security_policy]);
  if (security.x_frame_options) list.push(['x-frame-options', security.x_frame_options]);
  return list;
}

/** How long a compiled route is trusted; writes through this process invalidate it at once. */
const ROUTE_TTL_MS = 2_000;

/**
 * Proxy settings and port mappings in the database. A cluster gets its settings row and one mapping per
 * port it requested at creation (`clusters.ports`) the first time anything proxy-related touches it.
 */
export class ProxyStore {
  private readonly routes = new Map<string, { route: Route | null; at: number }>();
  /** Loads in flight: requests arriving meanwhile share them instead of each querying the database. */
  private readonly loading = new Map<string, Promise<Route | null>>();

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  invalidate(clusterId: string): void {
    this.routes.delete(clusterId);
    // A load that started before the change may have read the old rows: it must not be cached.
    this.loading.delete(clusterId);
  }

  /** The settings row, creating it (and the seeded mappings) on first use. */
  async ensure(cluster: Cluster): Promise<ProxySettings> {
    const existing = await this.db.prisma.proxySettings.findUnique({ where: { clusterId: cluster.id } });
    if (existing) return existing;
    const requested = Array.isArray(cluster.ports) ? (cluster.ports as Record<string, unknown>[]) : [];
    const seen = new Set<number>();
    const seeds: { internalPort: number; protocol: string; description: string }[] = [];
    for (const port of requested) {
      const internal = Number(port['internal_port']);
      if (!Number.isInteger(internal) || internal < 1 || internal > 65535 || seen.has(internal)) continue;
      seen.add(internal);
      seeds.push({
        internalPort: internal,
        protocol: port['protocol'] === 'udp' ? 'udp' : 'tcp',
        description: typeof port['description'] === 'string' ? port['description'] : `port ${internal}`,
      });
    }
    return this.db.prisma.$transaction(async (tx) => {
      const created = await tx.proxySettings.upsert({
        where: { clusterId: cluster.id },
        create: { clusterId: cluster.id },
        update: {},
      });
      if (seeds.length > 0) {
        await tx.proxyPortMapping.createMany({
          data: seeds.map((seed, index) => ({
            id: newId('port'),
            clusterId: cluster.id,
            ...seed,
            externalPort: EXTERNAL_PORT_RANGE.min + index,
          })),
          skipDuplicates: true,
        });
      }
      return created;
    });
  }

  async mappings(clusterId: string): Promise<ProxyPortMapping[]> {
    return this.db.prisma.proxyPortMapping.findMany({
      where: { clusterId },
      orderBy: [{ internalPort: 'asc' }],
    });
  }

  /**
   * The compiled route for a cluster, or null when it does not exist (or is deleted): never older than
   * ROUTE_TTL_MS. Past half of that, requests keep getting the cached route while one load refreshes it,
   * so steady traffic never queues behind the database; a route invalidated by a change through this
   * process is loaded before use.
   */
  route(clusterId: string): Promise<Route | null> {
    const now = this.clock.now().getTime();
    const cached = this.routes.get(clusterId);
    const age = cached ? now - cached.at : Number.POSITIVE_INFINITY;
    if (age < ROUTE_TTL_MS / 2) return Promise.resolve(cached!.route);
    let pending = this.loading.get(clusterId);
    if (!pending) {
      const load: Promise<Route | null> = this.load(clusterId).then((route) => {
        if (this.loading.get(clusterId) === load) {
          this.loading.delete(clusterId);
          this.routes.set(clusterId, { route, at: now });
          if (this.routes.size > 10_000) this.routes.delete(this.routes.keys().next().value!);
        }
        return route;
      });
      load.catch(() => {
        if (this.loading.get(clusterId) === load) this.loading.delete(clusterId);
      });
      this.loading.set(clusterId, load);
      pending = load;
    }
    return age < ROUTE_TTL_MS ? Promise.resolve(cached!.route) : pending;
  }

  private async load(clusterId: string): Promise<Route | null> {
    const cluster = await this.db.prisma.cluster.findFirst({ where: { id: clusterId, deletedAt: null } });
    let route: Route | null = null;
    if (cluster) {
      const settings = await this.ensure(cluster);
      const mappings = await this.mappings(clusterId);
      route = {
        cluster: {
          id: cluster.id,
          accountId: cluster.accountId,
          status: cluster.status,
          hostId: cluster.hostId,
        },
        settings,
        mappings,
        blocked: new IpRules(settings.blockedIps),
        whitelist: new IpRules(settings.ipWhitelist),
        access: new Map(
          mappings.map((m) => {
            const access = mappingAccessOf(m.accessControl);
            return [m.id, { access, whitelist: new IpRules(access.ip_whitelist) }];
          }),
        ),
        securityHeaders: securityHeaderList(settings.securityHeaders),
      };
    }
    return route;
  }
}
