import type { RunView } from './view.ts';

export const EXPORT_SECTIONS = ['parameters', 'metrics', 'artifacts', 'metadata'] as const;
export type ExportSection = (typeof EXPORT_SECTIONS)[number];

type Cell = string | number | boolean | null | undefined;

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, quote, CR or LF, quotes doubled. A text starting
 * with =, +, -, @, tab or CR gets a leading apostrophe so spreadsheets do not run it as a formula (OWASP
 * CSV injection); numbers are written as they are.
 */
export function csvField(value: Cell): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : '';
  if (typeof value === 'boolean') return String(value);
  const text = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export const EXPORT_COLUMNS =
  'One row per run, CRLF line ends, UTF-8. Always: run_id, run_name, training_job_id, status, created_at, ' +
  'completed_at. parameters: param.<name> for every parameter name of any run (sorted). metrics: ' +
  'metric.<name>.current, .best, .final for every metric name of any run (sorted). artifacts: ' +
  'artifact_count, artifact_paths (semicolon-separated). metadata: tags (semicolon-separated), notes, ' +
  'cost_usd, gpu_hours, training_time_seconds, copied_from_run_id, experiment_id, experiment_name, ' +
  'experiment_metadata (JSON). Empty cell = no value. Text starting with =, +, -, @ is prefixed with an ' +
  'apostrophe (CSV injection); parameter values that are objects are written as JSON.';

const sortedKeys = (records: Record<string, unknown>[]) =>
  [...new Set(records.flatMap((r) => Object.keys(r)))].sort();

const cellOf = (value: unknown): Cell =>
  value === null || ['string', 'number', 'boolean', 'undefined'].includes(typeof value)
    ? (value as Cell)
    : JSON.stringify(value);

/** The experiment's runs as CSV, with the sections asked for. */
export function runsCsv(
  experiment: { id: string; name: string; metadata: Record<string, unknown> },
  runs: readonly RunView[],
  include: ReadonlySet<ExportSection>,
): string {
  const header = ['run_id', 'run_name', 'training_job_id', 'status', 'created_at', 'completed_at'];
  const parameterNames = include.has('parameters') ? sortedKeys(runs.map((r) => r.parameters)) : [];
  const metricNames = include.has('metrics')
    ? sortedKeys(runs.flatMap((r) => [r.metrics.current, r.metrics.best, r.metrics.final ?? {}]))
    : [];
  header.push(...parameterNames.map((n) => `param.${n}`));
  for (const n of metricNames) header.push(`metric.${n}.current`, `metric.${n}.best`, `metric.${n}.final`);
  if (include.has('artifacts')) header.push('artifact_count', 'artifact_paths');
  if (include.has('metadata')) {
    header.push('tags', 'notes', 'cost_usd', 'gpu_hours', 'training_time_seconds', 'copied_from_run_id');
    header.push('experiment_id', 'experiment_name', 'experiment_metadata');
  }
  const lines = [header.map(csvField).join(',')];
  for (const run of runs) {
    const row: Cell[] = [run.id, run.name, run.trainingJobId, run.status, run.createdAt, run.completedAt];
    for (const n of parameterNames) row.push(cellOf(run.parameters[n]));
    for (const n of metricNames) {
      row.push(run.metrics.current[n], run.metrics.best[n], run.metrics.final?.[n]);
    }
    if (include.has('artifacts')) {
      row.push(run.artifacts.length, run.artifacts.map((a) => a.path).join(';'));
    }
    if (include.has('metadata')) {
      row.push(run.tags.join(';'), run.notes, run.cost, run.gpuHours, run.trainingTimeSeconds);
      row.push(run.copiedFromRunId, experiment.id, experiment.name, JSON.stringify(experiment.metadata));
    }
    lines.push(row.map(csvField).join(','));
  }
  return `${lines.join('\r\n')}\r\n`;
}
