import type { Experiment } from '../db/generated/client.ts';
import type { JobArtifactSummary } from '../training/summary.ts';
import type { Baseline, ExperimentStatistics, Insight } from './analysis.ts';
import { directionOf, type RunMetrics } from './metrics.ts';
import { type RunState, runParameters, runStatus, trainingSeconds } from './runs.ts';

export interface RunView {
  id: string;
  experimentId: string;
  trainingJobId: string;
  name: string;
  status: string;
  parameters: Record<string, unknown>;
  metrics: RunMetrics;
  artifacts: JobArtifactSummary[];
  tags: string[];
  notes: string | null;
  cost: number | null;
  gpuHours: number | null;
  trainingTimeSeconds: number | null;
  startedAt: string | null;
  copiedFromRunId: string | null;
  createdAt: string;
  updatedAt: string;
  completedAt: string | null;
}

/** Artifacts of a run's job: the files its trainer reported and its checkpoints (training/artifacts). */
function artifactsOf(state: RunState): JobArtifactSummary[] {
  return state.job?.artifacts ?? [];
}

export function viewRun(state: RunState, now: Date, artifactsVisible: boolean): RunView {
  const { row, job } = state;
  return {
    id: row.id,
    experimentId: row.experimentId,
    trainingJobId: row.trainingJobId,
    name: row.name,
    status: runStatus(state),
    parameters: runParameters(state),
    metrics: state.observations.metrics,
    // Archived with preserve_artifacts false: the experiment no longer lists them.
    artifacts: artifactsVisible ? artifactsOf(state) : [],
    tags: row.tags,
    notes: row.notes,
    cost: job?.cost ?? null,
    gpuHours: job?.gpuHours ?? null,
    trainingTimeSeconds: trainingSeconds(job, now),
    startedAt: job?.startedAt ?? null,
    copiedFromRunId: row.copiedFromRunId,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
    completedAt: job?.completedAt ?? null,
  };
}

const iso = (value: Date | null) => (value ? value.toISOString() : null);

export function viewExperimentSummary(row: Experiment, runCount: number) {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    status: row.status,
    hypothesis: row.hypothesis,
    tags: row.tags,
    primaryMetric: { name: row.primaryMetric, direction: directionOf(row.primaryMetric) },
    runCount,
    clonedFrom: row.clonedFromId,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
    completedAt: iso(row.completedAt),
    archivedAt: iso(row.archivedAt),
  };
}

export function viewExperiment(
  row: Experiment,
  runs: RunView[],
  statistics: ExperimentStatistics,
  insights: Insight[],
) {
  return {
    ...viewExperimentSummary(row, runs.length),
    metadata: row.metadata as Record<string, unknown>,
    baseline: row.baseline as Baseline | null,
    conclusion: row.conclusion,
    archive: row.archivedAt
      ? {
          reason: row.archiveReason,
          preserveArtifacts: row.preserveArtifacts,
          archivedAt: iso(row.archivedAt),
        }
      : null,
    runs,
    statistics,
    insights,
  };
}
