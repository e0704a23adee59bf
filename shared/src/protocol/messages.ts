import { type Static, type TProperties, type TSchema, Type } from '@sinclair/typebox';
import { EpochMs, Nullable, WorkloadId } from './common.ts';
import { VolumePath } from './files.ts';
import { Inventory } from './inventory.ts';
import { LogEntry, LogLoss, LogsComplete } from './logs.ts';
import { MetricSample } from './metrics.ts';
import { TunnelId, TunnelTarget, TunnelToken } from './tunnel.ts';
import { WorkloadSpec, WorkloadStatus } from './workload.ts';

/**
 * Every frame is one JSON envelope `{ v, type, id, ...body }`:
 * - v: the sender's protocol version (see version.ts);
 * - type: one of the names below;
 * - id: unique per sender; an answer (registered, welcome, refusal, heartbeat_ack, reply) carries the
 *   id of the message it answers, which is how requests and replies are paired.
 */
const MessageId = Type.String({ minLength: 1, maxLength: 128 });

function envelope<T extends string, P extends TProperties>(type: T, body: P) {
  return Type.Object({ v: Type.Integer({ minimum: 0 }), type: Type.Literal(type), id: MessageId, ...body });
}

// ---- refusal: either side, frozen across protocol versions so mismatched peers can always explain.

export const REFUSAL_CODES = [
  'protocol_incompatible',
  'join_token_invalid',
  'credential_invalid',
  'host_already_connected',
  'bad_message',
  'handshake_timeout',
  'server_shutting_down',
  'internal_error',
] as const;
export type RefusalCode = (typeof REFUSAL_CODES)[number];

/** Refusals that redialling cannot fix: the agent stops and exits non-zero. */
export const FATAL_REFUSALS: ReadonlySet<string> = new Set<RefusalCode>([
  'protocol_incompatible',
  'join_token_invalid',
  'credential_invalid',
]);

export const Refusal = envelope('refusal', {
  /** A RefusalCode; kept a plain string so a newer peer's new code still decodes. */
  code: Type.String({ minLength: 1, maxLength: 64 }),
  reason: Type.String({ maxLength: 1024 }),
  /** False when redialling cannot help; the sender closes the socket after a refusal either way. */
  retryable: Type.Boolean(),
  supportedVersions: Nullable(Type.Object({ min: Type.Integer(), max: Type.Integer() })),
});

// ---- agent -> control plane

/** First contact: trade a one-time join token for a long-lived host credential. Answered by `registered`. */
export const Register = envelope('register', {
  joinToken: Type.String({ minLength: 1, maxLength: 512 }),
  hostname: Type.String({ maxLength: 255 }),
  agentVersion: Type.String({ maxLength: 64 }),
});

/** Every connection after registration opens with hello. Answered by `welcome` or `refusal`. */
export const Hello = envelope('hello', {
  agentVersion: Type.String({ maxLength: 64 }),
  hostId: Type.String({ minLength: 1, maxLength: 128 }),
  credential: Type.String({ minLength: 1, maxLength: 512 }),
  inventory: Inventory,
});

/** Sent every `heartbeatSeconds`; answered by `heartbeat_ack`, whose round trip the agent measures. */
export const Heartbeat = envelope('heartbeat', {
  seq: Type.Integer({ minimum: 0 }),
  sentAt: EpochMs,
  uptimeSeconds: Type.Number({ minimum: 0 }),
});

export const ReplyError = Type.Object({ code: Type.String(), message: Type.String() });

/** The answer to a `command` or `desired_state`, carrying its id. */
export const Reply = Type.Union([
  envelope('reply', { ok: Type.Literal(true), result: Type.Unknown() }),
  envelope('reply', { ok: Type.Literal(false), error: ReplyError }),
]);

/** Full report of every desired workload, after each reconcile pass that changed something and on resync. */
export const ActualState = envelope('actual_state', {
  /** The desired_state generation this report converges to; null before any desired set arrived. */
  generation: Nullable(Type.Integer({ minimum: 0 })),
  workloads: Type.Array(WorkloadStatus),
});

/** One workload changed: started, exited, failed, removed. */
export const ContainerState = envelope('container_state', {
  workloadId: WorkloadId,
  containerId: Nullable(Type.String()),
  /** A WorkloadPhase, or `removed` when the agent removed a container no longer desired. */
  phase: Type.String(),
  containerState: Nullable(Type.String()),
  exitCode: Nullable(Type.Integer()),
  error: Nullable(Type.String()),
  /**
   * When the container last started (Docker's State.StartedAt), so what bills from a container's start
   * opens with the change that says it runs (optional: older agents send none).
   */
  startedAt: Type.Optional(Nullable(Type.String())),
  at: EpochMs,
});

export const LogBatch = envelope('log_batch', {
  entries: Type.Array(LogEntry),
  /** Containers whose last line is in this batch or an earlier one (optional: older agents send none). */
  complete: Type.Optional(Type.Array(LogsComplete)),
});

/** Lines the agent had to drop because its bounded buffer was full while it could not send. */
export const LogsDropped = envelope('logs_dropped', { losses: Type.Array(LogLoss) });

export const MetricBatch = envelope('metric_batch', {
  samples: Type.Array(MetricSample),
  /** Samples dropped since the previous batch because the buffer was full. */
  dropped: Type.Integer({ minimum: 0 }),
});

export const PullProgress = envelope('pull_progress', {
  image: Type.String(),
  workloadId: Nullable(WorkloadId),
  status: Type.String(),
  layer: Nullable(Type.String()),
  current: Nullable(Type.Number()),
  total: Nullable(Type.Number()),
  done: Type.Boolean(),
  error: Nullable(Type.String()),
});

/** A fresh inventory, sent when asked by the `resync` command. */
export const InventoryUpdate = envelope('inventory', { inventory: Inventory });

// ---- control plane -> agent

export const Registered = envelope('registered', {
  hostId: Type.String({ minLength: 1, maxLength: 128 }),
  /** Secret; the agent stores it with mode 0600 and presents it in every later hello. */
  credential: Type.String({ minLength: 1, maxLength: 512 }),
});

export const Welcome = envelope('welcome', {
  hostId: Type.String({ minLength: 1, maxLength: 128 }),
  heartbeatSeconds: Type.Integer({ minimum: 1, maximum: 3600 }),
  metricsSeconds: Type.Integer({ minimum: 1, maximum: 3600 }),
  serverVersion: Type.String({ maxLength: 64 }),
  serverTime: EpochMs,
  /**
   * Optional (absent from control planes that cannot rotate credentials, so no version bump): the agent
   * renews its credential (`renew_credential`) once it is this old, counted from `credentialIssuedAt`.
   */
  credentialRenewSeconds: Type.Optional(Type.Integer({ minimum: 1 })),
  /** When the credential this hello presented was issued (ms); with credentialRenewSeconds. */
  credentialIssuedAt: Type.Optional(EpochMs),
});

/**
 * The agent asks for a new host credential (only after welcome, only where welcome carried
 * credentialRenewSeconds). Answered by `credential_renewed` with the same id, or `reply` with an error.
 */
export const RenewCredential = envelope('renew_credential', {});

/**
 * The new credential: the agent stores it (atomically) and presents it from its next hello on. The one
 * it replaces keeps working until `previousValidUntil`, then is refused.
 */
export const CredentialRenewed = envelope('credential_renewed', {
  hostId: Type.String({ minLength: 1, maxLength: 128 }),
  credential: Type.String({ minLength: 1, maxLength: 512 }),
  issuedAt: EpochMs,
  previousValidUntil: EpochMs,
});

export const HeartbeatAck = envelope('heartbeat_ack', {
  seq: Type.Integer({ minimum: 0 }),
  receivedAt: EpochMs,
});

/** The whole set of workloads this host should run. Sent after welcome and on every change; answered by `reply`. */
export const DesiredState = envelope('desired_state', {
  /** Increases with every change, so a late message never rolls the host back. */
  generation: Type.Integer({ minimum: 0 }),
  workloads: Type.Array(WorkloadSpec),
});

export const CommandBody = Type.Union([
  Type.Object({ name: Type.Literal('ping') }),
  Type.Object({
    name: Type.Literal('set_intervals'),
    heartbeatSeconds: Nullable(Type.Integer({ minimum: 1, maximum: 3600 })),
    metricsSeconds: Nullable(Type.Integer({ minimum: 1, maximum: 3600 })),
  }),
  /** Re-send inventory and actual state. */
  Type.Object({ name: Type.Literal('resync') }),
  Type.Object({ name: Type.Literal('inspect_workload'), workloadId: WorkloadId }),
  /**
   * Open a reverse tunnel into the workload's container (tunnel.ts): the agent connects the target,
   * dials AGENT_TUNNEL_PATH with its credential and this one-time token, and replies once the tunnel
   * socket is open (an error reply when the port refuses, the exec fails or the socket is refused).
   */
  Type.Object({
    name: Type.Literal('open_tunnel'),
    tunnelId: TunnelId,
    token: TunnelToken,
    workloadId: WorkloadId,
    target: TunnelTarget,
    /**
     * The asking control-plane process's own address (its ANVIL_REPLICA_URL), where the tunnel must land:
     * behind a load balancer the agent's control-plane URL reaches any replica, and only the one that asked
     * holds the ticket. Absent: the agent's control-plane URL. The same plain-text rule applies as to it.
     */
    dialUrl: Type.Optional(Type.String({ minLength: 1, maxLength: 2000 })),
  }),
  /**
   * Sends a signal to the workload's container (the cluster stop's notifying_processes phase). Answers
   * {containerId, signalled}: signalled is false when no container is running.
   */
  Type.Object({
    name: Type.Literal('signal_workload'),
    workloadId: WorkloadId,
    signal: Type.Union(['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGKILL'].map((s) => Type.Literal(s))),
  }),
  /**
   * `docker commit` of the workload's container (running or exited) as repository:tag (a snapshot).
   * Answers {imageId, repository, tag, sizeBytes}.
   */
  Type.Object({
    name: Type.Literal('commit_workload'),
    workloadId: WorkloadId,
    repository: Type.String({ pattern: '^[a-z0-9]+([._/-][a-z0-9]+)*$', maxLength: 200 }),
    tag: Type.String({ pattern: '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$' }),
    comment: Nullable(Type.String({ maxLength: 1000 })),
    /**
     * Keep the workload's volume in the snapshot too (a final snapshot: the volume is deleted next): its
     * files become a layer at the mount path, and a workload created from the image starts with them.
     */
    includeVolume: Type.Optional(Type.Boolean()),
  }),
  /**
   * What a path in the workload's volume is (files.ts FileStat); `hash`: with the SHA-256 of a regular
   * file. Refused when the workload is not this host's or the path leaves its volume.
   */
  Type.Object({
    name: Type.Literal('stat_file'),
    workloadId: WorkloadId,
    path: VolumePath,
    hash: Type.Boolean(),
  }),
  /** Deletes a file or directory in the workload's volume (symlinks removed, never followed). Answers {removed, sizeBytes}. */
  Type.Object({ name: Type.Literal('delete_file'), workloadId: WorkloadId, path: VolumePath }),
  /** Deletes the workload's volume directory (its container must be gone or stopped). Answers {removed}. */
  Type.Object({ name: Type.Literal('remove_volume'), workloadId: WorkloadId }),
  /**
   * Removes the workload's snapshots: images tagged `repository:*` whose `anvil.workload` label (kept
   * from the container by docker commit) names the workload, except the image ids in `keep`. Never
   * forced: an image a container still uses stays and is reported as failed. Answers {removed, failed,
   * kept}, each a list of {imageId, tags} (failed also with error).
   */
  Type.Object({
    name: Type.Literal('remove_snapshots'),
    workloadId: WorkloadId,
    repository: Type.String({ pattern: '^[a-z0-9]+([._/-][a-z0-9]+)*$', maxLength: 200 }),
    keep: Type.Array(Type.String({ maxLength: 200 }), { maxItems: 100 }),
    /** When given, only these image ids are removed (one snapshot deleted); the rest are left alone. */
    only: Type.Optional(Type.Array(Type.String({ maxLength: 200 }), { maxItems: 100 })),
  }),
  /**
   * The workload's snapshots on this host: images tagged `repository:*` whose `anvil.workload` label
   * names the workload. Answers {images: [{imageId, tags, sizeBytes, createdAt}]}.
   */
  Type.Object({
    name: Type.Literal('list_snapshots'),
    workloadId: WorkloadId,
    repository: Type.String({ pattern: '^[a-z0-9]+([._/-][a-z0-9]+)*$', maxLength: 200 }),
  }),
  /**
   * Run another agent version: download the artifact at `path` (under AGENT_ARTIFACTS_PATH on the
   * control plane), check its SHA-256, unpack it beside the running one, switch the install's `current`
   * link and, once the reply is sent, exit so systemd starts the new version. Containers keep running.
   * Answers {version, previous, installDir}; an error when the agent was not installed from an artifact.
   */
  Type.Object({
    name: Type.Literal('upgrade_agent'),
    version: Type.String({ pattern: '^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$' }),
    path: Type.String({ pattern: '^/agent/artifacts/[^?#]+$', maxLength: 300 }),
    sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
    sizeBytes: Type.Integer({ minimum: 1 }),
  }),
]);
export type CommandBody = Static<typeof CommandBody>;

/** A request answered by `reply` with the same id. */
export const Command = envelope('command', { command: CommandBody });

/** Messages an agent sends, by type. */
export const AGENT_MESSAGES = {
  register: Register,
  hello: Hello,
  heartbeat: Heartbeat,
  reply: Reply,
  actual_state: ActualState,
  container_state: ContainerState,
  log_batch: LogBatch,
  logs_dropped: LogsDropped,
  metric_batch: MetricBatch,
  pull_progress: PullProgress,
  inventory: InventoryUpdate,
  refusal: Refusal,
  renew_credential: RenewCredential,
} as const;

/** Messages the control plane sends, by type. */
export const CONTROL_PLANE_MESSAGES = {
  registered: Registered,
  welcome: Welcome,
  refusal: Refusal,
  heartbeat_ack: HeartbeatAck,
  desired_state: DesiredState,
  command: Command,
  credential_renewed: CredentialRenewed,
} as const;

type StaticOf<R> = { [K in keyof R]: R[K] extends TSchema ? Static<R[K]> : never };
export type AgentMessage = StaticOf<typeof AGENT_MESSAGES>[keyof typeof AGENT_MESSAGES];
export type ControlPlaneMessage = StaticOf<
  typeof CONTROL_PLANE_MESSAGES
>[keyof typeof CONTROL_PLANE_MESSAGES];
export type AnyMessage = AgentMessage | ControlPlaneMessage;
export type MessageType = AnyMessage['type'];
export type MessageOf<T extends MessageType> = Extract<AnyMessage, { type: T }>;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** A message without its envelope fields, as callers build it. */
export type BodyOf<T extends MessageType> = DistributiveOmit<MessageOf<T>, 'v' | 'type' | 'id'>;
