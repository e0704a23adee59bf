import { newId } from '@anvil/shared';
import type { Database } from '../db/index.ts';

type Tx = Parameters<Parameters<Database['prisma']['$transaction']>[0]>[0];

const HOUR_MS = 3_600_000;
/** metadata.source of these records: their own watermark, apart from the workload-disk records of the job. */
export const ARTIFACT_SOURCE = 'training_artifacts';

interface ArtifactRow {
  job_id: string;
  account_id: string;
  created_by_id: string;
  size_bytes: string | number | bigint;
  created_at: Date;
  deleted_at: Date | null;
}

/**
 * Storage records for training artifacts (training/artifacts): each measured artifact's bytes, per job, from
 * max(its report, the end of the job's last artifact record, the end of the job's last GPU billing session)
 * to min(now, its deletion). Jobs with an open billing session are skipped: their container's disk figure
 * (which includes the volume the artifacts are in) bills them meanwhile, and the session's end is where
 * artifact billing picks up again, so no byte-hour is billed twice.
 */
export async function artifactStorageRecords(tx: Tx, now: Date, pricePerGbHour: number) {
  const rows = await tx.$queryRawUnsafe<ArtifactRow[]>(
    `SELECT a.job_id, a.account_id, j.created_by_id, a.size_bytes, a.created_at, a.deleted_at
       FROM training_artifacts a JOIN training_jobs j ON j.id = a.job_id
      WHERE a.size_bytes > 0 AND j.session_started_at IS NULL AND a.created_at < $1`,
    now,
  );
  if (rows.length === 0) return [];
  const jobIds = [...new Set(rows.map((r) => r.job_id))];
  const marks = await tx.$queryRawUnsafe<{ resource_id: string; kind: string; ended: Date }[]>(
    `SELECT resource_id, CASE WHEN kind = 'storage' THEN 'storage' ELSE 'compute' END AS kind, max(ended_at) AS ended
       FROM usage_records
      WHERE resource_type = 'training_job' AND resource_id = ANY($1::text[])
        AND (kind = 'gpu_compute' OR (kind = 'storage' AND metadata->>'source' = $2))
      GROUP BY 1, 2`,
    jobIds,
    ARTIFACT_SOURCE,
  );
  const mark = new Map(marks.map((m) => [`${m.kind}:${m.resource_id}`, new Date(m.ended).getTime()]));
  const totals = new Map<
    string,
    { accountId: string; userId: string; gbHours: number; start: number; bytes: number; artifacts: number }
  >();
  for (const row of rows) {
    const from = Math.max(
      new Date(row.created_at).getTime(),
      mark.get(`storage:${row.job_id}`) ?? 0,
      mark.get(`compute:${row.job_id}`) ?? 0,
    );
    const to = Math.min(now.getTime(), row.deleted_at ? new Date(row.deleted_at).getTime() : Infinity);
    if (to <= from) continue;
    const size = Number(row.size_bytes);
    const total = totals.get(row.job_id) ?? {
      accountId: row.account_id,
      userId: row.created_by_id,
      gbHours: 0,
      start: from,
      bytes: 0,
      artifacts: 0,
    };
    total.gbHours += (size / 1e9) * ((to - from) / HOUR_MS);
    total.start = Math.min(total.start, from);
    if (!row.deleted_at) {
      total.bytes += size;
      total.artifacts += 1;
    }
    totals.set(row.job_id, total);
  }
  return [...totals.entries()]
    .filter(([, t]) => t.gbHours > 0)
    .map(([jobId, t]) => ({
      id: newId('use'),
      accountId: t.accountId,
      userId: t.userId,
      resourceType: 'training_job',
      resourceId: jobId,
      kind: 'storage',
      quantity: t.gbHours,
      unit: 'GB-hours',
      cost: t.gbHours * pricePerGbHour,
      startedAt: new Date(t.start),
      endedAt: now,
      metadata: { source: ARTIFACT_SOURCE, bytes: t.bytes, artifacts: t.artifacts },
    }));
}
