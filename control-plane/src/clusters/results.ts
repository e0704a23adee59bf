import type { Cluster } from '../db/generated/client.ts';
import { type DeleteOptions, type Operation, progressOf, type StopOptions } from './operation.ts';

const GB = 1e9;

export function sizeGb(bytes: number | null): number | null {
  return bytes === null ? null : Math.round((bytes / GB) * 1000) / 1000;
}

/**
 * The stop response (spec: Endpoints → stop) from the recorded operation. estimated_stop_time is
 * stop_initiated_at + the grace period (0 when forced), the latest the processes are given; once the
 * stop completed it is the completion time.
 */
export function stopResult(cluster: Cluster) {
  const op = cluster.operation as unknown as Operation;
  const options = op.options as StopOptions;
  const graceMs = options.force ? 0 : options.grace_period_minutes * 60_000;
  const started = new Date(op.started_at);
  return {
    id: cluster.id,
    name: cluster.name,
    status: cluster.status,
    stop_initiated_at: op.started_at,
    estimated_stop_time: op.completed_at ?? new Date(started.getTime() + graceMs).toISOString(),
    stop_type: options.force ? 'force' : 'graceful',
    grace_period_minutes: options.grace_period_minutes,
    stop_progress: progressOf(op),
    snapshot_creation: {
      enabled: op.snapshot.enabled,
      snapshot_id: op.snapshot.snapshot_id,
      snapshot_name: op.snapshot.name,
      estimated_size_gb: sizeGb(op.snapshot.size_bytes),
      error: op.snapshot.error,
    },
    cost_impact: {
      hourly_rate_saved: op.billing.session_started_at ? op.billing.hourly_rate : 0,
      session_cost_final: op.billing.session_cost,
      billing_stopped_at: op.billing.cutoff,
    },
    data_preservation: {
      volumes_preserved: options.preserve_data,
      snapshots_created: op.snapshot.snapshot_id ? 1 : 0,
    },
    notifications: op.notifications ?? null,
    notes: op.notes,
  };
}

/**
 * The delete response from the recorded operation. estimated_completion_time is the deadline
 * (deletion_initiated_at + timeout_minutes) until done, then the completion time; the snapshot's size is
 * the committed image's once it exists (null before: it cannot be known earlier).
 */
export function deleteResult(cluster: Cluster) {
  const op = cluster.operation as unknown as Operation;
  const options = op.options as DeleteOptions;
  return {
    id: cluster.id,
    name: cluster.name,
    status: cluster.status,
    deletion_initiated_at: op.started_at,
    estimated_completion_time: op.completed_at ?? op.deadline,
    deletion_progress: progressOf(op),
    final_snapshot: {
      creating: options.create_final_snapshot,
      snapshot_name: op.snapshot.name,
      snapshot_id: op.snapshot.snapshot_id,
      estimated_size_gb: sizeGb(op.snapshot.size_bytes),
      estimated_completion: options.create_final_snapshot ? (op.completed_at ?? op.deadline) : null,
      error: op.snapshot.error,
    },
    billing_preview: {
      session_duration_hours: Math.round(op.billing.session_hours * 1e6) / 1e6,
      estimated_final_cost: op.billing.total_cost ?? op.billing.session_cost,
      currency: 'USD',
      billing_cutoff: op.billing.cutoff,
    },
    snapshot_cleanup: op.snapshot_cleanup ?? null,
    notes: op.notes,
  };
}
