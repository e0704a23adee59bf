import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { GpuHealthChange } from '../fleet/hosts/events.ts';
import { describeReasons } from '../fleet/hosts/gpu-health.ts';

/** What a failed GPU means for what runs on it (ANVIL_FAILED_GPU_POLICY). */
export type FailedGpuPolicy = 'keep' | 'stop';

/** The status reason a workload on the failed GPU carries; recognisable, so a reset can take it back. */
export function failedGpuReason(change: GpuHealthChange, policy: FailedGpuPolicy): string {
  const outcome =
    policy === 'stop'
      ? 'stopped by the operator policy (ANVIL_FAILED_GPU_POLICY=stop)'
      : 'still running (ANVIL_FAILED_GPU_POLICY=keep); stop and start it to move to a healthy GPU';
  return `GPU ${change.gpuIndex} (${change.gpuUuid}) failed: ${describeReasons(change.reasons)}; ${outcome}`;
}

/**
 * Reports, and by policy stops, the clusters and endpoint workers on a GPU whose kept health turned
 * failed; takes the report back when an operator resets the GPU. Placement already skips the GPU
 * (scheduler/capacity.ts); this is about what was there before it failed.
 */
export class FailedGpuWorkloads {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      policy: FailedGpuPolicy;
      /** Fails a cluster with the reason (ClusterService.fail): billing closed, GPUs released, container stopped. */
      failCluster: (clusterId: string, reason: string) => Promise<void>;
      /** The GPU is offered again: pending clusters may fit now (the supervisor's next pass, at once). */
      freed: () => void;
    },
  ) {}

  async handle(change: GpuHealthChange): Promise<void> {
    if (change.to === 'failed') await this.#failed(change);
    else if (change.from === 'failed') await this.#cleared(change);
  }

  async #failed(change: GpuHealthChange): Promise<void> {
    const { db, clock, policy } = this.deps;
    const reason = failedGpuReason(change, policy);
    const now = clock.now().toISOString();
    const clusters = await db.sql.query<{ id: string }>(
      `SELECT id FROM clusters WHERE host_id = $1 AND $2 = ANY(gpu_indices) AND deleted_at IS NULL
          AND status IN ('starting', 'running')`,
      [change.hostId, change.gpuIndex],
    );
    for (const { id } of clusters) {
      if (policy === 'stop') {
        await this.deps.failCluster(id, reason);
      } else {
        await db.sql.query('UPDATE clusters SET status_reason = $2, updated_at = $3 WHERE id = $1', [
          id,
          reason,
          now,
        ]);
      }
    }
    // Endpoint workers are reported; their endpoint's supervisor replaces a worker that stops answering.
    await db.sql.query(
      `UPDATE endpoint_workers SET status_reason = $3, updated_at = $4
        WHERE host_id = $1 AND $2 = ANY(gpu_indices) AND status IN ('starting', 'ready', 'draining')`,
      [change.hostId, change.gpuIndex, reason, now],
    );
  }

  async #cleared(change: GpuHealthChange): Promise<void> {
    const { db, clock } = this.deps;
    const now = clock.now().toISOString();
    const mark = `GPU ${change.gpuIndex} (${change.gpuUuid}) failed: %`;
    await db.sql.query(
      `UPDATE clusters SET status_reason = NULL, updated_at = $4
        WHERE host_id = $1 AND $2 = ANY(gpu_indices) AND deleted_at IS NULL AND status IN ('starting', 'running')
          AND status_reason LIKE $3`,
      [change.hostId, change.gpuIndex, mark, now],
    );
    await db.sql.query(
      `UPDATE endpoint_workers SET status_reason = NULL, updated_at = $4
        WHERE host_id = $1 AND $2 = ANY(gpu_indices) AND status_reason LIKE $3`,
      [change.hostId, change.gpuIndex, mark, now],
    );
    this.deps.freed();
  }
}
