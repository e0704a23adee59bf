import { ApiError, randomBase36 } from '@anvil/shared';
import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import { closeSession } from '../billing/sessions.ts';
import type { Cluster, Prisma, Workload } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import type { Logger } from '../logger.ts';
import { type Allocator, TX_OPTIONS } from '../scheduler/allocator.ts';
import type { DeleteOptions, Operation, Phase, StopOptions } from './operation.ts';
import { recordRemoval, snapshotCleanupOf, snapshotRepository, snapshotTag } from './snapshots.ts';
import {
  completedOutcome,
  INTERRUPTED,
  StopNotifier,
  type StopOutcome,
  type StopReport,
} from './stop-notifications.ts';

/** How long a replica's claim on an operation holds without being renewed (a crashed one's lapses). */
const LEASE_MS = 10_000;
/** The claim while notifications go out: longer than the notifier's time-outs, so no one else resends them. */
const NOTIFY_LEASE_MS = 120_000;
/** The delete's stopping_cluster phase gives the processes this long to exit after SIGTERM. */
const DELETE_GRACE_MS = 30_000;
const EXITED_PHASES = new Set(['exited', 'failed', 'stopped', 'removed']);

type PhaseResult = 'done' | 'wait';

/**
 * Executes stop and delete phases, in order, for real, recording each phase in clusters.operation
 * before running it (so a GET shows the phase being executed). Every phase is idempotent and its
 * progress is in the row, so whichever replica holds the lease — this one after a restart included —
 * carries the operation on from where it was.
 */
export class ClusterOperations {
  readonly runner = `ops_${randomBase36(10)}`;
  readonly #notifier: StopNotifier;

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      fleet: Fleet;
      accounts: AccountServices;
      allocator: Allocator;
      logger: Logger;
      /** Capacity was freed: pending clusters may fit now. */
      freed: () => void;
    },
  ) {
    this.#notifier = new StopNotifier({
      db: d.db,
      clock: d.clock,
      notifier: d.accounts.notifier,
      settings: d.accounts.settings,
      logger: d.logger,
    });
  }

  /** Runs phases until one has to wait or the operation completes. Returns true when it completed. */
  async advance(clusterId: string): Promise<boolean> {
    if (!(await this.claim(clusterId))) return false;
    for (let step = 0; step < 20; step++) {
      const cluster = await this.d.db.prisma.cluster.findUnique({ where: { id: clusterId } });
      if (!cluster || (cluster.status !== 'stopping' && cluster.status !== 'deleting')) return true;
      const op = cluster.operation as unknown as Operation | null;
      if (!op) return false;
      if (op.kind === 'delete' && op.interrupted_stop)
        await this.notify(cluster, op, op.interrupted_stop, INTERRUPTED);
      if (op.phase === 'completed') {
        if (op.kind === 'stop') {
          const stop = this.stopReport(op);
          await this.notify(cluster, op, stop, completedOutcome(stop));
        }
        await this.complete(cluster, op);
        return true;
      }
      let result: PhaseResult;
      try {
        result = await this.run(cluster, op);
      } catch (error) {
        // A phase that throws is retried on the next pass; the note tells the caller why it is slow.
        const message = error instanceof Error ? error.message : String(error);
        await this.note(cluster.id, op, `${op.phase}: ${message}`);
        this.d.logger.warn(
          { clusterId, phase: op.phase, err: error },
          'cluster operation phase failed; retrying',
        );
        return false;
      }
      if (result === 'wait') {
        await this.save(cluster.id, op);
        return false;
      }
      const next = op.phases[op.phases.indexOf(op.phase) + 1] ?? 'completed';
      op.phase = next;
      op.steps_completed += 1;
      op.phase_started_at = this.d.clock.now().toISOString();
      await this.save(cluster.id, op);
    }
    return false;
  }

  private async claim(clusterId: string): Promise<boolean> {
    const now = this.d.clock.now();
    const rows = await this.d.db.prisma.$queryRawUnsafe<{ id: string }[]>(
      `UPDATE clusters SET operation = operation || jsonb_build_object('runner', $2::text, 'lease_until', $3::text)
        WHERE id = $1 AND status IN ('stopping', 'deleting') AND operation IS NOT NULL
          AND (operation->>'runner' IS NULL OR operation->>'runner' = $2 OR (operation->>'lease_until')::timestamptz < $4)
        RETURNING id`,
      clusterId,
      this.runner,
      new Date(now.getTime() + LEASE_MS).toISOString(),
      now,
    );
    return rows.length > 0;
  }

  private async save(clusterId: string, op: Operation, leaseMs = LEASE_MS): Promise<void> {
    op.runner = this.runner;
    op.lease_until = new Date(this.d.clock.now().getTime() + leaseMs).toISOString();
    // Only over the same operation: a delete that took over a stop meanwhile is never overwritten by it.
    await this.d.db.prisma.$executeRawUnsafe(
      `UPDATE clusters SET operation = $2::jsonb, updated_at = $3
        WHERE id = $1 AND status IN ('stopping', 'deleting')
          AND operation->>'kind' = $4 AND operation->>'started_at' = $5`,
      clusterId,
      JSON.stringify(op),
      this.d.clock.now(),
      op.kind,
      op.started_at,
    );
  }

  private async note(clusterId: string, op: Operation, note: string): Promise<void> {
    if (op.notes.at(-1) === note) return;
    op.notes = [...op.notes, note].slice(-20);
    await this.save(clusterId, op);
  }

  private stopReport(op: Operation): StopReport {
    return {
      started_at: op.started_at,
      completed_at: this.d.clock.now().toISOString(),
      options: op.options as StopOptions,
      snapshot: op.snapshot,
      notes: op.notes,
      requested_by: op.requested_by ?? null,
    };
  }

  /**
   * Delivers the notifications a stop owes (once: state done afterwards). Marked `sending` under a long
   * claim first; a runner that dies mid-way leaves them `sending`, and the next one sends them again
   * (at least once, like any webhook).
   */
  private async notify(
    cluster: Cluster,
    op: Operation,
    stop: StopReport,
    outcome: StopOutcome,
  ): Promise<void> {
    const owed = op.notifications;
    if (!owed || owed.state === 'done') return;
    owed.state = 'sending';
    await this.save(cluster.id, op, NOTIFY_LEASE_MS);
    op.notifications = await this.#notifier.deliver(cluster, stop, outcome, owed);
    await this.save(cluster.id, op);
  }

  private past(iso: string, plusMs = 0): boolean {
    return this.d.clock.now().getTime() >= new Date(iso).getTime() + plusMs;
  }

  private async workload(clusterId: string): Promise<Workload | null> {
    return this.d.db.prisma.workload.findUnique({ where: { id: clusterId } });
  }

  /** Whether commands can reach the host now (ready and connected somewhere). */
  private async hostReachable(hostId: string | null): Promise<boolean> {
    if (!hostId) return false;
    const host = await this.d.db.prisma.host.findUnique({ where: { id: hostId } });
    return !!host && !host.deletedAt && host.state === 'ready' && host.connectedReplicaId !== null;
  }

  private async command(
    cluster: Cluster,
    op: Operation,
    body: Parameters<Fleet['agents']['sendCommand']>[1],
    timeoutMs = 30_000,
  ) {
    try {
      return await this.d.fleet.agents.sendCommand(cluster.hostId!, body, timeoutMs);
    } catch (error) {
      const message =
        error instanceof ApiError ? `${error.code}: ${error.message}` : (error as Error).message;
      await this.note(cluster.id, op, `${op.phase}: ${message}`);
      return null;
    }
  }

  private async run(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    const phase: Exclude<Phase, 'completed'> = op.phase as Exclude<Phase, 'completed'>;
    switch (phase) {
      case 'notifying_processes':
        return this.signal(cluster, op, (op.options as StopOptions).force);
      case 'waiting_for_graceful_exit': {
        const options = op.options as StopOptions;
        return this.waitForExit(cluster, op, options.force ? 0 : options.grace_period_minutes * 60_000);
      }
      case 'stopping_cluster':
        return this.stopForDelete(cluster, op);
      case 'creating_snapshot':
      case 'creating_final_snapshot':
        return this.snapshot(cluster, op);
      case 'terminating_resources':
        return this.removeContainer(cluster, op, 'stopped');
      case 'cleaning_up':
        return this.cleanUpAfterStop(cluster, op);
      case 'finalizing_billing':
        return this.finalizeBilling(cluster, op);
      case 'cleaning_storage':
        await this.removeVolume(cluster, op);
        return this.removeSnapshots(cluster, op);
      case 'cleaning_network':
        return this.removeContainer(cluster, op, 'deleted');
      case 'cleaning_compute':
        return this.release(cluster);
      case 'updating_records':
        await this.d.accounts.resources.remove(cluster.accountId, cluster.id);
        return 'done';
    }
  }

  /** SIGTERM (SIGKILL when forced) to the container, when one runs. */
  private async signal(cluster: Cluster, op: Operation, force: boolean): Promise<PhaseResult> {
    const workload = await this.workload(cluster.id);
    if (!workload || EXITED_PHASES.has(workload.phase)) return 'done';
    if (!(await this.hostReachable(cluster.hostId))) {
      await this.note(cluster.id, op, `${op.phase}: host unreachable, the container could not be signalled`);
      return 'done';
    }
    await this.command(cluster, op, {
      name: 'signal_workload',
      workloadId: cluster.id,
      signal: force ? 'SIGKILL' : 'SIGTERM',
    });
    return 'done';
  }

  /** Done when the container exited, or the grace period (or the operation's timeout) is over. */
  private async waitForExit(cluster: Cluster, op: Operation, graceMs: number): Promise<PhaseResult> {
    const workload = await this.workload(cluster.id);
    if (!workload || EXITED_PHASES.has(workload.phase)) return 'done';
    if (!(await this.hostReachable(cluster.hostId))) {
      await this.note(cluster.id, op, `${op.phase}: host unreachable, not waiting for the processes`);
      return 'done';
    }
    if (this.past(op.phase_started_at, graceMs) || this.past(op.deadline)) {
      await this.note(
        cluster.id,
        op,
        `${op.phase}: processes still running after the grace period; they are killed`,
      );
      return 'done';
    }
    return 'wait';
  }

  private async stopForDelete(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    const force = (op.options as DeleteOptions).force;
    const state = op as Operation & { signalled?: boolean };
    if (!state.signalled) {
      await this.signal(cluster, op, force);
      state.signalled = true;
      await this.save(cluster.id, op);
    }
    return this.waitForExit(cluster, op, force ? 0 : DELETE_GRACE_MS);
  }

  /** docker commit of the container, through its agent: the snapshot's image id and size are recorded. */
  private async snapshot(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    if (!op.snapshot.enabled || op.snapshot.snapshot_id || op.snapshot.error) return 'done';
    const workload = await this.workload(cluster.id);
    if (
      !workload ||
      ['stopped', 'removed'].includes(workload.phase) ||
      !(await this.hostReachable(cluster.hostId))
    ) {
      op.snapshot.error =
        'no container to snapshot (never started, already removed, or its host is unreachable)';
      await this.save(cluster.id, op);
      return 'done';
    }
    const tag = snapshotTag(op.snapshot.name, op.kind, op.started_at);
    const remainingMs = Math.max(60_000, new Date(op.deadline).getTime() - this.d.clock.now().getTime());
    const result = (await this.command(
      cluster,
      op,
      {
        name: 'commit_workload',
        workloadId: cluster.id,
        repository: snapshotRepository(cluster.accountId, cluster.id),
        tag,
        comment: `Anvil ${op.kind} snapshot of ${cluster.id}`,
        // The final snapshot keeps /workspace, which the delete removes next; a stop keeps the volume itself.
        includeVolume: op.kind === 'delete',
      },
      remainingMs,
    )) as { imageId: string; sizeBytes: number | null; repository: string; tag: string } | null;
    if (result) {
      op.snapshot.snapshot_id = result.imageId;
      op.snapshot.size_bytes = result.sizeBytes;
      op.snapshot.name = `${result.repository}:${result.tag}`;
    } else {
      op.snapshot.error = op.notes.at(-1) ?? 'snapshot failed';
    }
    await this.save(cluster.id, op);
    return 'done';
  }

  /** desired → stopped (container stopped and removed by the agent) or deleted; done once the agent confirms. */
  private async removeContainer(
    cluster: Cluster,
    op: Operation,
    desired: 'stopped' | 'deleted',
  ): Promise<PhaseResult> {
    const workload = await this.workload(cluster.id);
    if (!workload) return 'done';
    if (workload.desired !== desired && workload.desired !== 'deleted') {
      await this.d.fleet.workloads.setDesired(cluster.id, desired);
    }
    // `stopped` and `removed` both mean the agent confirmed the container gone (WorkloadService).
    const gone = ['stopped', 'removed'];
    const fresh = await this.workload(cluster.id);
    if (!fresh || gone.includes(fresh.phase)) return 'done';
    if (!(await this.hostReachable(cluster.hostId))) {
      await this.note(
        cluster.id,
        op,
        `${op.phase}: host unreachable; its agent removes the container when it reconnects`,
      );
      return 'done';
    }
    if (this.past(op.deadline)) {
      await this.note(cluster.id, op, `${op.phase}: the agent did not confirm within timeout_minutes`);
      return 'done';
    }
    return 'wait';
  }

  private async cleanUpAfterStop(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    if (!(op.options as StopOptions).preserve_data) await this.removeVolume(cluster, op);
    return this.release(cluster);
  }

  private async removeVolume(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    if (!cluster.hostId || !(await this.workload(cluster.id))) return 'done';
    if (!(await this.hostReachable(cluster.hostId))) {
      await this.note(cluster.id, op, `${op.phase}: host unreachable, the volume could not be deleted`);
      return 'done';
    }
    await this.command(cluster, op, { name: 'remove_volume', workloadId: cluster.id });
    return 'done';
  }

  /**
   * delete_snapshots (or preserve_snapshots false): the cluster's earlier snapshots are removed from its
   * host by its agent; the final snapshot this delete made is kept. Done once, whatever the answer: what
   * was removed, what could not be (an image a container uses) and why are recorded.
   */
  private async removeSnapshots(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    op.snapshot_cleanup ??= snapshotCleanupOf(op.options as DeleteOptions);
    const cleanup = op.snapshot_cleanup;
    if (!cleanup.requested || cleanup.done) return 'done';
    cleanup.done = true;
    if (!cluster.hostId || !(await this.hostReachable(cluster.hostId))) {
      cleanup.error = 'host unreachable: the snapshots stay on it';
      await this.note(cluster.id, op, `${op.phase}: host unreachable, the snapshots could not be deleted`);
      return 'done';
    }
    const answer = await this.command(cluster, op, {
      name: 'remove_snapshots',
      workloadId: cluster.id,
      repository: snapshotRepository(cluster.accountId, cluster.id),
      keep: op.snapshot.snapshot_id ? [op.snapshot.snapshot_id] : [],
    });
    if (answer) recordRemoval(cleanup, answer as Parameters<typeof recordRemoval>[1]);
    else cleanup.error = op.notes.at(-1) ?? 'the agent could not remove the snapshots';
    await this.save(cluster.id, op);
    return 'done';
  }

  private async release(cluster: Cluster): Promise<PhaseResult> {
    await this.d.db.prisma.$transaction(async (tx) => this.d.allocator.release(tx, cluster.id), TX_OPTIONS);
    this.d.freed();
    return 'done';
  }

  private async finalizeBilling(cluster: Cluster, op: Operation): Promise<PhaseResult> {
    const totals = await this.d.db.prisma.$transaction(async (tx) => {
      // Normally closed when the delete was accepted; a session opened since (a race with start) closes here.
      await closeSession(tx, cluster, new Date(op.billing.cutoff), 'deleted');
      return tx.usageRecord.aggregate({
        where: { resourceId: cluster.id, resourceType: 'cluster' },
        _sum: { cost: true },
      });
    }, TX_OPTIONS);
    op.billing.total_cost = Math.round((totals._sum.cost ?? 0) * 10_000) / 10_000;
    await this.save(cluster.id, op);
    return 'done';
  }

  private async complete(cluster: Cluster, op: Operation): Promise<void> {
    const now = this.d.clock.now();
    op.completed_at = now.toISOString();
    op.runner = null;
    op.lease_until = null;
    await this.d.db.prisma.cluster.updateMany({
      where: { id: cluster.id, status: cluster.status },
      data:
        op.kind === 'stop'
          ? { status: 'stopped', operation: op as unknown as Prisma.InputJsonValue, updatedAt: now }
          : {
              status: 'deleted',
              deletedAt: now,
              operation: op as unknown as Prisma.InputJsonValue,
              updatedAt: now,
            },
    });
    this.d.logger.info(
      { clusterId: cluster.id, kind: op.kind, notes: op.notes },
      `cluster ${op.kind} completed`,
    );
  }
}
