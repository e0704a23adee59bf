/** The admin API's shapes the dashboard reads (control-plane/src/api/admin/schemas.ts is the source). */

export interface Host {
  id: string;
  name: string;
  hostname: string;
  region: string | null;
  status: 'registered' | 'ready' | 'unreachable' | 'cordoned';
  state: 'registered' | 'ready' | 'unreachable';
  cordoned: boolean;
  cordonReason: string | null;
  connected: boolean;
  simulated: boolean;
  agentVersion: string | null;
  lastHeartbeatAt: string | null;
  unreachableSince: string | null;
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
  workloads: { total: number; running: number; gpusAllocated: number };
  createdAt: string;
}

export interface HostWorkload {
  id: string;
  kind: string;
  ownerAccountId: string;
  image: string;
  desired: string;
  phase: string;
  hostUnreachable: boolean;
  gpus: number[];
}

export interface GpuDevice {
  index: number;
  uuid: string;
  name: string;
  memoryTotalBytes: number | null;
}

export interface HostDetail extends Host {
  inventory: {
    host: { os: { distro: string | null; release: string | null; kernel: string | null; arch: string } };
    gpus: { devices: GpuDevice[]; error: string | null };
  } | null;
  workloadList: HostWorkload[];
}

export interface MetricPoint {
  series: string;
  at: string;
  data: Record<string, unknown>;
}

export interface JoinToken {
  id: string;
  description: string | null;
  prefix: string;
  region: string | null;
  maxUses: number | null;
  useCount: number;
  status: 'active' | 'expired' | 'revoked' | 'used_up';
  expiresAt: string;
  lastUsedAt: string | null;
  createdAt: string;
}

export interface LogLine {
  seq: number;
  stream: string;
  ts: string;
  line: string;
}
