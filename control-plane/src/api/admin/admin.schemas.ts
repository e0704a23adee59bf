import { Inventory, WorkloadSpec } from '@anvil/shared/protocol';
import { type TSchema, Type } from '@sinclair/typebox';
import { CLUSTER_STATUSES } from '../../clusters/requests.ts';
import { MAX_INT32, MAX_SEQUENCE } from '../bounds.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });

export const JoinTokenRecord = Type.Object(
  {
    id: Type.String({ description: 'jt_<id>' }),
    description: Nullable(Type.String()),
    prefix: Type.String({ description: 'The first characters of the value, to recognise the token' }),
    region: Nullable(Type.String({ description: 'Region label given to hosts that register with it' })),
    maxUses: Nullable(
      Type.Integer({ description: '1 = single use; null = any number of uses until expiry' }),
    ),
    useCount: Type.Integer(),
    remainingUses: Nullable(Type.Integer()),
    status: Type.Union([
      Type.Literal('active'),
      Type.Literal('expired'),
      Type.Literal('revoked'),
      Type.Literal('used_up'),
    ]),
    expiresAt: DateTime,
    revokedAt: Nullable(DateTime),
    lastUsedAt: Nullable(DateTime),
    createdAt: DateTime,
    createdByUserId: Nullable(Type.String()),
    createdByKeyId: Nullable(Type.String()),
  },
  { $id: 'HostJoinToken' },
);

export const CreateJoinTokenBody = Type.Object(
  {
    description: Type.Optional(Type.String({ maxLength: 500 })),
    maxUses: Type.Optional(
      Nullable(
        Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          description: 'Default 1 (single use). null: any number of hosts may register until expiry.',
        }),
      ),
    ),
    expiresIn: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 31_536_000,
        description: 'Seconds until the token expires (default 86400). Not with expiresAt.',
      }),
    ),
    expiresAt: Type.Optional(
      Type.String({ format: 'date-time', description: 'ISO 8601, at most a year ahead' }),
    ),
    region: Type.Optional(Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9][a-z0-9-]*$' })),
  },
  { additionalProperties: false },
);

export const CreatedJoinToken = Type.Object({
  token: Type.Ref('HostJoinToken'),
  value: Type.String({ description: 'The token itself. Shown once: only its hash is stored.' }),
  installCommand: Type.String({ description: 'How to install the agent on a server with this token' }),
  message: Type.String(),
});

export const JoinTokenIdParams = Type.Object({ token_id: Type.String({ maxLength: 64 }) });
export const HostIdParams = Type.Object({ host_id: Type.String({ maxLength: 64 }) });
export const HostGpuParams = Type.Object({
  host_id: Type.String({ maxLength: 64 }),
  index: Type.Integer({
    minimum: 0,
    maximum: 1023,
    description: 'The GPU index as NVML numbers it on the host',
  }),
});
export const WorkloadIdParams = Type.Object({ workload_id: Type.String({ maxLength: 128 }) });

const GpuHealthReasonRecord = Type.Object({
  code: Type.String({ description: 'xid_<n>, ecc_uncorrected_volatile, row_remap_failure, gpu_lost, ...' }),
  severity: Type.Union([Type.Literal('degraded'), Type.Literal('failed')]),
  message: Type.String(),
  source: Type.String({ description: 'The NVML call the evidence came from' }),
  since: Type.Number({ description: 'Epoch ms the agent first saw it' }),
});

export const GpuDeviceRecord = Type.Object({
  index: Type.Integer(),
  uuid: Type.String(),
  name: Type.String({ description: 'As NVML names it' }),
  boardType: Nullable(
    Type.String({ description: 'The catalogue board ("H100 SXM"); null when not in the catalogue' }),
  ),
  gpuType: Nullable(
    Type.String({ description: 'The gpu_type that asks for this board; null when none does' }),
  ),
  migEnabled: Nullable(
    Type.Boolean({ description: 'MIG mode on: not offered as a whole GPU. null: unknown' }),
  ),
  schedulable: Type.Boolean({
    description:
      'Placement may use it: a catalogue board, not in MIG mode, not failed, on a host offered GPU work',
  }),
  health: Nullable(
    Type.Object({
      state: Type.Union([Type.Literal('healthy'), Type.Literal('degraded'), Type.Literal('failed')]),
      reasons: Type.Array(GpuHealthReasonRecord),
      since: DateTime,
    }),
  ),
});

const HostFields = {
  id: Type.String({ description: 'host_<id>' }),
  name: Type.String(),
  hostname: Type.String(),
  region: Nullable(Type.String()),
  status: Type.Union(
    [
      Type.Literal('registered'),
      Type.Literal('ready'),
      Type.Literal('unreachable'),
      Type.Literal('cordoned'),
    ],
    { description: 'state, or cordoned for a ready host that takes no new work' },
  ),
  state: Type.Union([Type.Literal('registered'), Type.Literal('ready'), Type.Literal('unreachable')], {
    description:
      'registered: has a credential, never connected; ready: heartbeats arrive; unreachable: none within the grace period',
  }),
  cordoned: Type.Boolean(),
  cordonedAt: Nullable(DateTime),
  cordonReason: Nullable(Type.String()),
  connected: Type.Boolean({
    description: 'The agent is connected to a control-plane process and heartbeating',
  }),
  simulated: Type.Boolean({
    description: 'The GPU inventory was declared with --simulate-gpus: no real devices',
  }),
  agentVersion: Nullable(Type.String()),
  protocolVersion: Nullable(Type.Integer()),
  lastHeartbeatAt: Nullable(DateTime),
  heartbeatAgeSeconds: Nullable(Type.Number()),
  unreachableSince: Nullable(DateTime),
  connectedAt: Nullable(DateTime),
  disconnectedAt: Nullable(DateTime),
  gpus: Type.Object({
    count: Type.Integer(),
    models: Type.Array(Type.String()),
    memoryTotalBytes: Nullable(Type.Number()),
    simulated: Type.Boolean(),
    source: Nullable(Type.String({ description: 'nvml, nvidia-smi, simulated or none' })),
    driverVersion: Nullable(Type.String()),
    cudaVersion: Nullable(Type.String()),
  }),
  cpu: Type.Object({
    model: Nullable(Type.String()),
    cores: Nullable(Type.Integer()),
    threads: Nullable(Type.Integer()),
  }),
  memoryBytes: Nullable(Type.Number()),
  docker: Type.Object({
    version: Nullable(Type.String()),
    nvidiaRuntime: Type.Boolean(),
    error: Nullable(Type.String()),
  }),
  gpuDevices: Type.Array(GpuDeviceRecord, {
    description:
      'Each inventory GPU: its board in the catalogue (boardType, and the gpu_type customers ask for), MIG mode, ' +
      'whether placement may use it as a whole GPU, and its kept health (the worst state the agent reported ' +
      'since the last reset: POST /v2/admin/hosts/{host_id}/gpus/{index}/reset-health). health is null while ' +
      'the agent has sent no health for the GPU (older agents, simulated GPUs).',
  }),
  gpuWork: Type.Object(
    { offered: Type.Boolean(), reason: Nullable(Type.String()) },
    {
      description:
        'Whether GPU work is placed on this host at all. A host with real GPUs whose Docker has no NVIDIA ' +
        'container runtime is not offered any: reason says what is missing and how to fix it.',
    },
  ),
  isolation: Nullable(
    Type.Object(
      {
        network: Type.Object({ enforced: Type.Boolean(), reason: Nullable(Type.String()) }),
        diskQuota: Type.Object({ enforced: Type.Boolean(), reason: Nullable(Type.String()) }),
      },
      {
        description:
          "Tenant isolation the host enforces (agent's report): network = its iptables rules fence each account's " +
          'network; diskQuota = the engine bounds writable layers (overlay2 on xfs with pquota). Where not ' +
          'enforced, reason says why: storage_gb is then measured only, and a host without network ' +
          'isolation must not be shared between accounts. null: an agent older than tenant isolation.',
      },
    ),
  ),
  workloads: Type.Object(
    { total: Type.Integer(), running: Type.Integer(), gpusAllocated: Type.Integer() },
    { description: 'Allocations: workloads not yet gone, those desired running, and the GPUs they hold' },
  ),
  desiredGeneration: Type.Integer({ description: 'Generation of the desired set last changed' }),
  ackedGeneration: Nullable(Type.Integer({ description: 'Highest generation the agent acknowledged' })),
  createdAt: DateTime,
  updatedAt: DateTime,
};

export const HostRecord = Type.Object(HostFields, { $id: 'Host' });

export const HostWorkload = Type.Object({
  id: Type.String(),
  kind: Type.String(),
  ownerAccountId: Type.String(),
  image: Type.String(),
  desired: Type.String(),
  phase: Type.String(),
  hostUnreachable: Type.Boolean(),
  gpus: Type.Array(Type.Integer(), { description: 'GPU indices assigned' }),
});

export const HostDetailRecord = Type.Object(
  {
    ...HostFields,
    inventory: Nullable(Inventory),
    workloadList: Type.Array(HostWorkload, { description: 'Workloads on the host that are not yet gone' }),
  },
  { $id: 'HostDetail' },
);

export const ReasonBody = Type.Object(
  { reason: Type.Optional(Type.String({ maxLength: 500 })) },
  { additionalProperties: false },
);

export const DeleteHostQuery = Type.Object({
  force: Type.Optional(
    Type.Boolean({ description: 'Delete a host that still has workloads; they are marked deleted with it' }),
  ),
});

export const MetricsQuery = Type.Object({
  kind: Type.Optional(Type.Union([Type.Literal('host'), Type.Literal('gpu'), Type.Literal('container')])),
  series: Type.Optional(Type.String({ maxLength: 128, description: 'GPU UUID or workload id' })),
  from: Type.Optional(Type.String({ format: 'date-time', description: 'Default: an hour before `to`' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'Default: now' })),
  resolution: Type.Optional(
    Type.Union([Type.Literal('raw'), Type.Literal('1m')], {
      description: 'raw samples (kept 24 h) or one-minute rollups (kept 30 days); default raw',
    }),
  ),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
});

export const MetricsResponse = Type.Object({
  hostId: Type.String(),
  kind: Type.String(),
  resolution: Type.String(),
  from: DateTime,
  to: DateTime,
  points: Type.Array(
    Type.Object({
      series: Type.String(),
      at: DateTime,
      samples: Type.Optional(Type.Integer()),
      data: Type.Record(Type.String(), Type.Unknown()),
      info: Type.Optional(Nullable(Type.Record(Type.String(), Type.Unknown()))),
    }),
  ),
});

export const WorkloadRecord = Type.Object({
  id: Type.String(),
  hostId: Type.String(),
  kind: Type.String(),
  ownerAccountId: Type.String(),
  spec: WorkloadSpec,
  desired: Type.String(),
  phase: Type.String(),
  actualStatus: Nullable(
    Type.Record(Type.String(), Type.Unknown(), {
      description:
        'The last WorkloadStatus the agent reported (container id, state, exit code, error, ports)',
    }),
  ),
  actualAt: Nullable(DateTime),
  pullProgress: Nullable(Type.Record(Type.String(), Type.Unknown())),
  hostUnreachable: Type.Boolean(),
  generation: Type.Integer(),
  createdAt: DateTime,
  updatedAt: DateTime,
});

export const LogsQuery = Type.Object({
  after: Type.Optional(
    Type.Integer({ minimum: 0, maximum: MAX_SEQUENCE, description: 'Sequence number to continue after' }),
  ),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 5_000 })),
});

export const LogsResponse = Type.Object({
  workloadId: Type.String(),
  lines: Type.Array(
    Type.Object({
      seq: Type.Integer(),
      containerId: Type.String(),
      stream: Type.String(),
      ts: Type.String(),
      line: Type.String(),
    }),
  ),
  next: Type.Integer({ description: 'Pass as `after` to get the lines that follow' }),
  losses: Type.Array(
    Type.Object({
      containerId: Nullable(Type.String()),
      lines: Type.Integer(),
      bytes: Type.Integer(),
      firstTs: Nullable(Type.String()),
      lastTs: Nullable(Type.String()),
      receivedAt: DateTime,
    }),
    { description: 'Lines the agent had to drop while it could not send (its buffer was full)' },
  ),
});

/** Every status a cluster row can hold: the customers' list filter's, plus deleted (operators see those too). */
export const ADMIN_CLUSTER_STATUSES: readonly string[] = [...CLUSTER_STATUSES, 'deleted'];

export const AdminClustersQuery = Type.Object(
  {
    status: Type.Optional(
      Type.String({
        maxLength: 200,
        description: `Comma list of statuses (${ADMIN_CLUSTER_STATUSES.join(', ')}). Default: every status but deleted.`,
      }),
    ),
    id: Type.Optional(Type.String({ maxLength: 64, description: 'One cluster (the dashboard links to it)' })),
    account_id: Type.Optional(Type.String({ maxLength: 64 })),
    host_id: Type.Optional(Type.String({ maxLength: 64 })),
    gpu_type: Type.Optional(Type.String({ maxLength: 64 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 100 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
  },
  { additionalProperties: false },
);

export const AdminCluster = Type.Object({
  id: Type.String(),
  name: Type.String(),
  status: Type.String(),
  statusReason: Nullable(Type.String()),
  account: Type.Object({ id: Type.String(), name: Type.String(), tier: Type.String() }),
  gpuType: Type.String(),
  gpuCount: Type.Integer(),
  region: Nullable(Type.String()),
  hostId: Nullable(Type.String({ description: 'null while pending and once the GPUs are released' })),
  gpuIndices: Type.Array(Type.Integer()),
  queuedAt: Nullable(
    Type.String({ format: 'date-time', description: 'When placement first found no room; null once placed' }),
  ),
  hourlyRate: Type.Number({ description: 'USD per hour for the whole cluster, fixed at placement' }),
  expiresAt: Nullable(DateTime),
  createdAt: DateTime,
  updatedAt: DateTime,
});

export const AdminClusterList = Type.Object({
  clusters: Type.Array(AdminCluster),
  pagination: Type.Object({
    total: Type.Integer(),
    limit: Type.Integer(),
    offset: Type.Integer(),
    hasMore: Type.Boolean(),
  }),
  summary: Type.Object(
    {
      byStatus: Type.Record(Type.String(), Type.Integer()),
      gpusHeld: Type.Integer({ description: 'GPUs assigned to the matching clusters (their gpuIndices)' }),
      pendingGpus: Type.Integer({
        description: 'GPUs asked for by matching pending clusters that have none assigned yet',
      }),
    },
    { description: 'Over every cluster matching the filters, not only this page' },
  ),
});

const Tier = Type.Union([Type.Literal('free'), Type.Literal('pro'), Type.Literal('enterprise')], {
  description: 'Rate-limit tier (spec: Limits)',
});

export const AdminAccount = Type.Object({
  id: Type.String(),
  name: Type.String(),
  tier: Type.String(),
  operator: Type.Boolean({ description: "The operators' account (its owners and admins reach /v2/admin)" }),
  members: Type.Object({ active: Type.Integer(), suspended: Type.Integer() }),
  pendingInvitations: Type.Integer({ description: 'Sent or resent, not expired' }),
  clusters: Type.Object({
    active: Type.Integer({ description: 'Clusters neither stopped nor deleted' }),
    gpusHeld: Type.Integer({ description: 'GPUs assigned to its clusters now' }),
  }),
  createdAt: DateTime,
  updatedAt: DateTime,
});

export const AdminAccountsQuery = Type.Object(
  {
    tier: Type.Optional(Tier),
    search: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Part of the name' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 100 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
  },
  { additionalProperties: false },
);

export const AdminAccountList = Type.Object({
  accounts: Type.Array(AdminAccount),
  pagination: Type.Object({
    total: Type.Integer(),
    limit: Type.Integer(),
    offset: Type.Integer(),
    hasMore: Type.Boolean(),
  }),
});

export const CreateAccountBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    tier: Type.Optional(Tier),
    ownerEmail: Type.String({ minLength: 3, maxLength: 254, description: 'Invited to own the account' }),
    expiresIn: Type.Optional(
      Type.Union([Type.Literal('1d'), Type.Literal('7d'), Type.Literal('30d')], { default: '7d' }),
    ),
    message: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
);

export const UpdateAccountBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    tier: Type.Optional(Tier),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const AccountIdParams = Type.Object({ account_id: Type.String({ maxLength: 64 }) });
