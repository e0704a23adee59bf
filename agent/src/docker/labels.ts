import { createHash } from 'node:crypto';
import type { WorkloadSpec } from '@anvil/shared/protocol';

/** Docker labels that mark a container as Anvil's. Nothing without `anvil.managed=true` is ever touched. */
export const LABELS = {
  managed: 'anvil.managed',
  workload: 'anvil.workload',
  host: 'anvil.host',
  /** Hash of the spec the container was created from: a different desired hash means recreate. */
  specHash: 'anvil.spec-hash',
  /** Grace period to honour when the container is stopped later, possibly by a restarted agent. */
  stopGrace: 'anvil.stop-grace',
} as const;

const OWN_LABELS: ReadonlySet<string> = new Set(Object.values(LABELS));

export function isOwnLabel(key: string): boolean {
  return OWN_LABELS.has(key);
}

/**
 * One deterministic name per workload: Docker refuses a second container with the same name, so a
 * crashed and restarted agent (or two racing passes) can never create a duplicate.
 */
export function containerName(workloadId: string): string {
  return `anvil-${workloadId}`;
}

/** How GPUs reach a container: real device requests, or only the env variable when simulated. */
export type GpuMode = 'device-requests' | 'env-only';

export interface SpecContext {
  hostId: string;
  volumeRoot: string;
  /** The download cache (WorkloadDownload files, one per SHA-256); needed only by specs with downloads. */
  downloadRoot?: string;
  gpuMode: GpuMode;
  /**
   * Operator opt-in (ANVIL_DIRECT_PORTS_ADDRESS): workload ports are published on this address only, on a
   * port Docker picks from [first, last]. Absent or null: nothing is published on the host's interfaces.
   */
  directPorts?: DirectPorts | null;
  /**
   * ANVIL_RENDEZVOUS_ADDRESS: where a multi-host training worker's rendezvous ports (spec.rendezvous.publish)
   * are published. Absent or null: a spec that asks to publish one cannot be created here.
   */
  rendezvousAddress?: string | null;
  /** The engine bounds writable layers: diskBytes becomes `--storage-opt size`. */
  storageQuota?: boolean;
  /**
   * The host's CPUs: dockerd refuses a CPU limit above them ("Range of CPUs is from 0.01 to N"), so a
   * larger request is capped here (the limit cannot give more than the host has anyway).
   */
  hostCpus?: number;
  /**
   * The agent's worker API port (worker-api/relay.ts): a spec with `workerApi` gets its URLs in the env,
   * the port being reached at WORKER_API_HOST (the engine's host gateway). Absent or null: the agent
   * serves none, and such a spec's URL variables are left unset.
   */
  workerApi?: { port: number } | null;
}

export interface DirectPorts {
  address: string;
  first: number;
  last: number;
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, v]) => [k, canonical(v)]),
    );
  }
  return value;
}

/**
 * Hash of everything that shapes the container. The stop grace is left out: changing it should not
 * restart a running workload. So are the secret env and files (contract 5), the registry credentials and the downloads: a rotated secret reaches
 * the container at its next start instead of recreating it, and the hash (a label anyone can read)
 * says nothing about secret values. Key order is normalised so equal specs hash equal whatever their JSON.
 */
export function specHash(
  spec: WorkloadSpec,
  context: Pick<SpecContext, 'volumeRoot' | 'gpuMode' | 'directPorts' | 'rendezvousAddress'>,
): string {
  const {
    stopGraceSeconds: _ignored,
    secretEnv: _env,
    files: _files,
    downloads: _downloads,
    registryAuth: _auth,
    ...shape
  } = spec;
  // Direct ports count only when set, so hashes of containers made before the option existed hold.
  const ports = context.directPorts ? { directPorts: context.directPorts } : {};
  // Likewise the rendezvous address, and only for the specs that publish on it.
  const rendezvous =
    spec.rendezvous && spec.rendezvous.publish.length > 0
      ? { rendezvousAddress: context.rendezvousAddress ?? null }
      : {};
  const text = JSON.stringify(
    canonical({ shape, volumeRoot: context.volumeRoot, gpuMode: context.gpuMode, ...ports, ...rendezvous }),
  );
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}
