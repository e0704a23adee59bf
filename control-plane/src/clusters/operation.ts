import type { DeleteOptions, SnapshotRecord, StopOptions } from './operation-options.ts';
import type { SnapshotCleanup } from './snapshots.ts';
import type { StopNotifications, StopReport } from './stop-notifications.ts';

// Re-exported: the routes, the service and the operation runner import them with the rest of the operation.
export type { DeleteOptions, SnapshotRecord, StopOptions } from './operation-options.ts';

/**
 * A stop or delete in progress, kept in clusters.operation (JSON) so that any replica, or this one
 * after a restart, carries it on from the phase it reached. The phase recorded is the one executing.
 */

export const STOP_PHASES = [
  'notifying_processes',
  'waiting_for_graceful_exit',
  'creating_snapshot',
  'terminating_resources',
  'cleaning_up',
  'completed',
] as const;

export const DELETE_PHASES = [
  'stopping_cluster',
  'creating_final_snapshot',
  'finalizing_billing',
  'cleaning_storage',
  'cleaning_network',
  'cleaning_compute',
  'updating_records',
  'completed',
] as const;

export type StopPhase = (typeof STOP_PHASES)[number];
export type DeletePhase = (typeof DELETE_PHASES)[number];
export type Phase = StopPhase | DeletePhase;

export const PHASE_STEPS: Record<Phase, string> = {
  notifying_processes: 'Sending SIGTERM to the container',
  waiting_for_graceful_exit: 'Waiting for the processes to exit within the grace period',
  creating_snapshot: 'Committing the container to a snapshot image',
  terminating_resources: 'Stopping and removing the container',
  cleaning_up: 'Releasing the GPUs and host resources',
  completed: 'Done',
  stopping_cluster: 'Stopping the container (SIGTERM, then waiting for it to exit)',
  creating_final_snapshot: 'Committing the container to a final snapshot image',
  finalizing_billing: 'Closing the billing session and totalling the costs',
  cleaning_storage: "Deleting the cluster's volume (and its earlier snapshots, when asked)",
  cleaning_network: 'Removing the container and its network endpoint and published ports',
  cleaning_compute: 'Releasing the GPUs and host resources',
  updating_records: 'Marking the cluster deleted',
};

export interface BillingCutoff {
  /** When billing stopped: the moment the stop or delete was accepted. */
  cutoff: string;
  session_started_at: string | null;
  session_hours: number;
  session_cost: number;
  hourly_rate: number;
  /** All closed sessions of the cluster, once finalizing_billing ran (delete). */
  total_cost: number | null;
}

export interface Operation {
  kind: 'stop' | 'delete';
  phase: Phase;
  phases: Phase[];
  steps_completed: number;
  started_at: string;
  phase_started_at: string;
  /** started_at + timeout_minutes: waits give up here and the next phase forces its way on. */
  deadline: string;
  completed_at: string | null;
  options: StopOptions | DeleteOptions;
  snapshot: SnapshotRecord;
  billing: BillingCutoff;
  /** Status before the operation (a delete of a stopped cluster has nothing to stop). */
  previous_status: string;
  /** What happened that the caller should know (host unreachable, a snapshot failure, a forced kill). */
  notes: string[];
  /** The control-plane process executing it, and until when its claim holds. */
  runner: string | null;
  lease_until: string | null;
  /** The member who asked for it (null: expiry). Absent on operations recorded before it existed. */
  requested_by?: string | null;
  /** Stop: notify_users and the account channels, delivered as the stop ends. A delete carries them when it
   *  took over an unfinished stop (they then report that stop as failed). */
  notifications?: StopNotifications | null;
  /** Delete: the stop it took over, for those notifications. */
  interrupted_stop?: StopReport | null;
  /** Delete: what cleaning_storage did with the cluster's earlier snapshots. */
  snapshot_cleanup?: SnapshotCleanup | null;
}

export function progressOf(op: Operation) {
  const total = op.phases.length;
  const done = op.phase === 'completed' ? total : op.steps_completed;
  return {
    phase: op.phase,
    percentage: Math.round((done / total) * 100),
    current_step: PHASE_STEPS[op.phase],
    steps_completed: done,
    total_steps: total,
  };
}
