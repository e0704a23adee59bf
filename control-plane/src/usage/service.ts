import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { UsageAlerts } from './alerts.ts';
import { GpuHistory } from './gpu-history.ts';
import { UsageRecords } from './records.ts';
import { UsageReports } from './reports.ts';

/** Usage reports and alerts of accounts (issue 6 point 5), built once per process. */
export interface UsageServices {
  records: UsageRecords;
  reports: UsageReports;
  alerts: UsageAlerts;
  start(): void;
  stop(): Promise<void>;
}

export function createUsageServices(deps: {
  db: Database;
  clock: Clock;
  accounts: AccountServices;
  intervalSeconds: number;
  logger: Logger;
}): UsageServices {
  const records = new UsageRecords(deps.db);
  const reports = new UsageReports({
    db: deps.db,
    clock: deps.clock,
    access: deps.accounts.access,
    settings: deps.accounts.settings,
    records,
    history: new GpuHistory(deps.db),
  });
  const alerts = new UsageAlerts({
    db: deps.db,
    clock: deps.clock,
    settings: deps.accounts.settings,
    notifier: deps.accounts.notifier,
    records,
    reports,
    intervalSeconds: deps.intervalSeconds,
    logger: deps.logger,
  });
  return {
    records,
    reports,
    alerts,
    start: () => alerts.start(),
    stop: () => alerts.stop(),
  };
}
