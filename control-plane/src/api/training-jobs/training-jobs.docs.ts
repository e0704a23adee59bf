/** The design choices the spec leaves open, written once and shown in the OpenAPI descriptions. */

export const ACCESS =
  'Needs a key with the training scope (read for GET, write otherwise; service keys may call these routes) and ' +
  "a role holding the clusters scope (read for GET, execute otherwise: training runs on the account's GPUs). " +
  "Jobs belong to the account: another account's job answers 404 TRAINING_JOB_NOT_FOUND {jobId}.";

export const LIFECYCLE =
  'States: queued (waiting until every worker fits: gang placement, high priority first, then oldest) → ' +
  'pending (placed; containers starting) → running (every worker runs; the billing session opens) → completed ' +
  '(rank 0 exited 0) or failed (a worker exited non-zero, could not start, lost its container, or its host ' +
  'became unreachable; statusReason says which). stop: pending/running → stopping → stopped; queued → ' +
  'cancelled. resume: stopped/failed/cancelled → queued → pending → running. Pending and queued jobs are not ' +
  'billed. A control-plane restart loses nothing (every state is a row; the supervisor carries on); a job ' +
  "whose host dies fails and its containers are removed when that host's agent reconnects. Preemption: a " +
  'queued job that does not fit may take the GPUs of running training jobs of lower priority (high > normal > ' +
  "low) of its own account, or of any account when the operator's ANVIL_TRAINING_PREEMPTION is any-account " +
  '(off: never); the fewest victims are chosen, lowest priority and latest started first, and only when they ' +
  'free enough. A victim goes running → stopping (SIGTERM: checkpoint and exit, the stop grace period) → queued ' +
  '(its billing session closed; attempt + 1, resumedFrom its latest checkpoint) and runs again when GPUs free. ' +
  'Each preemption adds 1 to preemptions, sets preemptedAt, writes an audit event (training_preemption) and a ' +
  "training.preempted webhook event to the victim's account. Clusters and endpoint workers are never preempted.";

export const FIGURES =
  "Every figure comes from the trainer's reports, the clock and the price table (null when unknown): metrics " +
  '{currentLoss = the latest reported loss, bestLoss = the lowest reported loss, learningRate, throughput, ' +
  'memoryUsage = the latest reported values}; progress {currentEpoch, currentStep, totalEpochs (reported, else ' +
  'parameters.epochs), totalSteps (reported), percentage = 100 x currentStep / totalSteps (else currentEpoch / ' +
  'totalEpochs; 100 when completed), elapsedTime = seconds the containers have run (billed time), ' +
  'remainingTime = elapsedTime x (1 - fraction) / fraction}; resourceUsage {gpuHours = billed hours x GPUs of ' +
  'all workers, cost = sum of closed sessions (usage records) + the open one at the hourly rate fixed at ' +
  'placement, efficiency null (not measured)}; estimatedCost {hourly = GPU price x GPUs per worker x workers ' +
  '(fixed at placement; the current price before), total = hourly x (elapsed + remaining hours)}; ' +
  'estimatedCompletion = now + remainingTime while running; checkpoints [{id, epoch, step, loss, path, size, ' +
  'createdAt}] as reported.';
