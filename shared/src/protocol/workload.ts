import { type Static, Type } from '@sinclair/typebox';
import { EpochMs, Nullable, WorkloadId } from './common.ts';

export const PortBinding = Type.Object({
  containerPort: Type.Integer({ minimum: 1, maximum: 65535 }),
  protocol: Type.Union([Type.Literal('tcp'), Type.Literal('udp')]),
  /** null lets Docker pick a free host port; the actual one is reported in WorkloadStatus.ports. */
  hostPort: Nullable(Type.Integer({ minimum: 1, maximum: 65535 })),
  hostIp: Nullable(Type.String()),
});
export type PortBinding = Static<typeof PortBinding>;

export const RESTART_POLICIES = ['no', 'always', 'unless-stopped', 'on-failure'] as const;
export type RestartPolicyName = (typeof RESTART_POLICIES)[number];

export const RestartPolicy = Type.Object({
  name: Type.Union(RESTART_POLICIES.map((p) => Type.Literal(p))),
  /** Only meaningful with on-failure. */
  maxRetries: Type.Integer({ minimum: 0 }),
});

export const GpuAssignment = Type.Object({
  index: Type.Integer({ minimum: 0 }),
  uuid: Type.String({ minLength: 1 }),
});

/** A file written into the container: absolute path, numeric mode (0o400), content in base64. */
export const SecretFile = Type.Object({
  path: Type.String({ pattern: '^/', maxLength: 255 }),
  mode: Type.Integer({ minimum: 0, maximum: 0o7777 }),
  contentBase64: Type.String(),
});
export type SecretFile = Static<typeof SecretFile>;

/**
 * A file the agent fetches from the control plane before it creates the container (AGENT_DOWNLOAD_PATH
 * and below, with the host credential), checks against `sha256` and `sizeBytes`, keeps once per digest
 * in its download cache, and bind-mounts read-only at `containerPath`. For bytes too large for the
 * desired set, which is one WebSocket frame (a training dataset).
 */
export const WorkloadDownload = Type.Object({
  /** Path on the control plane, under AGENT_DOWNLOAD_PATH. */
  path: Type.String({ pattern: '^/agent/v1/downloads/', maxLength: 1024 }),
  sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  sizeBytes: Type.Integer({ minimum: 0 }),
  containerPath: Type.String({ pattern: '^/', maxLength: 255 }),
});
export type WorkloadDownload = Static<typeof WorkloadDownload>;

/** What the agent hands Docker for one pull (the X-Registry-Auth of the engine's API). */
export const RegistryAuth = Type.Object({
  serverAddress: Type.String({ minLength: 1, maxLength: 255 }),
  username: Type.String({ maxLength: 255 }),
  password: Type.String({ maxLength: 4096 }),
});
export type RegistryAuth = Static<typeof RegistryAuth>;

/**
 * The cross-host path of a multi-host training gang (README: Training, multi-node). `publish`: container
 * ports published on the host's rendezvous address (ANVIL_RENDEZVOUS_ADDRESS), same port on the host,
 * admitted only from `peers` (the gang's other hosts' rendezvous addresses). `dial`: the endpoints this
 * container may open connections to on other hosts; the host's other accounts may not reach them.
 */
export const RendezvousSpec = Type.Object({
  publish: Type.Array(Type.Integer({ minimum: 1, maximum: 65535 }), { maxItems: 16 }),
  peers: Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 64 }),
  dial: Type.Array(
    Type.Object({
      address: Type.String({ minLength: 1, maxLength: 64 }),
      port: Type.Integer({ minimum: 1, maximum: 65535 }),
    }),
    { maxItems: 64 },
  ),
});
export type RendezvousSpec = Static<typeof RendezvousSpec>;

/** What the control plane wants running: one container per workload id. */
export const WorkloadSpec = Type.Object({
  workloadId: WorkloadId,
  image: Type.String({ minLength: 1, maxLength: 512 }),
  /** Overrides the image's CMD; null keeps it. */
  command: Nullable(Type.Array(Type.String())),
  /** Overrides the image's ENTRYPOINT; null keeps it. */
  entrypoint: Nullable(Type.Array(Type.String())),
  env: Type.Record(Type.String({ pattern: '^[^=]+$' }), Type.String()),
  /** Extra labels; the agent's own `anvil.managed`, `anvil.workload`, `anvil.host` always win. */
  labels: Type.Record(Type.String(), Type.String()),
  gpus: Type.Array(GpuAssignment),
  /** CPU limit in cores (1.5 = one and a half cores); null is unlimited. */
  cpus: Nullable(Type.Number({ exclusiveMinimum: 0 })),
  memoryBytes: Nullable(Type.Integer({ minimum: 6 * 1024 * 1024 })),
  shmBytes: Nullable(Type.Integer({ minimum: 1 })),
  ports: Type.Array(PortBinding),
  /** A per-workload directory under the agent's volume root, mounted at containerPath. */
  volume: Nullable(Type.Object({ containerPath: Type.String({ pattern: '^/' }) })),
  restartPolicy: RestartPolicy,
  /** Seconds between SIGTERM and SIGKILL when the container is stopped. */
  stopGraceSeconds: Type.Integer({ minimum: 0, maximum: 3600 }),
  /**
   * Secret env variables, merged into `env` when the container is created. Filled by the control plane
   * as it sends the desired set (never stored) and left out of the spec hash: a changed value reaches
   * the container at its next creation, it does not recreate a running one.
   */
  secretEnv: Type.Optional(Type.Record(Type.String({ pattern: '^[^=]+$' }), Type.String())),
  /**
   * Secret files, written into the container before each start (parent directories created as
   * needed, owned by root). Like secretEnv: never stored, not part of the spec hash.
   */
  files: Type.Optional(Type.Array(SecretFile)),
  /**
   * Files fetched from the control plane and mounted read-only (WorkloadDownload). Like files, not part
   * of the spec hash: a new version reaches the container at its next creation, not by recreating it.
   */
  downloads: Type.Optional(Type.Array(WorkloadDownload, { maxItems: 16 })),
  /**
   * The owning account: the agent puts the container on that account's own network on this host
   * (`anvil-acct-<accountId>`), which no other account's container and none of the host's own addresses
   * can be reached from. Absent (an older control plane): the workload gets a network of its own.
   */
  accountId: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' })),
  /** Most processes (threads included) the container may hold: a fork bomb stops there. null: the agent's default. */
  pidsLimit: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
  /**
   * The workload's disk (storage_gb): its volume plus its writable layer. The agent measures both and
   * bounds the writable layer where the engine can (see DiskQuotaInventory); over it, the status says so.
   */
  diskBytes: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
  /**
   * Credentials for pulling `image`, from the owning account's registry settings when the image's
   * registry host matches one. Like secretEnv: filled as the desired set is sent (never stored), not part
   * of the spec hash, never logged. null or absent: the image is pulled anonymously.
   */
  registryAuth: Type.Optional(Nullable(RegistryAuth)),
  /** A multi-host training worker's cross-host path (RendezvousSpec); absent or null: none. */
  rendezvous: Type.Optional(Nullable(RendezvousSpec)),
  /**
   * The container reaches the control plane's worker API (AGENT_WORKER_API_PATH) through the agent: the
   * agent serves a port on the host, answers only its own containers there, and relays each connection
   * over a raw upgrade at AGENT_WORKER_API_PATH. `urlEnv` names env variables the agent sets to that
   * address (`http://<WORKER_API_HOST>:<port>`) followed by the given path. Part of the spec hash.
   */
  workerApi: Type.Optional(
    Type.Object({
      urlEnv: Type.Record(
        Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }),
        Type.String({ pattern: '^/', maxLength: 1024 }),
      ),
    }),
  ),
});
export type WorkloadSpec = Static<typeof WorkloadSpec>;

/**
 * Where a spec's secrets sit in a logged object, alone or in a desired set (pino redact paths): the
 * control plane and the agent redact them both, should a spec or message ever be logged.
 */
export const WORKLOAD_SECRET_LOG_PATHS: readonly string[] = [
  '*.secretEnv',
  '*.files[*].contentBase64',
  '*.workloads[*].secretEnv',
  '*.workloads[*].files[*].contentBase64',
  '*.registryAuth',
  '*.workloads[*].registryAuth',
];

/**
 * pending: nothing done yet; pulling: image being pulled; running; exited: ran and stopped on its own
 * (and its restart policy does not bring it back); failed: the agent could not create or start it
 * (error says why, e.g. the image could not be pulled).
 */
export const WORKLOAD_PHASES = ['pending', 'pulling', 'running', 'exited', 'failed'] as const;
export type WorkloadPhase = (typeof WORKLOAD_PHASES)[number];

export const ActualPort = Type.Object({
  containerPort: Type.Integer(),
  protocol: Type.String(),
  hostIp: Type.String(),
  hostPort: Type.Integer(),
});

/** What actually runs for one desired workload. */
export const WorkloadStatus = Type.Object({
  workloadId: WorkloadId,
  phase: Type.Union(WORKLOAD_PHASES.map((p) => Type.Literal(p))),
  containerId: Nullable(Type.String()),
  /** Docker's own word: created, running, restarting, exited, dead, ... */
  containerState: Nullable(Type.String()),
  exitCode: Nullable(Type.Integer()),
  error: Nullable(Type.String()),
  startedAt: Nullable(Type.String()),
  finishedAt: Nullable(Type.String()),
  restartCount: Nullable(Type.Integer({ minimum: 0 })),
  /** Address on the Docker network, used later for tunnels without host ports. */
  ipAddress: Nullable(Type.String()),
  ports: Type.Array(ActualPort),
  /**
   * Disk in use by the workload (writable layer plus volume, bytes) as last measured by the agent, and
   * its bound (spec.diskBytes); absent or null when not measured yet.
   */
  diskUsedBytes: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
  diskLimitBytes: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
  /**
   * While phase is `pulling`: bytes of the image's layers downloaded so far, and their total once Docker
   * has announced every layer's size (null before that). Absent or null in every other phase.
   */
  pullProgress: Type.Optional(
    Nullable(
      Type.Object({
        bytesDone: Type.Integer({ minimum: 0 }),
        bytesTotal: Nullable(Type.Integer({ minimum: 0 })),
      }),
    ),
  ),
  at: EpochMs,
});
export type WorkloadStatus = Static<typeof WorkloadStatus>;
