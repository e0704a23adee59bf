import type { AccessControl } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { loadTrainingJobSummaries } from '../training/summary.ts';
import type { SummaryLoader } from './runs.ts';
import { ExperimentService } from './service.ts';

export { ExperimentService } from './service.ts';

/** Experiments: rows of experiments and runs; what runs did is read from their training jobs. */
export function createExperiments(options: {
  db: Database;
  clock: Clock;
  access: AccessControl;
  logger: Logger;
  /** Where runs' jobs are read from (the training side's summaries unless a test says otherwise). */
  loadSummaries?: SummaryLoader;
}): ExperimentService {
  return new ExperimentService({
    db: options.db,
    clock: options.clock,
    access: options.access,
    logger: options.logger,
    loadSummaries: options.loadSummaries ?? loadTrainingJobSummaries,
  });
}
