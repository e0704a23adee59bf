import { type KeyPermission, type KeyScope, newId } from '@anvil/shared';
import { buildApp } from '../../control-plane/src/app.ts';
import { bootstrapOwner } from '../../control-plane/src/auth/bootstrap.ts';
import type { Clock } from '../../control-plane/src/auth/clock.ts';
import { loadConfig } from '../../control-plane/src/config.ts';
import { type AppContext, createContext } from '../../control-plane/src/context.ts';
import { createLogger } from '../../control-plane/src/logger.ts';
import {
  createTestDatabase,
  freePort,
  type TestDatabase,
  testLogger,
} from '../../control-plane/src/testing/index.ts';

/**
 * Fleet timings small enough for tests. The grace period is generous: on a loaded 2-core machine the
 * test process itself (which runs the control plane) can stall for seconds; liveness tests shorten it.
 */
export const FAST_FLEET_ENV: Record<string, string> = {
  ANVIL_HEARTBEAT_SECONDS: '1',
  ANVIL_HOST_GRACE_SECONDS: '10',
  ANVIL_METRICS_SECONDS: '1',
};

export interface ApiAnswer<T = Record<string, unknown>> {
  status: number;
  body: T;
  text: string;
}

/**
 * The real control plane (the same context and app `npm start` builds) over a real HTTP listener on
 * loopback, so real agents dial its WebSocket. restart() closes the app and builds a new one over the
 * same database on the same port: what a control-plane restart is, minus the process.
 */
export class FleetControlPlane {
  app!: Awaited<ReturnType<typeof buildApp>>;
  context!: AppContext;
  readonly ownerKey: string;
  readonly accountId: string;
  readonly userId: string;
  #running = false;

  private constructor(
    readonly database: TestDatabase,
    readonly port: number,
    readonly env: Record<string, string>,
    readonly clock: Clock | undefined,
    boot: { ownerKey: string; accountId: string; userId: string },
  ) {
    this.ownerKey = boot.ownerKey;
    this.accountId = boot.accountId;
    this.userId = boot.userId;
  }

  static async start(
    options: { env?: Record<string, string>; clock?: Clock } = {},
  ): Promise<FleetControlPlane> {
    const database = await createTestDatabase();
    const env = { ANVIL_DATA_DIR: '/tmp/anvil-test-unused', ...FAST_FLEET_ENV, ...options.env };
    const config = loadConfig(env);
    const boot = await bootstrapOwner(database.db, { ownerEmail: config.ownerEmail, bootstrapApiKey: null });
    const cp = new FleetControlPlane(database, await freePort(), env, options.clock, {
      ownerKey: boot.generatedKey!,
      accountId: boot.accountId,
      userId: boot.userId,
    });
    await cp.#open();
    return cp;
  }

  async #open(): Promise<void> {
    const config = loadConfig(this.env);
    const level = (process.env['ANVIL_TEST_LOG_LEVEL'] as 'silent' | undefined) ?? 'silent';
    this.context = createContext(config, this.database.db, this.clock, createLogger(level));
    await this.context.start();
    this.app = await buildApp({ context: this.context, logger: testLogger() });
    await this.app.listen({ host: '127.0.0.1', port: this.port });
    this.#running = true;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Closes the app (agents see the shutdown refusal and redial) and builds a new one over the same database. */
  async restart(downMs = 0): Promise<void> {
    await this.#shut();
    if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
    await this.#open();
  }

  async #shut(): Promise<void> {
    if (!this.#running) return;
    this.#running = false;
    await this.app.close();
    await this.context.stop();
  }

  async close(): Promise<void> {
    await this.#shut();
    await this.database.drop();
  }

  /** One API call over real HTTP; the key defaults to the bootstrap owner's. */
  async call<T = Record<string, unknown>>(
    method: 'GET' | 'POST' | 'PUT' | 'DELETE',
    path: string,
    options: { body?: unknown; key?: string; headers?: Record<string, string> } = {},
  ): Promise<ApiAnswer<T>> {
    const headers: Record<string, string> = { authorization: `Bearer ${options.key ?? this.ownerKey}` };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(`${this.url}${path}`, {
      method,
      headers: { ...headers, ...options.headers },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
    const text = await response.text();
    let body: T;
    try {
      body = JSON.parse(text) as T;
    } catch {
      body = {} as T;
    }
    return { status: response.status, body, text };
  }

  /** A join token value for `maxUses` registrations (null: unlimited until expiry). */
  async joinToken(options: { maxUses?: number | null; expiresIn?: number } = {}): Promise<string> {
    const answer = await this.call<{ value: string }>('POST', '/v2/admin/hosts/join-tokens', {
      body: {
        maxUses: options.maxUses === undefined ? 1 : options.maxUses,
        expiresIn: options.expiresIn ?? 3600,
      },
    });
    if (answer.status !== 201) throw new Error(`join token: ${answer.status} ${answer.text}`);
    return answer.body.value;
  }

  /** A user of the operators' account with `role`, and an API key with every scope. */
  async member(role: string): Promise<string> {
    const userId = newId('usr');
    await this.context.db.prisma.user.create({
      data: {
        id: userId,
        accountId: this.accountId,
        email: `${role}-${userId.slice(4, 12)}@example.com`,
        name: role,
        role,
        status: 'active',
        joinedAt: new Date(),
        createdAt: new Date(),
      },
    });
    const { KEY_SCOPES } = await import('@anvil/shared');
    const { value } = await this.context.apiKeys.issue({
      accountId: this.accountId,
      userId,
      name: `${role} key`,
      permissions: ['read', 'write'] as KeyPermission[],
      scopes: [...KEY_SCOPES] as KeyScope[],
      environment: 'live',
      createdById: null,
    });
    return value;
  }

  async host(hostId: string): Promise<HostView> {
    const answer = await this.call<{ host: HostView }>('GET', `/v2/admin/hosts/${hostId}`);
    if (answer.status !== 200) throw new Error(`host ${hostId}: ${answer.status} ${answer.text}`);
    return answer.body.host;
  }

  async workload(workloadId: string): Promise<WorkloadRecord> {
    const answer = await this.call<{ workload: WorkloadRecord }>('GET', `/v2/admin/workloads/${workloadId}`);
    if (answer.status !== 200) throw new Error(`workload ${workloadId}: ${answer.status} ${answer.text}`);
    return answer.body.workload;
  }

  /** Waits until the host is ready with its agent connected; `agent` adds its log to a time-out. */
  async readyHost(hostId: string, timeoutMs = 90_000, agent?: { summary(): string }): Promise<HostView> {
    const { waitFor } = await import('./wait.ts');
    try {
      return await waitFor(
        `host ${hostId} ready`,
        async () => {
          const host = await this.host(hostId);
          if (host.status === 'ready' && host.connected) return host;
          throw new Error(`host is ${host.status}, connected ${host.connected}`);
        },
        timeoutMs,
        250,
      );
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${agent?.summary() ?? ''}`);
    }
  }
}

/** The admin API's host, as far as these tests read it. */
export interface HostView {
  id: string;
  status: string;
  state: string;
  cordoned: boolean;
  connected: boolean;
  simulated: boolean;
  agentVersion: string | null;
  lastHeartbeatAt: string | null;
  heartbeatAgeSeconds: number | null;
  unreachableSince: string | null;
  gpus: { count: number; models: string[]; simulated: boolean; source: string | null };
  workloads: { total: number; running: number; gpusAllocated: number };
  inventory: {
    gpus: { simulated: boolean; devices: { uuid: string; name: string }[] };
    docker: { version: string | null };
  } | null;
  workloadList: { id: string; desired: string; phase: string; hostUnreachable: boolean; gpus: number[] }[];
}

export interface WorkloadRecord {
  id: string;
  hostId: string;
  desired: string;
  phase: string;
  hostUnreachable: boolean;
  actualStatus: { containerId: string | null; phase: string; ipAddress?: string | null } | null;
}
