import { type Static, Type } from '@sinclair/typebox';
import { Nullable } from './common.ts';

export const GpuDevice = Type.Object({
  index: Type.Integer({ minimum: 0 }),
  uuid: Type.String({ minLength: 1 }),
  name: Type.String(),
  memoryTotalBytes: Nullable(Type.Integer({ minimum: 0 })),
  /** Domain-qualified, as NVML reports it: 00000000:18:00.0 */
  pciBusId: Nullable(Type.String()),
  /** nvmlDeviceGetMigMode's current mode; a MIG-enabled GPU is not offered as a whole GPU. Absent: unknown. */
  migEnabled: Type.Optional(Nullable(Type.Boolean())),
});
export type GpuDevice = Static<typeof GpuDevice>;

export const GPU_SOURCES = ['nvml', 'nvidia-smi', 'simulated', 'none'] as const;

export const GpuInventory = Type.Object({
  /** True when the devices were declared with --simulate-gpus: containers get no real device. */
  simulated: Type.Boolean(),
  source: Type.Union(GPU_SOURCES.map((s) => Type.Literal(s))),
  driverVersion: Nullable(Type.String()),
  /** CUDA driver API version, "12.4". */
  cudaVersion: Nullable(Type.String()),
  devices: Type.Array(GpuDevice),
  /** Why no GPU source worked, when none did. */
  error: Nullable(Type.String()),
});
export type GpuInventory = Static<typeof GpuInventory>;

export const CpuInventory = Type.Object({
  model: Nullable(Type.String()),
  cores: Nullable(Type.Integer({ minimum: 0 })),
  threads: Nullable(Type.Integer({ minimum: 0 })),
});

export const DiskInventory = Type.Object({
  device: Type.String(),
  mount: Type.String(),
  fsType: Nullable(Type.String()),
  sizeBytes: Nullable(Type.Number({ minimum: 0 })),
});

export const NetworkInterfaceInventory = Type.Object({
  name: Type.String(),
  mac: Nullable(Type.String()),
  ipv4: Type.Array(Type.String()),
  ipv6: Type.Array(Type.String()),
  speedMbps: Nullable(Type.Number()),
  virtual: Nullable(Type.Boolean()),
});

export const OsInventory = Type.Object({
  platform: Type.String(),
  distro: Nullable(Type.String()),
  release: Nullable(Type.String()),
  kernel: Nullable(Type.String()),
  arch: Type.String(),
});

export const DockerInventory = Type.Object({
  version: Nullable(Type.String()),
  apiVersion: Nullable(Type.String()),
  runtimes: Type.Array(Type.String()),
  nvidiaRuntime: Type.Boolean(),
  /** Why Docker could not be queried, when it could not. */
  error: Nullable(Type.String()),
});
export type DockerInventory = Static<typeof DockerInventory>;

/**
 * What this host can enforce between tenants. `network`: whether the agent's firewall rules (iptables)
 * are in place; `diskQuota`: whether the engine can bound a container's writable layer
 * (`--storage-opt size`, overlay2 on xfs with pquota). `reason` says why not, for operators and the scheduler.
 */
export const IsolationInventory = Type.Object({
  network: Type.Object({ enforced: Type.Boolean(), reason: Nullable(Type.String()) }),
  diskQuota: Type.Object({ enforced: Type.Boolean(), reason: Nullable(Type.String()) }),
});
export type IsolationInventory = Static<typeof IsolationInventory>;

export const HostInventory = Type.Object({
  hostname: Type.String(),
  os: OsInventory,
  cpu: CpuInventory,
  memoryBytes: Nullable(Type.Number({ minimum: 0 })),
  disks: Type.Array(DiskInventory),
  networkInterfaces: Type.Array(NetworkInterfaceInventory),
});
export type HostInventory = Static<typeof HostInventory>;

/** Everything the agent tells the control plane about its machine in `hello`. */
export const Inventory = Type.Object({
  host: HostInventory,
  gpus: GpuInventory,
  docker: DockerInventory,
  /** Absent from agents older than tenant isolation. */
  isolation: Type.Optional(IsolationInventory),
  /**
   * The address where this host publishes multi-host training gangs' rendezvous ports, reachable from
   * the fleet's other hosts (ANVIL_RENDEZVOUS_ADDRESS). Absent or null: the host takes single-host gangs only.
   */
  rendezvousAddress: Type.Optional(Nullable(Type.String())),
});
export type Inventory = Static<typeof Inventory>;
