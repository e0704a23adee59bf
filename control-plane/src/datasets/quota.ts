import { ApiError } from '@anvil/shared';
import type { Database } from '../db/index.ts';

/**
 * The per-account storage quota of datasets: the bytes of every stored version plus the declared size
 * of multipart uploads in progress (their parts are on disk or on their way). Checked before an upload
 * starts (declared length) and again once its size is known; uploads running in parallel can each pass
 * the first check, so an account may overshoot by what it sends at the same moment.
 */
export class DatasetQuota {
  constructor(
    private readonly db: Database,
    private readonly limit: number | null,
  ) {}

  async usage(accountId: string): Promise<number> {
    const rows = await this.db.sql.query<{ bytes: string | null }>(
      `SELECT (
         COALESCE((SELECT SUM(v."size_bytes") FROM "dataset_versions" v
                   JOIN "datasets" d ON d."id" = v."dataset_id" WHERE d."account_id" = $1), 0)
       + COALESCE((SELECT SUM(u."declared_size") FROM "dataset_uploads" u
                   JOIN "datasets" d ON d."id" = u."dataset_id"
                   WHERE d."account_id" = $1 AND u."status" = 'active'), 0)
       )::text AS bytes`,
      [accountId],
    );
    return Number(rows[0]?.bytes ?? 0);
  }

  /** 403 QUOTA_EXCEEDED {currentUsage, quotaLimit, requestedSize} when `requested` more bytes do not fit. */
  async check(accountId: string, requested: number, alreadyCounted = 0): Promise<void> {
    if (this.limit === null) return;
    const current = (await this.usage(accountId)) - alreadyCounted;
    if (current + requested > this.limit) {
      throw new ApiError(
        'QUOTA_EXCEEDED',
        `the account's dataset storage quota of ${this.limit} bytes would be exceeded`,
        { currentUsage: current, quotaLimit: this.limit, requestedSize: requested },
      );
    }
  }
}
