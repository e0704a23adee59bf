import { ApiError, newId } from '@anvil/shared';
import type { Inventory } from '@anvil/shared/protocol';
import type { Clock } from '../../auth/clock.ts';
import type { Host, Prisma } from '../../db/generated/client.ts';
import { batchRowsFor, betweenStatements, type Database } from '../../db/index.ts';
import { BatchedCalls } from '../../util/batched-calls.ts';
import { sameJson } from '../../util/same-json.ts';
import { cleanJson, cleanText } from '../agents/sanitize.ts';
import { type HostEventType, hostEventFields } from './event-log.ts';
import type { FleetEvents } from './events.ts';
import {
  type GpuDeviceView,
  type GpuHealthRow,
  type GpuWork,
  gpuDevicesOf,
  gpuWorkOf,
} from './gpu-devices.ts';
import { type JoinTokenStatus, joinTokenStatus } from './join-tokens.ts';
import { generateHostCredential, hashSecret } from './secrets.ts';

/** Observed condition; `cordoned` is kept apart, as the operator's wish rather than an observation. */
export type HostState = 'registered' | 'ready' | 'unreachable';
/** One word for lists: the state, or `cordoned` for a ready host that takes no new work. */
export type HostStatus = HostState | 'cordoned';

export interface HostSummary {
  id: string;
  name: string;
  hostname: string;
  region: string | null;
  status: HostStatus;
  state: HostState;
  cordoned: boolean;
  cordonedAt: string | null;
  cordonReason: string | null;
  /** An agent socket is open on some control-plane process and heartbeats arrive. */
  connected: boolean;
  simulated: boolean;
  agentVersion: string | null;
  protocolVersion: number | null;
  lastHeartbeatAt: string | null;
  heartbeatAgeSeconds: number | null;
  unreachableSince: string | null;
  connectedAt: string | null;
  disconnectedAt: string | null;
  gpus: {
    count: number;
    models: string[];
    memoryTotalBytes: number | null;
    simulated: boolean;
    source: string | null;
    driverVersion: string | null;
    cudaVersion: string | null;
  };
  cpu: { model: string | null; cores: number | null; threads: number | null };
  memoryBytes: number | null;
  docker: { version: string | null; nvidiaRuntime: boolean; error: string | null };
  /** Each inventory GPU with its board, MIG mode, whether placement may use it, and its kept health. */
  gpuDevices: GpuDeviceView[];
  /** Whether GPU work is placed on this host at all; if not, what is missing and how to fix it. */
  gpuWork: GpuWork;
  /** What the host can enforce between tenants, as its agent reports it; null from older agents. */
  isolation: {
    network: { enforced: boolean; reason: string | null };
    diskQuota: { enforced: boolean; reason: string | null };
  } | null;
  workloads: { total: number; running: number; gpusAllocated: number };
  desiredGeneration: number;
  ackedGeneration: number | null;
  createdAt: string;
  updatedAt: string;
}

export interface HostWorkloadSummary {
  id: string;
  kind: string;
  ownerAccountId: string;
  image: string;
  desired: string;
  phase: string;
  hostUnreachable: boolean;
  gpus: number[];
}

export interface HostDetail extends HostSummary {
  inventory: Inventory | null;
  workloadList: HostWorkloadSummary[];
}

export type RegisterResult =
  | { ok: true; hostId: string; credential: string }
  | { ok: false; reason: string; tokenStatus: JoinTokenStatus | 'unknown' };

export type AuthenticateResult =
  /** previous: the credential presented is the one a renewal replaced, within its grace. */
  { ok: true; host: Host; previous?: boolean } | { ok: false; reason: string };

export interface ConnectedInput {
  replicaId: string;
  connectionId: string;
  agentVersion: string;
  protocolVersion: number;
  inventory: Inventory;
  /** The inventory the database held when the hello was authenticated; an equal one is not written again. */
  storedInventory?: unknown;
}

/** Hellos written per statement on a database server (PGlite takes fewer: batching.ts). */
const HELLO_BATCH_ROWS = 250;

/** The verdict on a presented credential, from the host holding it as current and the one holding it as previous. */
function judgeCredential(
  hostId: string,
  byCurrent: Host | undefined,
  byPrevious: Host | undefined,
  nowMs: number,
): AuthenticateResult {
  let host = byCurrent;
  let previousOne = false;
  if (!host) {
    // The credential a renewal replaced, during its grace only.
    const expires = byPrevious?.previousCredentialExpiresAt;
    if (byPrevious && expires && expires.getTime() > nowMs) {
      host = byPrevious;
      previousOne = true;
    } else if (byPrevious && byPrevious.id === hostId) {
      return {
        ok: false,
        reason: `the credential of host ${hostId} was replaced by a renewal and its grace ended at ${expires?.toISOString() ?? 'renewal'}; use the renewed credential`,
      };
    }
  }
  if (!host || host.id !== hostId) return { ok: false, reason: `unknown credential for host ${hostId}` };
  if (host.deletedAt) {
    return {
      ok: false,
      reason: `host ${hostId} was deleted; register the machine again with a new join token`,
    };
  }
  return { ok: true, host, previous: previousOne };
}

interface WorkloadLite {
  id: string;
  kind: string;
  ownerAccountId: string;
  spec: Prisma.JsonValue;
  desired: string;
  phase: string;
  hostUnreachable: boolean;
}

function specOf(spec: Prisma.JsonValue): { image: string; gpus: number[] } {
  const value = (spec ?? {}) as { image?: unknown; gpus?: unknown };
  const gpus = Array.isArray(value.gpus)
    ? value.gpus.flatMap((g) => (typeof g?.index === 'number' ? [g.index as number] : []))
    : [];
  return { image: typeof value.image === 'string' ? value.image : '', gpus };
}

/** Not running and not going to: stopped or deleted and confirmed gone. */
function isActive(workload: WorkloadLite): boolean {
  return workload.desired === 'running' || !['stopped', 'removed'].includes(workload.phase);
}

function iso(date: Date | null): string | null {
  return date ? date.toISOString() : null;
}

function summarise(
  row: Host,
  workloads: WorkloadLite[],
  now: Date,
  health: readonly GpuHealthRow[],
): HostSummary {
  const inventory = row.inventory as Inventory | null;
  const devices = inventory?.gpus?.devices ?? [];
  const memory = devices.map((d) => d.memoryTotalBytes);
  const state = row.state as HostState;
  const running = workloads.filter((w) => w.desired === 'running');
  return {
    id: row.id,
    name: row.name,
    hostname: row.hostname,
    region: row.region,
    status: state === 'ready' && row.cordoned ? 'cordoned' : state,
    state,
    cordoned: row.cordoned,
    cordonedAt: iso(row.cordonedAt),
    cordonReason: row.cordonReason,
    connected: state === 'ready' && row.connectedReplicaId !== null,
    simulated: row.simulated,
    agentVersion: row.agentVersion,
    protocolVersion: row.protocolVersion,
    lastHeartbeatAt: iso(row.lastHeartbeatAt),
    heartbeatAgeSeconds: row.lastHeartbeatAt
      ? Math.max(0, Math.round((now.getTime() - row.lastHeartbeatAt.getTime()) / 100) / 10)
      : null,
    unreachableSince: iso(row.unreachableSince),
    connectedAt: iso(row.connectedAt),
    disconnectedAt: iso(row.disconnectedAt),
    gpus: {
      count: devices.length,
      models: [...new Set(devices.map((d) => d.name))].sort(),
      memoryTotalBytes: memory.every((m) => typeof m === 'number')
        ? memory.reduce<number>((sum, m) => sum + (m ?? 0), 0)
        : null,
      simulated: row.simulated,
      source: inventory?.gpus?.source ?? null,
      driverVersion: inventory?.gpus?.driverVersion ?? null,
      cudaVersion: inventory?.gpus?.cudaVersion ?? null,
    },
    cpu: {
      model: inventory?.host?.cpu?.model ?? null,
      cores: inventory?.host?.cpu?.cores ?? null,
      threads: inventory?.host?.cpu?.threads ?? null,
    },
    memoryBytes: inventory?.host?.memoryBytes ?? null,
    docker: {
      version: inventory?.docker?.version ?? null,
      nvidiaRuntime: inventory?.docker?.nvidiaRuntime ?? false,
      error: inventory?.docker?.error ?? null,
    },
    gpuDevices: gpuDevicesOf(inventory, health),
    gpuWork: gpuWorkOf(inventory),
    isolation: inventory?.isolation ?? null,
    workloads: {
      total: workloads.filter(isActive).length,
      running: running.length,
      gpusAllocated: running.reduce((sum, w) => sum + specOf(w.spec).gpus.length, 0),
    },
    desiredGeneration: row.desiredGeneration,
    ackedGeneration: row.ackedGeneration,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

const WORKLOAD_LITE = {
  id: true,
  kind: true,
  ownerAccountId: true,
  spec: true,
  desired: true,
  phase: true,
  hostUnreachable: true,
} as const;

/**
 * The fleet of hosts: registration with a join token, authentication of every later connection by its
 * credential, liveness bookkeeping, and the operators' cordon, drain and delete. Free of HTTP and of
 * sockets: the agent gateway calls in, and hears of deletions through FleetEvents.
 */
export class HostService {
  readonly #authentications: BatchedCalls<{ hostId: string; credential: string }, AuthenticateResult>;
  readonly #connections: BatchedCalls<{ hostId: string } & ConnectedInput, undefined>;
  readonly #acks: BatchedCalls<{ hostId: string; generation: number }, undefined>;
  readonly #disconnections: BatchedCalls<{ hostId: string; connectionId: string }, undefined>;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly events: FleetEvents,
  ) {
    const rows = batchRowsFor(db.sql, HELLO_BATCH_ROWS);
    const between = () => betweenStatements(db.sql);
    this.#authentications = new BatchedCalls((items) => this.authenticateMany(items), rows, between);
    this.#connections = new BatchedCalls(
      async (items) => {
        await this.markConnectedMany(items);
        return items.map(() => undefined);
      },
      rows,
      between,
    );
    this.#disconnections = new BatchedCalls(
      async (items) => {
        await this.#markDisconnectedMany(items);
        return items.map(() => undefined);
      },
      rows,
      between,
    );
    this.#acks = new BatchedCalls(
      async (acks) => {
        await this.#recordAcks(acks);
        return acks.map(() => undefined);
      },
      rows,
      between,
    );
  }

  /**
   * Trades a join token for a new host and its credential. The token's use is counted in the same
   * transaction as the host is created, with the limit in the UPDATE's condition, so concurrent
   * registrations can never use a token more often than it allows.
   */
  async register(input: {
    joinToken: string;
    hostname: string;
    agentVersion: string;
  }): Promise<RegisterResult> {
    const now = this.clock.now();
    const hash = hashSecret(input.joinToken);
    const credential = generateHostCredential();
    const hostname = cleanText(input.hostname.trim(), 255) || 'unnamed';
    const hostId = newId('host');
    const registered = await this.db.prisma.$transaction(async (tx) => {
      const used = await tx.$queryRawUnsafe<{ id: string; region: string | null }[]>(
        `UPDATE host_join_tokens SET use_count = use_count + 1, last_used_at = $2
         WHERE hash = $1 AND revoked_at IS NULL AND expires_at > $2 AND (max_uses IS NULL OR use_count < max_uses)
         RETURNING id, region`,
        hash,
        now,
      );
      const token = used[0];
      if (!token) return false;
      await tx.host.create({
        data: {
          id: hostId,
          name: hostname,
          hostname,
          region: token.region,
          credentialHash: hashSecret(credential),
          agentVersion: cleanText(input.agentVersion, 64),
          joinTokenId: token.id,
          createdAt: now,
        },
      });
      await tx.hostEvent.create({
        data: {
          hostId,
          at: now,
          type: 'joined',
          message: `registered as ${hostname} with join token ${token.id}`,
          detail: { joinTokenId: token.id, agentVersion: cleanText(input.agentVersion, 64) },
        },
      });
      return true;
    });
    if (registered) return { ok: true, hostId, credential };

    const token = await this.db.prisma.hostJoinToken.findUnique({ where: { hash } });
    if (!token) return { ok: false, reason: 'unknown join token', tokenStatus: 'unknown' };
    const status = joinTokenStatus(token, now);
    const reasons: Record<JoinTokenStatus, string> = {
      revoked: `join token ${token.id} has been revoked`,
      expired: `join token ${token.id} expired at ${token.expiresAt.toISOString()}`,
      used_up: `join token ${token.id} has been used ${token.useCount} of ${token.maxUses} times`,
      active: `join token ${token.id} could not be used; try again`,
    };
    return { ok: false, reason: reasons[status], tokenStatus: status };
  }

  /** Checks a hello's credential: it must be this host's, and the host must not be deleted. */
  authenticate(hostId: string, credential: string): Promise<AuthenticateResult> {
    return this.#authentications.call({ hostId, credential });
  }

  /**
   * Checks many credentials in one statement (a reconnect wave: every agent of the fleet at once).
   * Each presented credential is looked up as a host's current one or, during its grace, as the one a
   * renewal replaced.
   */
  async authenticateMany(items: { hostId: string; credential: string }[]): Promise<AuthenticateResult[]> {
    const hashes = items.map((item) => hashSecret(item.credential));
    const rows = await this.db.prisma.host.findMany({
      where: { OR: [{ credentialHash: { in: hashes } }, { previousCredentialHash: { in: hashes } }] },
    });
    const byCurrent = new Map(rows.map((row) => [row.credentialHash, row]));
    const byPrevious = new Map(
      rows.flatMap((row) => (row.previousCredentialHash ? [[row.previousCredentialHash, row]] : [])),
    );
    const now = this.clock.now().getTime();
    return items.map((item, i) =>
      judgeCredential(item.hostId, byCurrent.get(hashes[i]!), byPrevious.get(hashes[i]!), now),
    );
  }

  /**
   * A new credential for a host whose agent is connected with `presented` (the current credential, or
   * the previous one within its grace): the credential it replaces keeps working for `graceMs`, then dies.
   * Renewing from the previous credential replaces the current one (the agent never stored it) and keeps
   * the earlier grace, so a lost answer cannot stretch an old credential's life.
   */
  async renewCredential(
    hostId: string,
    presented: string,
    graceMs: number,
  ): Promise<{ credential: string; issuedAt: Date; previousValidUntil: Date } | null> {
    const now = this.clock.now();
    const presentedHash = hashSecret(presented);
    const credential = generateHostCredential();
    const host = await this.db.prisma.host.findFirst({ where: { id: hostId, deletedAt: null } });
    if (!host) return null;
    let previousValidUntil: Date;
    if (host.credentialHash === presentedHash) {
      previousValidUntil = new Date(now.getTime() + graceMs);
    } else if (
      host.previousCredentialHash === presentedHash &&
      host.previousCredentialExpiresAt &&
      host.previousCredentialExpiresAt.getTime() > now.getTime()
    ) {
      previousValidUntil = host.previousCredentialExpiresAt;
    } else {
      return null;
    }
    const updated = await this.db.prisma.host.updateMany({
      // Compare-and-set: two renewals at once cannot both win.
      where: { id: hostId, credentialHash: host.credentialHash },
      data: {
        credentialHash: hashSecret(credential),
        credentialIssuedAt: now,
        previousCredentialHash: presentedHash,
        previousCredentialExpiresAt: previousValidUntil,
      },
    });
    if (updated.count !== 1) return null;
    return { credential, issuedAt: now, previousValidUntil };
  }

  /**
   * A welcomed connection: the host is ready again and its workloads are no longer marked unreachable.
   * Hellos arriving together are written together (markConnectedMany).
   */
  markConnected(hostId: string, input: ConnectedInput): Promise<void> {
    return this.#connections.call({ hostId, ...input });
  }

  /**
   * Records many welcomed connections in one statement: the hosts' connection fields, their workloads'
   * unreachable mark cleared, and a `connected` timeline entry each. An inventory equal to the one the
   * database held at authentication (an agent redialling reuses its last one) is not written again.
   */
  async markConnectedMany(items: ({ hostId: string } & ConnectedInput)[]): Promise<void> {
    // A host twice in one statement would leave which connection won to chance: one per round.
    let rest = items;
    while (rest.length > 0) {
      const seen = new Set<string>();
      const round: typeof items = [];
      const later: typeof items = [];
      for (const item of rest) {
        if (seen.has(item.hostId)) later.push(item);
        else {
          seen.add(item.hostId);
          round.push(item);
        }
      }
      await this.#markConnectedRound(round);
      rest = later;
    }
  }

  async #markConnectedRound(items: ({ hostId: string } & ConnectedInput)[]): Promise<void> {
    const now = this.clock.now().toISOString();
    const rows = items.map((item) => {
      const inventory = cleanJson(item.inventory);
      const write = item.storedInventory === undefined || !sameJson(inventory, item.storedInventory);
      const agentVersion = cleanText(item.agentVersion, 64);
      return {
        id: item.hostId,
        replica_id: item.replicaId,
        connection_id: item.connectionId,
        agent_version: agentVersion,
        protocol_version: item.protocolVersion,
        write_inventory: write,
        ...(write ? this.inventoryColumns(inventory) : {}),
      };
    });
    const connected = `state = 'ready', last_heartbeat_at = $2, unreachable_since = NULL,
           connected_replica_id = v.replica_id, connection_id = v.connection_id, connected_at = $2,
           agent_version = v.agent_version, protocol_version = v.protocol_version, updated_at = $2`;
    // Two UPDATEs, so the inventory columns are only in the statement that changes them.
    await this.db.sql.query(
      `WITH v AS (
         SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(id text, replica_id text, connection_id text,
           agent_version text, protocol_version int, write_inventory boolean, inventory jsonb, simulated boolean,
           gpu_count int, hostname text)),
       changed AS (
         UPDATE hosts h SET ${connected}, inventory = v.inventory, simulated = v.simulated,
           gpu_count = v.gpu_count, hostname = v.hostname
         FROM v WHERE h.id = v.id AND v.write_inventory RETURNING h.id),
       unchanged AS (
         UPDATE hosts h SET ${connected}
         FROM v WHERE h.id = v.id AND NOT v.write_inventory RETURNING h.id),
       cleared AS (
         UPDATE workloads SET host_unreachable = false, updated_at = $2
         WHERE host_id IN (SELECT id FROM v) AND host_unreachable),
       logged AS (
         INSERT INTO host_events (host_id, at, type, message, detail)
         SELECT v.id, $2, 'connected', 'agent ' || v.agent_version || ' connected',
                jsonb_build_object('agentVersion', v.agent_version, 'protocolVersion', v.protocol_version)
         FROM v WHERE v.id IN (SELECT id FROM changed UNION ALL SELECT id FROM unchanged))
       SELECT 1`,
      [JSON.stringify(rows), now],
    );
  }

  private inventoryColumns(inventory: Inventory) {
    return {
      inventory,
      simulated: inventory.gpus.simulated,
      gpu_count: inventory.gpus.devices.length,
      hostname: cleanText(inventory.host.hostname, 255) || 'unnamed',
    };
  }

  private inventoryFields(inventory: Inventory) {
    return {
      inventory: inventory as unknown as Prisma.InputJsonValue,
      simulated: inventory.gpus.simulated,
      gpuCount: inventory.gpus.devices.length,
      hostname: cleanText(inventory.host.hostname, 255) || 'unnamed',
    };
  }

  async updateInventory(hostId: string, inventory: Inventory): Promise<void> {
    await this.db.prisma.host.updateMany({
      where: { id: hostId, deletedAt: null },
      data: this.inventoryFields(cleanJson(inventory)),
    });
  }

  /**
   * Only the connection that holds the host clears it: a replaced connection's late close changes nothing.
   * Closes arriving together (a control plane shutting down closes every agent) are written together.
   */
  markDisconnected(hostId: string, connectionId: string): Promise<void> {
    return this.#disconnections.call({ hostId, connectionId });
  }

  async #markDisconnectedMany(items: { hostId: string; connectionId: string }[]): Promise<void> {
    const now = this.clock.now().toISOString();
    await this.db.sql.query(
      `WITH gone AS (
         UPDATE hosts h SET connected_replica_id = NULL, connection_id = NULL, disconnected_at = $3, updated_at = $3
         FROM unnest($1::text[], $2::text[]) AS x(id, connection_id)
         WHERE h.id = x.id AND h.connection_id = x.connection_id RETURNING h.id)
       INSERT INTO host_events (host_id, at, type, message) SELECT id, $3, 'disconnected', 'agent disconnected' FROM gone`,
      [items.map((i) => i.hostId), items.map((i) => i.connectionId), now],
    );
  }

  /**
   * Writes a batch of heartbeats in one statement. Returns the hosts that were unreachable and are
   * ready again (a connection whose heartbeats resumed), after clearing their workloads' mark.
   */
  async recordHeartbeats(beats: { hostId: string; at: Date }[]): Promise<string[]> {
    if (beats.length === 0) return [];
    const now = this.clock.now();
    const rows = await this.db.sql.query<{ id: string; old_state: string }>(
      `WITH beat AS (
         UPDATE hosts AS h
         SET last_heartbeat_at = GREATEST(COALESCE(h.last_heartbeat_at, s.at), s.at),
             state = 'ready', unreachable_since = NULL, updated_at = $3
         FROM (SELECT v.id, v.at, h0.state AS old_state, h0.unreachable_since
               FROM unnest($1::text[], $2::timestamptz[]) AS v(id, at) JOIN hosts h0 ON h0.id = v.id) AS s
         WHERE h.id = s.id AND h.deleted_at IS NULL
         RETURNING h.id, s.old_state, s.unreachable_since),
       logged AS (
         INSERT INTO host_events (host_id, at, type, message)
         SELECT id, $3, 'recovered', 'heartbeats resumed' FROM beat WHERE old_state = 'unreachable')
       SELECT id, old_state FROM beat`,
      [beats.map((b) => b.hostId), beats.map((b) => b.at.toISOString()), now.toISOString()],
    );
    const recovered = rows.filter((r) => r.old_state === 'unreachable').map((r) => r.id);
    if (recovered.length > 0) {
      await this.db.sql.query(
        'UPDATE workloads SET host_unreachable = false, updated_at = $2 WHERE host_id = ANY($1::text[]) AND host_unreachable',
        [recovered, now.toISOString()],
      );
    }
    return recovered;
  }

  /**
   * Marks ready hosts without a heartbeat since `cutoff` unreachable, and their workloads with them.
   * Workloads are only marked: nothing is stopped or rescheduled, and the agent keeps them running.
   * Safe to run on every replica at once: the conditions are re-checked under each row's lock. Also
   * answers the oldest heartbeat of the ready hosts left (null: none), from which the next host can go
   * silent at the earliest: the caller need not look again before then.
   */
  async markUnreachable(
    cutoff: Date,
  ): Promise<{ lost: { id: string; name: string }[]; oldestBeat: Date | null }> {
    const now = this.clock.now();
    const rows = await this.db.sql.query<{
      id: string | null;
      name: string | null;
      oldest: Date | string | null;
    }>(
      `WITH lost AS (
         UPDATE hosts SET state = 'unreachable', unreachable_since = $2, updated_at = $2
         WHERE state = 'ready' AND deleted_at IS NULL AND (last_heartbeat_at IS NULL OR last_heartbeat_at < $1)
         RETURNING id, name, last_heartbeat_at),
       logged AS (
         INSERT INTO host_events (host_id, at, type, message, detail)
         SELECT id, $2, 'unreachable', 'no heartbeat within the grace period',
                jsonb_build_object('lastHeartbeatAt', last_heartbeat_at)
         FROM lost)
       SELECT id, name, NULL::timestamptz AS oldest FROM lost
       UNION ALL
       SELECT NULL, NULL, min(last_heartbeat_at) FROM hosts
        WHERE state = 'ready' AND deleted_at IS NULL AND last_heartbeat_at >= $1`,
      [cutoff.toISOString(), now.toISOString()],
      'hosts_mark_unreachable',
    );
    const lost = rows.filter((r) => r.id !== null).map((r) => ({ id: r.id!, name: r.name ?? r.id! }));
    const oldest = rows.find((r) => r.id === null)?.oldest ?? null;
    if (lost.length > 0) {
      await this.db.sql.query(
        `UPDATE workloads SET host_unreachable = true, updated_at = $2
         WHERE host_id = ANY($1::text[]) AND NOT host_unreachable AND NOT (desired = 'deleted' AND phase = 'removed')`,
        [lost.map((h) => h.id), now.toISOString()],
      );
    }
    return { lost, oldestBeat: oldest === null ? null : new Date(oldest) };
  }

  /** The agent applied desired generation `generation` (acks arriving together are written together). */
  recordAck(hostId: string, generation: number): Promise<void> {
    return this.#acks.call({ hostId, generation });
  }

  async #recordAcks(acks: { hostId: string; generation: number }[]): Promise<void> {
    await this.db.sql.query(
      `UPDATE hosts h SET acked_generation = GREATEST(COALESCE(h.acked_generation, 0), a.generation)
       FROM (SELECT id, max(generation) AS generation FROM unnest($1::text[], $2::int[]) AS x(id, generation)
             GROUP BY id) AS a
       WHERE h.id = a.id`,
      [acks.map((a) => a.hostId), acks.map((a) => a.generation)],
    );
  }

  /** The replica and connection holding the host's socket, if it is connected and ready. */
  async connection(hostId: string): Promise<{ replicaId: string; connectionId: string } | null> {
    const host = await this.find(hostId);
    if (host.state !== 'ready' || !host.connectedReplicaId || !host.connectionId) return null;
    return { replicaId: host.connectedReplicaId, connectionId: host.connectionId };
  }

  private async find(hostId: string): Promise<Host> {
    const host = await this.db.prisma.host.findUnique({ where: { id: hostId } });
    if (!host || host.deletedAt) throw new ApiError('HOST_NOT_FOUND', `no host ${hostId}`, { hostId });
    return host;
  }

  async list(): Promise<HostSummary[]> {
    const rows = await this.db.prisma.host.findMany({
      where: { deletedAt: null },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      include: { workloads: { select: WORKLOAD_LITE }, gpuHealth: true },
    });
    const now = this.clock.now();
    return rows.map(({ workloads, gpuHealth, ...row }) => summarise(row, workloads, now, gpuHealth));
  }

  async get(hostId: string): Promise<HostDetail> {
    const host = await this.find(hostId);
    const workloads = await this.db.prisma.workload.findMany({
      where: { hostId },
      select: WORKLOAD_LITE,
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    const health = await this.db.prisma.hostGpuHealth.findMany({ where: { hostId } });
    return {
      ...summarise(host, workloads, this.clock.now(), health),
      inventory: host.inventory as Inventory | null,
      workloadList: workloads.filter(isActive).map((w) => {
        const spec = specOf(w.spec);
        return {
          id: w.id,
          kind: w.kind,
          ownerAccountId: w.ownerAccountId,
          image: spec.image,
          desired: w.desired,
          phase: w.phase,
          hostUnreachable: w.hostUnreachable,
          gpus: spec.gpus,
        };
      }),
    };
  }

  /** Nothing new is placed on a cordoned host; what runs there keeps running. */
  async cordon(hostId: string, reason: string | null): Promise<HostDetail> {
    const host = await this.find(hostId);
    const now = this.clock.now();
    const cordonReason = host.cordoned ? (reason ?? host.cordonReason) : reason;
    await this.db.prisma.$transaction([
      this.db.prisma.host.update({
        where: { id: hostId },
        data: host.cordoned ? { cordonReason } : { cordoned: true, cordonedAt: now, cordonReason },
      }),
      // A repeated cordon with the same reason changes nothing, and the timeline says nothing.
      ...(host.cordoned && cordonReason === host.cordonReason
        ? []
        : [
            this.timelineEntry(
              hostId,
              now,
              'cordoned',
              cordonReason ? `cordoned: ${cordonReason}` : 'cordoned',
              { reason: cordonReason },
            ),
          ]),
    ]);
    return this.get(hostId);
  }

  async uncordon(hostId: string): Promise<HostDetail> {
    const host = await this.find(hostId);
    const now = this.clock.now();
    await this.db.prisma.$transaction([
      this.db.prisma.host.update({
        where: { id: hostId },
        data: { cordoned: false, cordonedAt: null, cordonReason: null },
      }),
      ...(host.cordoned ? [this.timelineEntry(hostId, now, 'uncordoned', 'uncordoned', null)] : []),
    ]);
    return this.get(hostId);
  }

  private timelineEntry(
    hostId: string,
    at: Date,
    type: HostEventType,
    message: string,
    detail: Record<string, unknown> | null,
  ) {
    const clean = hostEventFields(message, detail);
    return this.db.prisma.hostEvent.create({
      data: {
        hostId,
        at,
        type,
        message: clean.message,
        ...(clean.detail === null ? {} : { detail: clean.detail as Prisma.InputJsonValue }),
      },
    });
  }

  /**
   * Drain: cordon, and report what still runs. Nothing is moved or stopped by force; the workloads'
   * owners (or the operator) stop them, and the host is empty once `remaining` is.
   */
  async drain(
    hostId: string,
    reason: string | null,
  ): Promise<{ host: HostDetail; remaining: HostWorkloadSummary[] }> {
    const host = await this.cordon(hostId, reason ?? 'draining');
    return { host, remaining: host.workloadList };
  }

  /**
   * Deletes a host: its credential stops working at once and its connection is closed. A host with
   * workloads that are not yet gone is refused unless `force`, which marks them deleted with it.
   */
  async delete(hostId: string, force: boolean): Promise<HostDetail> {
    const detail = await this.get(hostId);
    if (detail.workloadList.length > 0 && !force) {
      throw new ApiError(
        'HOST_HAS_WORKLOADS',
        `host ${hostId} still has ${detail.workloadList.length} workload(s); stop them first or pass force=true`,
        { hostId, workloads: detail.workloadList.map((w) => w.id) },
      );
    }
    const now = this.clock.now();
    await this.db.prisma.$transaction([
      this.db.prisma.workload.updateMany({
        where: { hostId, NOT: { desired: 'deleted', phase: 'removed' } },
        data: { desired: 'deleted', phase: 'removed' },
      }),
      this.db.prisma.host.update({
        where: { id: hostId },
        data: { deletedAt: now, connectedReplicaId: null, connectionId: null, disconnectedAt: now },
      }),
      this.timelineEntry(hostId, now, 'deleted', force ? 'deleted (forced)' : 'deleted', { force }),
    ]);
    await this.events.hostDeleted(hostId);
    const host = await this.db.prisma.host.findUniqueOrThrow({ where: { id: hostId } });
    return { ...detail, ...summarise(host, [], now, []), workloadList: [] };
  }
}
