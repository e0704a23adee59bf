import { INSIGHT_RULES, STATISTICS_RULES } from '../../experiments/analysis.ts';
import { SIGNIFICANCE } from '../../experiments/compare.ts';
import { EXPORT_COLUMNS } from '../../experiments/csv.ts';
import { DIRECTION_RULE, WINDOW_RULE } from '../../experiments/metrics.ts';
import { MAX_RUNS_PER_EXPERIMENT } from '../../experiments/service.ts';
import { SPEARMAN_EXACT_MAX_N } from '../../experiments/statistics.ts';

/** The design choices the spec leaves open, written once and shown in the OpenAPI descriptions. */

export const ACCESS =
  'Needs a key with the training scope (read for GET, write otherwise) and a member role holding read ' +
  '(GET, compare, export) or write (changes) on clusters, where training lives (viewer: read; developer, ' +
  'admin, owner: both), else 403 INSUFFICIENT_PERMISSIONS. Experiments belong to the account: another ' +
  "account's experiment answers 404 EXPERIMENT_NOT_FOUND {experimentId}.";

export const RUNS =
  'A run links one training job of the account. Everything a run shows about its job is read from the job ' +
  'at each request, never stored: status = the job status (pending, queued, running, stopping, stopped, ' +
  'completed, failed, cancelled; `deleted` once the job is gone); parameters = the job hyperparameters plus ' +
  'names given at link time that the job lacks; metrics from the job trainer reports (its metric ' +
  'history): current = the latest value of each metric, best = its minimum or maximum over every report ' +
  '(direction rule below), final = current once the job is completed, else null; a job without a report ' +
  "history shows its summary's latest loss (best: bestLoss), learning_rate and throughput. cost (USD) and " +
  "gpuHours = the job's billed usage so far; trainingTimeSeconds = (completedAt, or now while running or " +
  'stopping) − startedAt, null when the job never started or stopped without completing; completedAt = ' +
  "the job's. artifacts: the job's artifacts and checkpoints as GET /v2/training/jobs/{id}/artifacts lists " +
  'them {id, type, name, path, sizeBytes, sha256, downloadUrl, createdAt} (none after an archive with ' +
  'preserve_artifacts false). ' +
  `${DIRECTION_RULE}`;

export const STATISTICS = `${STATISTICS_RULES} Insights come only from these computed comparisons, each with the rule that produced it: ${INSIGHT_RULES.join(' ')} ${WINDOW_RULE}`;

export const LIFECYCLE =
  'Status: active at creation; PATCH status completed (sets completedAt) or active (reopens, clears it); ' +
  'POST archive sets archived, which is final: an archived experiment keeps its runs and can be read, ' +
  'annotated (name, description, conclusion, tags, metadata), compared, exported and cloned, but takes no ' +
  'new runs and no status change (409 EXPERIMENT_ARCHIVED {experimentId, status, archivedAt, suggestion}).';

export const COMPARE =
  'Compares the completed runs among `runs` (default: every run of the experiment; a run id of another ' +
  'experiment: 404 RUN_NOT_FOUND {runId, experimentId}); fewer than 2 completed: 422 INSUFFICIENT_RUNS ' +
  '{completedRuns, minimumRequired: 2, runs [{id, status}]}. Runs that are not completed are listed in ' +
  'excludedRuns. metrics default: the primary metric, then every metric all completed runs have a final ' +
  `value of (sorted), at most 20. Directions: \`directions\` {metric: minimize|maximize}, else the naming rule. ${DIRECTION_RULE} ` +
  'Each value is the run final value (metrics.final). rankings: per metric, best first, competition ' +
  'ranking (equal values share the better rank: 1, 2, 2, 4); runs without the metric in `missing`. ' +
  "statistical_analysis (analysis.statistical_tests, default true): per metric, Welch's t-test of the " +
  'top-ranked run against each other ranked run over their samples: t = (x̄a − x̄b) / √(sa²/na + sb²/nb), ' +
  'sa² the sample variance (n − 1), Welch–Satterthwaite df = (sa²/na + sb²/nb)² / ((sa²/na)²/(na − 1) + ' +
  '(sb²/nb)²/(nb − 1)), two-sided pValue = I_{df/(df+t²)}(df/2, 1/2) (regularized incomplete beta, computed ' +
  'by its continued fraction; ln Γ by Lanczos); both samples constant: t = 0, p = 1 when the means are ' +
  `equal, t = null (infinite) and p = 0 otherwise. ${WINDOW_RULE} pValueHolm = Holm–Bonferroni over the ` +
  'tests of that metric: p sorted ascending, adj(i) = max over j ≤ i of min(1, (m − j + 1)·p(j)); ' +
  `significant = pValueHolm < ${SIGNIFICANCE}. Pairs with fewer than 2 samples on a side go to \`skipped\`. ` +
  'Reports of one run are successive and correlated, so p-values overstate certainty; read them as a guide. ' +
  'correlations (analysis.correlation_analysis, default true): for every numeric parameter and metric over ' +
  'the runs holding both (3+ runs, neither side constant): Pearson r = Σ(x − x̄)(y − ȳ) / √(Σ(x − x̄)²·Σ(y − ȳ)²) ' +
  'and Spearman ρ = Pearson r of the average ranks (ties share the mean rank). Pearson pValue from t = ' +
  'r·√((n − 2)/(1 − r²)) with n − 2 degrees of freedom (|r| = 1: 0); Spearman pValue exact (method exact: ' +
  `the share of all n! pairings of the ranks with |ρ| at least the observed) up to ${SPEARMAN_EXACT_MAX_N} ` +
  'runs, the same t approximation above (method t_approximation). pareto_frontier ' +
  '(analysis.performance_pareto, default true): among runs holding every compared metric, those no other ' +
  'run dominates (at least as good on every metric in its direction and strictly better on one), with ' +
  'the metrics they are best on among the frontier. recommendations, each with its rule: dominant_run (the ' +
  'frontier holds one run, 2+ metrics), significant_winner / inconclusive (every / not every test of the ' +
  `top run has pValueHolm < ${SIGNIFICANCE}), parameter_direction (Spearman p < ${SIGNIFICANCE}). A flag ` +
  'set false answers that section as null.';

export const EXPORT =
  'Answers the CSV itself (200, text/csv; charset=utf-8, Content-Disposition attachment; filename ' +
  '"<experiment id>.csv"), read now like GET. format: csv only. include: any of parameters, metrics, ' +
  `artifacts, metadata (default all). ${EXPORT_COLUMNS} destination: omitted or {type: "download"}; ` +
  'Anvil has no object-storage credentials, so any other type (s3, gcs, azure, ...) answers 400 ' +
  'DESTINATION_NOT_CONFIGURED {type, supportedTypes} rather than pretending to upload. Archived ' +
  'with preserve_artifacts false: artifact columns stay empty.';

export const LIMITS = `An experiment holds at most ${MAX_RUNS_PER_EXPERIMENT} runs (more: 403 LIMIT_EXCEEDED {limit, current}).`;
