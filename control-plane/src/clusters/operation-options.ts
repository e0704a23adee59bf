/**
 * What a stop or delete was asked to do, and the snapshot it records: the parts of an Operation
 * (operation.ts) that its helpers read (snapshots.ts, stop-notifications.ts). Apart from operation.ts,
 * which holds those helpers' records in turn, so that neither imports the other.
 */

export interface StopOptions {
  force: boolean;
  grace_period_minutes: number;
  save_state: boolean;
  snapshot_name: string | null;
  preserve_data: boolean;
  wait_for_completion: boolean;
  timeout_minutes: number;
  stop_reason: string | null;
  notify_users: string[];
}

export interface DeleteOptions {
  force: boolean;
  create_final_snapshot: boolean;
  snapshot_name: string | null;
  preserve_snapshots: boolean;
  delete_snapshots: boolean;
  finalize_billing: boolean;
  cleanup_network_resources: boolean;
  wait_for_completion: boolean;
  timeout_minutes: number;
  deletion_reason: string | null;
}

export interface SnapshotRecord {
  enabled: boolean;
  name: string | null;
  snapshot_id: string | null;
  size_bytes: number | null;
  error: string | null;
}
