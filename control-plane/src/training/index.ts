import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import type { DatasetStorage } from '../datasets/storage.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import { type Logger, silentLogger } from '../logger.ts';
import { Signal } from '../util/signal.ts';
import type { PreemptionPolicy } from './contract.ts';
import { Launcher } from './launcher.ts';
import { Preemption } from './preemption.ts';
import { TrainingRecipes } from './recipes.ts';
import { ReportReader } from './reports.ts';
import { TrainingService } from './service.ts';
import { TrainingSupervisor, type TrainingSupervisorOptions } from './supervisor.ts';
import { TuningDriver } from './tuning/driver.ts';
import { TuningService } from './tuning/service.ts';

export type { TrainingJobSummary } from './summary.ts';
export { loadTrainingJobSummaries } from './summary.ts';

/** Training jobs and tuning: built once per process, started and stopped with it. */
export interface Training {
  service: TrainingService;
  tuning: TuningService;
  supervisor: TrainingSupervisor;
  reports: ReportReader;
  recipes: TrainingRecipes;
  start(): void;
  stop(): Promise<void>;
}

export function createTraining(deps: {
  db: Database;
  clock: Clock;
  fleet: Fleet;
  accounts: AccountServices;
  datasetStorage: DatasetStorage;
  supervisor?: TrainingSupervisorOptions;
  /** ANVIL_TRAINING_PREEMPTION (default same-account). */
  preemption?: PreemptionPolicy;
  logger?: Logger;
}): Training {
  const logger = deps.logger ?? silentLogger;
  // The service changes jobs; the supervisor, built after it (it calls the service), acts on the change now.
  const changed = new Signal();
  const launcher = new Launcher(deps.db, deps.clock, deps.fleet.events);
  const reports = new ReportReader(deps.db, deps.clock);
  const recipes = new TrainingRecipes(deps.db, deps.clock);
  const service = new TrainingService({ ...deps, launcher, reports, recipes, logger, changed });
  const preemption = new Preemption({
    db: deps.db,
    clock: deps.clock,
    audit: deps.accounts.audit,
    policy: deps.preemption ?? 'same-account',
    signal: (job, signal) => service.signal(job, signal),
    logger,
  });
  const supervisor = new TrainingSupervisor(
    { db: deps.db, clock: deps.clock, service, launcher, reports, preemption, logger },
    deps.supervisor,
  );
  const driver = new TuningDriver({
    db: deps.db,
    clock: deps.clock,
    training: service,
    logger,
  });
  const tuning = new TuningService({
    db: deps.db,
    clock: deps.clock,
    training: service,
    driver,
    kick: () => supervisor.kick(),
  });
  changed.listen(() => supervisor.kick());
  supervisor.afterPass(() => driver.advanceAll());
  // A worker's container changing (running, exited, gone) moves its job now rather than at the next pass.
  const unsubscribe = deps.fleet.workloads.onContainerState(async ({ workloadId }) => {
    if (workloadId.startsWith('job_')) supervisor.kick();
  });
  // A worker's last log lines stored: a preempted job waiting for its SIGTERM checkpoint goes on now.
  const unsubscribeLogs = deps.fleet.telemetry.onLogsComplete((workloadIds) => {
    if (workloadIds.some((id) => id.startsWith('job_'))) supervisor.kick();
  });
  return {
    service,
    tuning,
    supervisor,
    reports,
    recipes,
    start() {
      supervisor.start();
    },
    async stop() {
      unsubscribe();
      unsubscribeLogs();
      await supervisor.stop();
    },
  };
}
