/** How tuning works, shown in the tuning routes' OpenAPI descriptions. */
export const TUNING =
  'Every trial is a real training job (listed with tuneId, named "<base> trial <n>") made from the base job ' +
  'with the sampled parameters (config.training gets them, so the trainer sees ANVIL_HP_<NAME>). Search ' +
  'space: {name: {type uniform|log_uniform|int_uniform|int_log_uniform {min, max} | choice {values}, condition ' +
  '"<other> == <value>" or "!=" (the parameter is sampled only when it holds)}}; names are made snake_case; ' +
  'min >= max, a log scale with min <= 0, non-integer bounds of an integer type, an unknown type, a learning_rate ' +
  'outside 1e-6..1e-1 or a bad condition: 400 INVALID_SEARCH_SPACE {parameter, reason}. grid over uniform or ' +
  'log_uniform parameters: 400 ALGORITHM_NOT_SUPPORTED {algorithm, unsupportedParameterTypes}. Algorithms: grid ' +
  '(every combination in order, the last parameter fastest); random (independent uniform draws, log scales in ' +
  'log space); bayesian (a Gaussian process, RBF kernel of length 0.3 on the unit cube, fitted to the ' +
  'standardised values of finished trials with running ones at the mean; the next trial maximises expected ' +
  'improvement over 320 candidates; random until min(5, parameters + 2) trials finished); tpe (finished trials ' +
  'split into the best 25% and the rest, Parzen densities l and g per parameter, the candidate of 48 drawn from ' +
  'l with the highest l/g; random until 5 finished); hyperband (brackets s = s_max..0 with s_max = ' +
  'floor(log_eta(max_epochs / min_epochs)); bracket s starts ceil((s_max + 1) / (s + 1) x eta^s) random ' +
  'configurations at max_epochs x eta^-s epochs and keeps the best floor(n / eta) of each rung for eta times the ' +
  "epochs; the epochs parameter is set per trial). A trial's value is the last value of `metric` it reported; " +
  'trials that reported none rank last. early_stopping: a running trial whose metric did not improve on its ' +
  'best by more than min_delta over its last `patience` reports is stopped (SIGKILL) and counts as finished ' +
  '(status early_stopped). budget: before starting, when the base job has run, estimatedCost = its billed cost x ' +
  'max_trials (GPU-hours likewise); over max_cost or max_gpu_hours: 422 INSUFFICIENT_BUDGET {requestedTrials, ' +
  "estimatedCost, estimatedGpuHours, availableBudget}. While running, once the trials' billed cost or GPU-hours " +
  'reach the budget no trial starts, running ones are stopped and the tuning job completes (statusReason says ' +
  'so). Figures: progress {completedTrials = finished trials, totalTrials = max_trials, runningTrials, bestValue, ' +
  'percentage = 100 x completed / total}; bestTrial = the completed or early-stopped trial with the best value ' +
  '{id, parameters, metrics (last reported values), duration (billed seconds), cost, modelId (its latest ' +
  'checkpoint id)}; results {totalTrials, completedTrials (completed + early stopped), failedTrials, bestValue, ' +
  "baselineValue (the base job's last reported value), improvementOverBaseline = 100 x (baseline - best) / " +
  '|baseline| (maximize: best - baseline), totalDuration, totalCost (sums over trials)}; convergenceAnalysis ' +
  '{best_k = best value after k finished trials in completion order, w = max(3, ceil(n / 5)); converged = n >= 5 ' +
  'and |best_(n-w) - best_n| <= 1% of |best_n|; convergenceEpoch = the first k where best_k = best_n; ' +
  "remainingImprovement = |best_(n-w) - best_n|, the last window's gain; recommendation}; recommendations (the " +
  "best value within 5% of a numeric range's edge, a quarter or more of trials failed, converged); " +
  'estimatedDuration = mean finished-trial duration x remaining trials / max_concurrent (null before one ' +
  'finished); estimatedCompletion = now + estimatedDuration. States: running → completed (every trial finished, ' +
  'or the budget ran out), failed (every trial failed, or a trial could not be created), stopping → cancelled. ' +
  'All state is in the database: a restart carries the search on.';
