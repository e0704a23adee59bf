import { Type } from '@sinclair/typebox';
import { CREATE_DEFAULTS, LIMITS, LIST_PARAMETERS } from '../../clusters/requests.ts';
import { GPU_TYPES, REGIONS } from '../../scheduler/gpu-types.ts';
import { DateTime, Nullable, NullableDateTime } from '../accounts/common.ts';

const GpuType = Type.Union(
  GPU_TYPES.map((t) => Type.Literal(t)),
  {
    description:
      "The spec's A100 (80 GB), H100 (SXM), RTX4090, V100, T4, and the boards it does not list: H200, H100_PCIE, " +
      'A100_40GB, L40S, A10. Hosts are matched by their GPUs\' NVML names (board catalogue: README, "GPU ' +
      'health, boards and the NVIDIA runtime"); MIG-enabled and failed GPUs are not offered.',
  },
);

export const ClusterParams = Type.Object({
  cluster_id: Type.String({ minLength: 1, maxLength: 128, description: 'cluster_<id>' }),
});

const Port = Type.Object(
  {
    internal_port: Type.Integer({ minimum: 1, maximum: 65535 }),
    protocol: Type.Optional(Type.Union([Type.Literal('tcp'), Type.Literal('udp')], { default: 'tcp' })),
    description: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
);

const size = (name: keyof typeof LIMITS, what: string) =>
  Type.Optional(
    Type.Integer({
      minimum: LIMITS[name][0],
      maximum: LIMITS[name][1],
      description: `${what}; default: the template's, else ${CREATE_DEFAULTS[name]}`,
    }),
  );

export const CreateClusterBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    description: Type.Optional(Type.String({ maxLength: 1000 })),
    template_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    docker_image: Type.Optional(
      Type.String({ minLength: 1, maxLength: 512, description: 'Required unless the template names one' }),
    ),
    from_snapshot: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 512,
        description:
          "Start the cluster from one of this account's snapshots: its name as GET /v1/clusters/{id}/snapshots " +
          'lists it (anvil-snapshots/<account id>/<cluster id>:<tag>). It becomes the docker_image (give one or ' +
          'the other, or the same); the cluster is placed on the host that holds the snapshot, and is refused ' +
          "(409 CONFLICT) while that host has no room. Another account's snapshot: 403 FORBIDDEN; an unknown " +
          'one: 404 SNAPSHOT_NOT_FOUND; its host not connected: 409 HOST_NOT_CONNECTED. A final snapshot (delete ' +
          'with create_final_snapshot) also carries /workspace: the new volume starts with its files; a stop ' +
          "snapshot holds the container's files outside /workspace (the new volume starts empty).",
      }),
    ),
    gpu_type: Type.Optional(GpuType),
    gpu_count: size('gpu_count', 'GPUs, all of gpu_type, on one host'),
    cpu_cores: size('cpu_cores', 'CPU cores (a limit, and counted against the host threads)'),
    memory_gb: size('memory_gb', 'Memory limit in GiB'),
    storage_gb: size('storage_gb', 'Volume size in GB (counted against the host disk)'),
    region: Type.Optional(Type.Union(REGIONS.map((r) => Type.Literal(r)))),
    command: Type.Optional(
      Type.Union(
        [
          Type.String({ maxLength: 10_000 }),
          Type.Array(Type.String({ maxLength: 10_000 }), { maxItems: 100 }),
        ],
        {
          description:
            'A string runs as `sh -c <command>`; an array replaces the image CMD as is. Default: the template startup script, else the image CMD.',
        },
      ),
    ),
    env: Type.Optional(Type.Record(Type.String({ maxLength: 256 }), Type.String({ maxLength: 32_768 }))),
    ports: Type.Optional(Type.Array(Port, { maxItems: 50 })),
    ssh_enabled: Type.Optional(Type.Boolean({ default: false })),
    expires_at: Type.Optional(
      Type.String({ format: 'date-time', description: 'Auto-termination time (future)' }),
    ),
    project_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  },
  { additionalProperties: false },
);

const PortMapping = Type.Object({
  internal_port: Type.Integer(),
  external_port: Nullable(Type.Integer()),
  protocol: Type.String(),
});

const Progress = Type.Object({
  phase: Type.String(),
  percentage: Type.Integer(),
  current_step: Type.String(),
  steps_completed: Type.Integer(),
  total_steps: Type.Integer(),
});

const Delivery = {
  status: Type.String({ description: 'pending, sent, failed or skipped' }),
  detail: Nullable(Type.String({ description: 'Why it was skipped, or how it failed' })),
  at: NullableDateTime,
};

const ChannelDelivery = Nullable(
  Type.Object({
    ...Delivery,
    delivery_id: Nullable(Type.String({ description: 'Webhook event id (X-Anvil-Delivery); null for chat' })),
  }),
);

export const StopNotifications = Nullable(
  Type.Object(
    {
      state: Type.String({ description: 'pending (the stop is still running), sending, done' }),
      outcome: Nullable(Type.String({ description: 'stopped or failed, once sent' })),
      reason: Nullable(Type.String({ description: 'Why the stop failed' })),
      users: Type.Array(
        Type.Object({
          user_id: Type.String(),
          name: Nullable(Type.String()),
          email: Nullable(
            Type.String({ description: 'The address the e-mail went (or would have gone) to' }),
          ),
          ...Delivery,
          message_id: Nullable(Type.String({ description: "The SMTP server's message id" })),
        }),
        { description: 'One entry per notify_users member: the e-mail sent to them' },
      ),
      webhook: ChannelDelivery,
      slack: ChannelDelivery,
      sent_at: NullableDateTime,
    },
    { description: "The stop's notifications and each delivery's result" },
  ),
);

const SnapshotImage = {
  image_id: Type.String(),
  names: Type.Array(Type.String(), { description: 'repository:tag names it had' }),
};

export const SnapshotCleanup = Nullable(
  Type.Object(
    {
      requested: Type.Boolean(),
      done: Type.Boolean(),
      removed: Type.Array(Type.Object(SnapshotImage)),
      failed: Type.Array(Type.Object({ ...SnapshotImage, error: Type.String() })),
      kept: Type.Array(Type.Object(SnapshotImage), { description: 'The final snapshot of this delete' }),
      error: Nullable(Type.String({ description: 'Why nothing could be removed' })),
    },
    { description: "What cleaning_storage did with the cluster's earlier snapshots (delete)" },
  ),
);

export const Cluster = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    description: Nullable(Type.String()),
    status: Type.String({ description: 'pending, starting, running, stopping, stopped, deleting, error' }),
    status_reason: Nullable(
      Type.String({
        description: 'Why pending or in error (image pull failed, exit code), or the stop/deletion reason',
      }),
    ),
    gpu_type: Type.String(),
    gpu_count: Type.Integer(),
    cpu_cores: Type.Integer(),
    memory_gb: Type.Integer(),
    storage_gb: Type.Integer(),
    region: Nullable(Type.String()),
    project_id: Nullable(Type.String()),
    template_id: Nullable(Type.String()),
    docker_image: Type.String(),
    image_pull: Nullable(
      Type.Object(
        {
          status: Type.Literal('pulling'),
          image: Type.String(),
          bytes_done: Type.Integer({ description: "Bytes of the image's layers downloaded so far" }),
          bytes_total: Nullable(
            Type.Integer({
              description: 'Bytes of every layer to download; null until Docker has announced every size',
            }),
          ),
        },
        {
          description:
            'While the host pulls the image before creating the container (status starting): how far it got. ' +
            "Null otherwise. A refused or missing image puts the cluster in `error`, with the registry's reason in status_reason.",
        },
      ),
    ),
    storage_quota: Nullable(
      Type.Object(
        { enforced: Type.Boolean(), reason: Nullable(Type.String()) },
        {
          description:
            'Whether the host the cluster is placed on bounds storage_gb: enforced true where the engine limits ' +
            'the writable layer (overlay2 on xfs with pquota); false (with the reason) where the agent only ' +
            'measures disk use, and a cluster over storage_gb keeps running with status_reason "disk over ' +
            'quota". Null when not placed, or the host runs an agent older than tenant isolation.',
        },
      ),
    ),
    ssh_enabled: Type.Boolean(),
    port_mappings: Type.Array(PortMapping),
    proxy_url: Nullable(Type.String()),
    ssh_connection: Nullable(
      Type.Object({ host: Type.String(), port: Type.Integer(), username: Type.String() }),
    ),
    metrics: Nullable(
      Type.Object({
        gpu_utilization: Nullable(Type.Number()),
        memory_utilization: Nullable(Type.Number()),
        cpu_utilization: Nullable(Type.Number()),
      }),
    ),
    cost: Type.Object({
      hourly_rate: Type.Number(),
      current_session_cost: Type.Number(),
      total_cost: Type.Number(),
      currency: Type.String(),
    }),
    operation: Nullable(
      Type.Object({
        kind: Type.String(),
        ...Progress.properties,
        started_at: DateTime,
        completed_at: NullableDateTime,
        notes: Type.Array(Type.String()),
        notifications: StopNotifications,
        snapshot_cleanup: SnapshotCleanup,
      }),
    ),
    created_at: DateTime,
    updated_at: DateTime,
    expires_at: NullableDateTime,
  },
  { $id: 'Cluster' },
);

export const ClusterShort = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    status: Type.String(),
    gpuType: Type.String(),
    containerDiskSize: Type.Number(),
    volumeSize: Type.Number(),
    createdAt: DateTime,
  },
  { $id: 'ClusterShort' },
);

/** Every parameter is text here and parsed by the domain, which reports all bad ones at once (INVALID_PARAMETERS). */
export const ListClustersQuery = Type.Object(
  Object.fromEntries(
    LIST_PARAMETERS.map((name) => [
      name,
      Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
    ]),
  ),
  { additionalProperties: true },
);

export const ClusterList = Type.Object({
  clusters: Type.Array(Type.Ref('Cluster')),
  pagination: Type.Object({
    current_page: Type.Integer(),
    total_pages: Type.Integer(),
    total_count: Type.Integer(),
    per_page: Type.Integer(),
    has_next: Type.Boolean(),
    has_previous: Type.Boolean(),
  }),
  filters_applied: Type.Record(Type.String(), Type.Union([Type.String(), Type.Number(), Type.Boolean()])),
});

export const StopBody = Type.Object(
  {
    force: Type.Boolean({ default: false }),
    grace_period_minutes: Type.Integer({ minimum: 0, maximum: 30, default: 5 }),
    save_state: Type.Boolean({ default: false }),
    snapshot_name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    preserve_data: Type.Boolean({ default: true }),
    wait_for_completion: Type.Boolean({ default: false }),
    timeout_minutes: Type.Integer({ minimum: 1, maximum: 60, default: 10 }),
    stop_reason: Type.Optional(Type.String({ maxLength: 1000 })),
    notify_users: Type.Array(Type.String({ maxLength: 128 }), { maxItems: 100, default: [] }),
  },
  { additionalProperties: false },
);

export const StopResult = Type.Object({
  id: Type.String(),
  name: Type.String(),
  status: Type.String(),
  stop_initiated_at: DateTime,
  estimated_stop_time: DateTime,
  stop_type: Type.String({ description: 'graceful or force' }),
  grace_period_minutes: Type.Integer(),
  stop_progress: Progress,
  snapshot_creation: Type.Object({
    enabled: Type.Boolean(),
    snapshot_id: Nullable(Type.String()),
    snapshot_name: Nullable(Type.String()),
    estimated_size_gb: Nullable(Type.Number()),
    error: Nullable(Type.String()),
  }),
  cost_impact: Type.Object({
    hourly_rate_saved: Type.Number(),
    session_cost_final: Type.Number(),
    billing_stopped_at: DateTime,
  }),
  data_preservation: Type.Object({ volumes_preserved: Type.Boolean(), snapshots_created: Type.Integer() }),
  notifications: StopNotifications,
  notes: Type.Array(Type.String()),
});

export const DeleteBody = Type.Object(
  {
    confirm_deletion: Type.Optional(Type.String({ maxLength: 64, description: 'Must be DELETE' })),
    force: Type.Boolean({ default: false }),
    create_final_snapshot: Type.Boolean({ default: false }),
    snapshot_name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    preserve_snapshots: Type.Boolean({ default: true }),
    delete_snapshots: Type.Boolean({ default: false }),
    finalize_billing: Type.Boolean({ default: true }),
    cleanup_network_resources: Type.Boolean({ default: true }),
    wait_for_completion: Type.Boolean({ default: false }),
    timeout_minutes: Type.Integer({ minimum: 1, maximum: 30, default: 10 }),
    deletion_reason: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
);

export const DeleteResult = Type.Object({
  id: Type.String(),
  name: Type.String(),
  status: Type.String(),
  deletion_initiated_at: DateTime,
  estimated_completion_time: DateTime,
  deletion_progress: Progress,
  final_snapshot: Type.Object({
    creating: Type.Boolean(),
    snapshot_name: Nullable(Type.String()),
    snapshot_id: Nullable(Type.String()),
    estimated_size_gb: Nullable(Type.Number()),
    estimated_completion: NullableDateTime,
    error: Nullable(Type.String()),
  }),
  billing_preview: Type.Object({
    session_duration_hours: Type.Number(),
    estimated_final_cost: Type.Number(),
    currency: Type.String(),
    billing_cutoff: DateTime,
  }),
  snapshot_cleanup: SnapshotCleanup,
  notes: Type.Array(Type.String()),
});

export const GpuPrices = Type.Object({
  prices: Type.Array(
    Type.Object({
      gpu_type: Type.String(),
      hourly_rate: Type.Number(),
      currency: Type.String(),
      updated_at: DateTime,
    }),
  ),
});

export const SetGpuPricesBody = Type.Object(
  {
    prices: Type.Object(
      Object.fromEntries(
        GPU_TYPES.map((t) => [t, Type.Optional(Type.Number({ minimum: 0, maximum: 100_000 }))]),
      ),
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);
