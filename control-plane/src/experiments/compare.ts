import { better, type Direction, finalWindow } from './metrics.ts';
import { type RunState, runParameters, runStatus } from './runs.ts';
import { holmAdjust, pearson, spearman, welchTTest } from './statistics.ts';

export const SIGNIFICANCE = 0.05;

export interface CompareOptions {
  metrics: { name: string; direction: Direction }[];
  statisticalTests: boolean;
  correlationAnalysis: boolean;
  performancePareto: boolean;
}

export interface WelchEntry {
  metric: string;
  test: 'welch_t';
  runA: string;
  runB: string;
  meanA: number;
  meanB: number;
  nA: number;
  nB: number;
  t: number | null;
  df: number;
  pValue: number;
  pValueHolm: number;
  significant: boolean;
}

export interface SkippedTest {
  metric: string;
  runA: string;
  runB: string;
  reason: string;
}

export interface CorrelationEntry {
  parameter: string;
  metric: string;
  n: number;
  pearson: { r: number; pValue: number };
  spearman: { rho: number; pValue: number; method: 'exact' | 't_approximation' };
}

interface Scored {
  state: RunState;
  value: number;
}

const round = (value: number, digits = 6) => Number(value.toPrecision(digits));

/** Completed runs holding a final value of `metric`. */
function scored(states: readonly RunState[], metric: string): Scored[] {
  return states.flatMap((state) => {
    const value = state.observations.metrics.final?.[metric];
    return value === undefined ? [] : [{ state, value }];
  });
}

/** Competition ranking ("1224"): equal values share the better rank. */
function rank(entries: Scored[], direction: Direction) {
  const sorted = [...entries].sort((a, b) =>
    better(a.value, b.value, direction) ? -1 : better(b.value, a.value, direction) ? 1 : 0,
  );
  return sorted.map((entry, i) => {
    let position = i;
    while (position > 0 && sorted[position - 1]!.value === entry.value) position--;
    return {
      rank: position + 1,
      runId: entry.state.row.id,
      runName: entry.state.row.name,
      value: entry.value,
    };
  });
}

function rankings(states: readonly RunState[], options: CompareOptions) {
  return options.metrics.map(({ name, direction }) => {
    const entries = scored(states, name);
    const have = new Set(entries.map((e) => e.state.row.id));
    return {
      metric: name,
      direction,
      ranking: rank(entries, direction),
      missing: states.filter((s) => !have.has(s.row.id)).map((s) => s.row.id),
    };
  });
}

/** Welch's test of the top-ranked run of each metric against every other ranked run, Holm-adjusted per metric. */
function statisticalTests(states: readonly RunState[], options: CompareOptions) {
  const tests: WelchEntry[] = [];
  const skipped: SkippedTest[] = [];
  for (const { name, direction } of options.metrics) {
    const ranked = rank(scored(states, name), direction);
    const top = ranked[0];
    if (!top) continue;
    const byId = new Map(states.map((s) => [s.row.id, s]));
    const topSamples = finalWindow(byId.get(top.runId)!.observations.series.get(name) ?? []);
    const done: { other: string; result: NonNullable<ReturnType<typeof welchTTest>> }[] = [];
    for (const entry of ranked.slice(1)) {
      const samples = finalWindow(byId.get(entry.runId)!.observations.series.get(name) ?? []);
      const result = welchTTest(topSamples, samples);
      if (!result) {
        skipped.push({
          metric: name,
          runA: top.runId,
          runB: entry.runId,
          reason: `Welch's t-test needs 2+ reported values on each side (have ${topSamples.length} and ${samples.length})`,
        });
        continue;
      }
      done.push({ other: entry.runId, result });
    }
    const adjusted = holmAdjust(done.map((d) => d.result.pValue));
    done.forEach(({ other, result }, i) => {
      tests.push({
        metric: name,
        test: 'welch_t' as const,
        runA: top.runId,
        runB: other,
        meanA: result.meanA,
        meanB: result.meanB,
        nA: result.nA,
        nB: result.nB,
        t: Number.isFinite(result.t) ? result.t : null,
        df: result.df,
        pValue: result.pValue,
        pValueHolm: adjusted[i]!,
        significant: adjusted[i]! < SIGNIFICANCE,
      });
    });
  }
  return { alpha: SIGNIFICANCE, tests, skipped };
}

/** Pearson and Spearman between every numeric parameter and every metric, over runs holding both. */
function correlations(states: readonly RunState[], options: CompareOptions) {
  const out: CorrelationEntry[] = [];
  const parameters = states.map((s) => runParameters(s));
  const names = [...new Set(parameters.flatMap((p) => Object.keys(p)))].sort();
  for (const parameter of names) {
    for (const { name: metric } of options.metrics) {
      const xs: number[] = [];
      const ys: number[] = [];
      states.forEach((state, i) => {
        const x = parameters[i]![parameter];
        const y = state.observations.metrics.final?.[metric];
        if (typeof x === 'number' && Number.isFinite(x) && y !== undefined) {
          xs.push(x);
          ys.push(y);
        }
      });
      if (xs.length < 3) continue;
      const p = pearson(xs, ys);
      const s = spearman(xs, ys);
      if (!p || !s) continue;
      out.push({
        parameter,
        metric,
        n: xs.length,
        pearson: { r: p.coefficient, pValue: p.pValue },
        spearman: { rho: s.coefficient, pValue: s.pValue, method: s.method },
      });
    }
  }
  return out;
}

/** Runs no other run dominates (as good on every metric, better on one), among runs holding every metric. */
function paretoFrontier(states: readonly RunState[], options: CompareOptions) {
  const metrics = options.metrics;
  const points = states.flatMap((state) => {
    const final = state.observations.metrics.final;
    if (!final || metrics.some((m) => final[m.name] === undefined)) return [];
    return [{ state, values: metrics.map((m) => final[m.name]!) }];
  });
  const dominates = (a: number[], b: number[]) =>
    metrics.every((m, i) => !better(b[i]!, a[i]!, m.direction)) &&
    metrics.some((m, i) => better(a[i]!, b[i]!, m.direction));
  const frontier = points.filter((p) => !points.some((q) => q !== p && dominates(q.values, p.values)));
  return frontier.map((p) => {
    const bestOn = metrics.filter((m, i) =>
      frontier.every((q) => !better(q.values[i]!, p.values[i]!, m.direction)),
    );
    const described = metrics.map((m, i) => `${m.name} ${round(p.values[i]!)}`).join(', ');
    return {
      runId: p.state.row.id,
      reason:
        bestOn.length > 0
          ? `best ${bestOn.map((m) => `${m.name} (${m.direction}d)`).join(', ')}: ${described}; no run is as good on every metric and better on one`
          : `trade-off (${described}): no run is as good on every metric and better on one`,
      values: Object.fromEntries(metrics.map((m, i) => [m.name, p.values[i]!])),
    };
  });
}

function recommendations(
  options: CompareOptions,
  ranked: ReturnType<typeof rankings>,
  tests: ReturnType<typeof statisticalTests> | null,
  correlationList: CorrelationEntry[] | null,
  frontier: ReturnType<typeof paretoFrontier> | null,
) {
  const out: { type: string; message: string; rule: string; runId: string | null }[] = [];
  if (frontier && frontier.length === 1 && options.metrics.length > 1) {
    out.push({
      type: 'dominant_run',
      runId: frontier[0]!.runId,
      message: `Run ${frontier[0]!.runId} is at least as good as every other run on all compared metrics.`,
      rule: 'The Pareto frontier holds a single run.',
    });
  }
  for (const entry of ranked) {
    const top = entry.ranking[0];
    if (!top || !tests) continue;
    const mine = tests.tests.filter((t) => t.metric === entry.metric);
    if (mine.length === 0) continue;
    const unclear = mine.filter((t) => !t.significant);
    out.push(
      unclear.length === 0
        ? {
            type: 'significant_winner',
            runId: top.runId,
            message: `Run ${top.runName} is significantly better on ${entry.metric} than every other tested run (Holm-adjusted p < ${SIGNIFICANCE}).`,
            rule: `Every Welch test of the top-ranked run on the metric has a Holm-adjusted p below ${SIGNIFICANCE}.`,
          }
        : {
            type: 'inconclusive',
            runId: top.runId,
            message: `Run ${top.runName} leads on ${entry.metric}, but not significantly over ${unclear
              .map((t) => t.runB)
              .join(', ')}: gather more runs or longer histories before choosing.`,
            rule: `A Welch test of the top-ranked run on the metric has a Holm-adjusted p of ${SIGNIFICANCE} or more.`,
          },
    );
  }
  for (const c of correlationList ?? []) {
    const s = c.spearman;
    if (!(s.pValue < SIGNIFICANCE)) continue;
    const metric = options.metrics.find((m) => m.name === c.metric)!;
    const higherIsBetter = s.rho > 0 === (metric.direction === 'maximize');
    out.push({
      type: 'parameter_direction',
      runId: null,
      message: `Try ${higherIsBetter ? 'higher' : 'lower'} ${c.parameter}: it goes with better ${metric.name} (Spearman ρ = ${round(s.rho, 3)}, p = ${round(s.pValue, 3)}, ${c.n} runs).`,
      rule: `Spearman's ρ between the parameter and the metric has p < ${SIGNIFICANCE}.`,
    });
  }
  return out;
}

/** The comparison of completed runs: rankings, tests, correlations, Pareto frontier, recommendations. */
export function compareRuns(states: readonly RunState[], options: CompareOptions) {
  const completed = states.filter((s) => runStatus(s) === 'completed');
  const ranked = rankings(completed, options);
  const tests = options.statisticalTests ? statisticalTests(completed, options) : null;
  const correlationList = options.correlationAnalysis ? correlations(completed, options) : null;
  const frontier = options.performancePareto ? paretoFrontier(completed, options) : null;
  return {
    rankings: ranked,
    statistical_analysis: tests,
    correlations: correlationList,
    pareto_frontier: frontier,
    recommendations: recommendations(options, ranked, tests, correlationList, frontier),
  };
}
