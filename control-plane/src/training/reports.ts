import { newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { recordArtifact } from './artifacts/records.ts';
import { parseReport } from './contract.ts';
import { workloadIdOf } from './launcher.ts';

/** Log lines read per job and pass. */
const BATCH = 1000;

/**
 * Reads the trainer's reports (contract.ts) from rank 0's log lines that arrived since the job's cursor,
 * and stores them: one training_metrics row per metrics report, the job's latest metrics and progress,
 * one training_checkpoints row per checkpoint report. The cursor (log_entries.seq) moves in the same
 * transaction, so a restart or another replica neither loses nor repeats a report.
 */
export class ReportReader {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  /** Reads until no new line is left; returns how many reports were stored. */
  async drain(jobId: string): Promise<number> {
    let total = 0;
    for (;;) {
      const { reports, lines } = await this.readBatch(jobId);
      total += reports;
      if (lines < BATCH) return total;
    }
  }

  private async readBatch(jobId: string): Promise<{ reports: number; lines: number }> {
    return this.db.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRawUnsafe<{ log_cursor: bigint | string }[]>(
        'SELECT log_cursor FROM training_jobs WHERE id = $1 FOR UPDATE',
        jobId,
      );
      const cursorRow = rows[0];
      if (!cursorRow) return { reports: 0, lines: 0 };
      const cursor = BigInt(cursorRow.log_cursor);
      const workloadId = workloadIdOf(jobId, 0, 0);
      const lines = await tx.$queryRawUnsafe<
        { seq: bigint | string; line: string; at: Date; stream: string }[]
      >(
        `SELECT seq, line, at, stream FROM log_entries WHERE workload_id = $1 AND seq > $2 ORDER BY seq LIMIT ${BATCH}`,
        workloadId,
        cursor,
      );
      if (lines.length === 0) return { reports: 0, lines: 0 };
      const job = await tx.trainingJob.findUniqueOrThrow({ where: { id: jobId } });
      let reports = 0;
      let metrics = { ...((job.metrics ?? {}) as Record<string, number | null>) };
      let progress = { ...((job.progress ?? {}) as Record<string, number | null>) };
      for (const entry of lines) {
        if (entry.stream !== 'stdout') continue;
        const report = parseReport(entry.line);
        if (!report) continue;
        reports++;
        const at = new Date(entry.at);
        if (report.type === 'metrics') {
          await tx.trainingMetric.create({
            data: {
              jobId,
              step: report.step,
              epoch: report.epoch,
              values: report.values as Prisma.InputJsonValue,
              at,
            },
          });
          metrics = nextMetrics(metrics, report.values);
          progress = {
            ...progress,
            ...(report.epoch !== null ? { currentEpoch: report.epoch } : {}),
            ...(report.step !== null ? { currentStep: report.step } : {}),
            ...(report.totalEpochs !== null ? { totalEpochs: report.totalEpochs } : {}),
            ...(report.totalSteps !== null ? { totalSteps: report.totalSteps } : {}),
            lastReportAt: at.getTime(),
          };
        } else if (report.type === 'checkpoint') {
          const checkpointId = newId('ckpt');
          const hostId = await hostOf(tx, workloadId);
          await tx.trainingCheckpoint.create({
            data: {
              id: checkpointId,
              jobId,
              path: report.path,
              epoch: report.epoch,
              step: report.step,
              loss: report.loss,
              sizeBytes: report.sizeBytes === null ? null : BigInt(report.sizeBytes),
              hostId,
              workloadId,
              createdAt: at,
            },
          });
          await recordArtifact(tx, {
            ...{ jobId, accountId: job.accountId, workloadId, hostId, at },
            ...{ type: 'checkpoint', name: report.path, path: report.path, checkpointId },
          });
        } else {
          await recordArtifact(tx, {
            ...{ jobId, accountId: job.accountId, workloadId, hostId: await hostOf(tx, workloadId), at },
            ...{ type: 'artifact', name: report.name, path: report.path, checkpointId: null },
          });
        }
      }
      const last = lines[lines.length - 1]!;
      await tx.trainingJob.update({
        where: { id: jobId },
        data: {
          logCursor: BigInt(last.seq),
          ...(reports > 0
            ? {
                metrics: metrics as Prisma.InputJsonValue,
                progress: progress as Prisma.InputJsonValue,
                updatedAt: this.clock.now(),
              }
            : {}),
        },
      });
      return { reports, lines: lines.length };
    });
  }
}

async function hostOf(tx: Prisma.TransactionClient, workloadId: string): Promise<string | null> {
  return (
    (await tx.workload.findUnique({ where: { id: workloadId }, select: { hostId: true } }))?.hostId ?? null
  );
}

/** The job's latest metrics after one report: loss → currentLoss (and bestLoss, the lowest so far). */
export function nextMetrics(
  previous: Record<string, number | null>,
  values: Record<string, number>,
): Record<string, number | null> {
  const next = { ...previous };
  const loss = values['loss'];
  if (loss !== undefined) {
    next['currentLoss'] = loss;
    const best = previous['bestLoss'];
    next['bestLoss'] = best === null || best === undefined ? loss : Math.min(best, loss);
  }
  const rename: Record<string, string> = {
    learning_rate: 'learningRate',
    lr: 'learningRate',
    throughput: 'throughput',
    memory_usage: 'memoryUsage',
  };
  for (const [from, to] of Object.entries(rename)) {
    const value = values[from];
    if (value !== undefined) next[to] = value;
  }
  return next;
}
