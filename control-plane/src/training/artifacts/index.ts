import type { Clock } from '../../auth/clock.ts';
import type { Database } from '../../db/index.ts';
import type { TrainingService } from '../service.ts';
import type { HostFiles } from './host-files.ts';
import { ArtifactMeasurer } from './measurer.ts';
import { ArtifactService } from './service.ts';

export { ARTIFACT_REPORT } from './docs.ts';
export { agentHostFiles, type HostFiles } from './host-files.ts';
export { ArtifactService } from './service.ts';

/** Seconds between background measuring passes of new artifacts. */
const MEASURE_SECONDS = 60;

export interface TrainingArtifacts {
  service: ArtifactService;
  measurer: ArtifactMeasurer;
  start(): void;
  stop(): Promise<void>;
}

export function createTrainingArtifacts(deps: {
  db: Database;
  clock: Clock;
  training: TrainingService;
  files: HostFiles;
  onError: (error: unknown) => void;
}): TrainingArtifacts {
  const service = new ArtifactService(deps);
  const measurer = new ArtifactMeasurer({
    db: deps.db,
    artifacts: service,
    intervalSeconds: MEASURE_SECONDS,
    onError: deps.onError,
  });
  return {
    service,
    measurer,
    start: () => measurer.start(),
    stop: () => measurer.stop(),
  };
}
