import { AUTOSCALING_FORMULA } from '../../serverless/autoscaler.ts';
import { BOUNDS } from '../../serverless/configuration.ts';
import { DEFAULT_SYNC_WAIT_MS, HEALTH_WINDOW_MS, MAX_SYNC_WAIT_MS } from '../../serverless/execution.ts';
import { MAX_ATTEMPTS } from '../../serverless/jobs.ts';
import { WEBHOOK_DELAYS_MS } from '../../serverless/maintenance.ts';
import { RUNPOD_PING_INTERVAL_MS } from '../../serverless/runpod/environment.ts';
import { DEFAULT_HOLD_MS } from '../../serverless/runpod/worker-api.ts';

/** The design choices the spec leaves open, written once and shown in the OpenAPI descriptions. */

export const ACCESS =
  'Needs a key with the endpoints scope (read for GET, write otherwise) and, for the member, endpoints:read ' +
  "to look, endpoints:write to change (role, grants and shares decide). Another account's endpoint, a deleted " +
  'one or an unknown id answers 404 ENDPOINT_NOT_FOUND {endpointId, suggestion}.';

export const EXEC_ACCESS =
  'Needs a key with the endpoints scope (service keys reach these routes) and endpoints:execute for the member ' +
  "(read for GET). Another account's endpoint answers 404 ENDPOINT_NOT_FOUND, a job of another endpoint, an " +
  'unknown one, or a finished one past its ttl 404 JOB_NOT_FOUND. POST /run and /runsync count against the ' +
  'spec’s POST /endpoints/*/execute limit (500/h), GET routes against GET /endpoints/* (1000/h).';

const bounds = Object.entries(BOUNDS)
  .filter(([field]) => field !== 'gpuCount')
  .map(([field, [min, max]]) => `${field} ${min}-${max}`)
  .join(', ');

export const CONFIGURATION =
  `Bounds: ${bounds}; a value outside them answers 400 INVALID_CONFIGURATION {field, value, maximum} (or ` +
  'minimum); minWorkers > maxWorkers too. environmentVariables: at most 100 names [A-Za-z_][A-Za-z0-9_]*, none ' +
  'starting with ANVIL_ (reserved). With autoScaling.enabled false the endpoint runs workerCount workers; with ' +
  `it on, workerCount is the starting size and the autoscaler decides after: ${AUTOSCALING_FORMULA}`;

/** How endpoints are billed (billing/worker-sessions.ts). */
export const BILLING =
  'Billing: workers bill their uptime, as RunPod bills active workers: from when a worker’s container runs ' +
  '(model loading and idle time included) until the worker is removed (scaled down, drained, replaced, failed, ' +
  'lost or the endpoint deleted), per second at the GPU type’s price × gpuCount fixed when the worker was ' +
  'placed; a worker whose container never started costs nothing. Each worker session becomes a usage record ' +
  'of kind gpu_compute (resource type endpoint) when it ends and counts up to now in the usage reports while ' +
  'open. Executions are recorded (kind execution) with cost 0, their GPU time being part of the uptime. Scale ' +
  'to zero to stop paying for idle workers.';

/** The second worker contract (endpoints/runpod/). */
export const RUNPOD_PROTOCOL =
  'configuration.workerProtocol runpod runs RunPod serverless worker images unchanged: instead of serving ' +
  'workerPort, RunPod’s worker library pulls its jobs from the URLs in RUNPOD_WEBHOOK_GET_JOB (job-take long ' +
  `poll, held ${DEFAULT_HOLD_MS / 1000} s, 204 when nothing came; job-take-batch with batch_size), ` +
  'RUNPOD_WEBHOOK_POST_OUTPUT (job-done: {output} COMPLETED, {error} FAILED, {status: IN_PROGRESS, output} a ' +
  'progress update shown as the running job’s output, stopPod: true drains the worker), ' +
  'RUNPOD_WEBHOOK_POST_STREAM ({output}: one /stream chunk; after a stream the output is the list of chunks) ' +
  `and RUNPOD_WEBHOOK_PING (every RUNPOD_PING_INTERVAL = ${RUNPOD_PING_INTERVAL_MS} ms), and the job-stop long ` +
  'poll names the jobs it must stop (cancelled or timed out). RUNPOD_POD_ID is the worker id. Those URLs lead ' +
  'to a port the agent of the worker’s host serves (ANVIL_WORKER_API_PORT, default 7071, at the host name ' +
  'anvil-agent) and relays to the control plane over its own connection, so hosts behind NAT work and no ' +
  'control-plane address reaches the container; the agent answers only its own containers there. Every ' +
  'request needs the worker’s own token (RUNPOD_AI_API_KEY, sent as the Authorization header), taken only from ' +
  'that worker’s container and only while the worker is starting, ready or draining: once it stops, the ' +
  'token is void (401). The worker is ready at its first contact (ping or job-take) and failed after ' +
  `${(3 * RUNPOD_PING_INTERVAL_MS) / 1000} s without one.`;

/** Scale to zero and cold starts. */
export const COLD_START =
  'Scale to zero: with autoScaling.minWorkers 0 the endpoint drops to no workers (status inactive, nothing ' +
  'billed) once idle past scaleDownCooldown; a job queued then starts a worker. delayTime (queued to started) ' +
  'therefore includes the cold start: placement, image pull, container start and the worker’s readiness. ' +
  '/v2/endpoints/<id>/health shows it as checks.model.loadTime (placement to ready), and /metrics as ' +
  'anvil_endpoint_cold_start_ms and anvil_endpoint_delay_ms (p50 and p95 over 15 min).';

export const WORKERS =
  'Workers: each worker is a container of `image` (command as given, or the template’s startup script) with ' +
  'gpuCount GPUs of gpuType, placed on a ready GPU host like a cluster (best fit; hosts already holding a ' +
  'worker of the endpoint come last, so one host going away takes as few as possible) and counted in the same ' +
  'capacity index, so clusters and workers never share a GPU. Workers do not reserve CPU, memory or disk. ' +
  'Environment: the configuration’s variables plus ANVIL_ENDPOINT_ID, ANVIL_WORKER_ID, ANVIL_WORKER_PORT, ' +
  'ANVIL_MAX_CONCURRENCY, ANVIL_GPU_COUNT. The worker contract (HTTP/1.1 on workerPort, default 8000, reached ' +
  'through the agent’s reverse tunnel, so hosts behind NAT work and the container holds no credentials): ' +
  '`GET /health` answers 2xx once the worker can take jobs (until then it is `starting`; 15 min without it ' +
  'fails it); `POST /run` with `{"id", "input"}` answers `{"output": …}` (COMPLETED) or `{"error": "…"}` ' +
  '(FAILED) as JSON, or streams `application/x-ndjson` lines `{"output": …}` (each a /stream chunk; the ' +
  'output is then the list of chunks) ending with an optional `{"error": "…"}` line. A non-2xx answer without ' +
  '`error`, or a body that is not JSON, fails the job; answers are capped at 20 MB. A job leaves the queue ' +
  'only when a ready worker has a free slot (maxConcurrency), which is pull semantics without giving workers ' +
  `credentials. A worker whose container exits or fails, whose host becomes unreachable, or that fails GET ` +
  '/health 3 times in a row (checked every 10 s) is removed and replaced; its running jobs go back to the ' +
  `queue (after ${MAX_ATTEMPTS} such losses a job FAILS). After 3 workers fail in a row without one becoming ` +
  'ready the endpoint is `error` and a new worker is tried every 30 s. Status: pending (no worker ready yet; ' +
  'statusReason says why), active (a worker is ready), inactive (no workers wanted: autoScaling at 0), ' +
  'updating (after PUT, until every worker runs the new configuration and the count is reached), error. ' +
  `${RUNPOD_PROTOCOL} ${COLD_START} ${BILLING}`;

export const EXECUTION =
  'Statuses: IN_QUEUE → IN_PROGRESS → COMPLETED | FAILED | TIMED_OUT; IN_QUEUE or IN_PROGRESS → CANCELLED ' +
  '(/cancel, /purge-queue, endpoint deleted) or TIMED_OUT (ttl); FAILED or TIMED_OUT → IN_QUEUE (/retry). ' +
  'policy.executionTimeout (ms, 5 s to 24 h, default the endpoint’s timeoutSeconds) bounds the run on a worker; ' +
  'policy.ttl (ms, 10 s to 7 days, default 24 h) bounds the whole life of the job from submission: a job not ' +
  'finished by then is TIMED_OUT, and after it the job’s input, output and stream are dropped and its id ' +
  'answers 404. The queue is durable (PostgreSQL or the embedded database): a control-plane restart loses no ' +
  'job; jobs running on a replica that stops are queued again at once, on one that dies when their 15 s lease ' +
  'runs out (delivery is at least once, as RunPod’s). Several replicas claim jobs with FOR UPDATE SKIP LOCKED ' +
  'under the worker’s row lock, so no job runs twice at once and no worker gets more than maxConcurrency. ' +
  `webhook: POSTed the job’s status object (plus endpointId) as JSON once it is final; tried at once, then ` +
  `${WEBHOOK_DELAYS_MS.map((d) => `${d / 1000} s`).join(' and ')} later; a 2xx ends it; private targets are ` +
  'refused (checked again after DNS) unless ANVIL_OUTBOUND_ALLOW_PRIVATE=true. Each run on a worker is recorded ' +
  'as one usage record (kind execution, cost 0): GPU hours = (completed − started) × gpuCount; what is billed ' +
  'is the workers’ uptime (see Billing).';

export const RUNSYNC = `Queues the job, then waits up to ?wait= ms (default ${DEFAULT_SYNC_WAIT_MS}, at most 300000) for it to finish. Answers 200 with the job status either way: COMPLETED with output, FAILED with error, or still IN_QUEUE / IN_PROGRESS with its id to poll /status or wait on /status-sync.`;

export const STATUS_SYNC = `Waits up to ?wait= ms (default ${DEFAULT_SYNC_WAIT_MS}, at most ${MAX_SYNC_WAIT_MS}, as runsync) for the job to reach COMPLETED, FAILED, CANCELLED or TIMED_OUT, and answers 200 with its status as soon as it does, or its current status (IN_QUEUE / IN_PROGRESS) when the wait ends; a finished job is answered at once. A wait outside 0–${MAX_SYNC_WAIT_MS} or not an integer is 400 VALIDATION_ERROR.`;

export const QUEUE_HEALTH = `jobs.inQueue and inProgress now; completed, failed, cancelled, timedOut (by completion) and retried in the last ${HEALTH_WINDOW_MS / 3_600_000} h. workers: ready = idle (no running job) + running, initializing (container starting or GET /health not yet 2xx), draining (finishing jobs before removal), unhealthy (ready, last GET /health failed), throttled always 0.`;

export const HEALTH =
  'Every field comes from real state or is null. check=basic reads the stored state (worker rows, their last ' +
  'GET /health by the supervisor every 10 s); detailed adds resources; deep also runs GET /health on every ready ' +
  'worker now and checks dependencies (database round trip, the hosts’ agent connections); include adds parts to ' +
  'any level (connectivity = the workers’ GET /health now). A check taking longer than timeout (1-30 s, default ' +
  '10) answers 408 HEALTH_CHECK_TIMEOUT {timeout, partialResults, recommendation}; a failure to read the state ' +
  '503 HEALTH_CHECK_FAILED {reason, retryAfter, fallbackStatus}. status: error (endpoint in error), stopped (no ' +
  'workers wanted or running), starting (none ready, some starting), unhealthy (none ready), degraded (fewer ' +
  'ready than the target, a failing GET /health, or errorRate > 10%), else healthy. readiness: ready (a worker ' +
  'is ready), warming_up (some starting), not_ready. uptime: since the longest-ready worker became ready. ' +
  'version: config-<n>, raised by updates that replace workers. checks.api: the workers’ GET /health ' +
  '(responseTime = mean of their last ms). checks.model: loadTime = mean ms from placement to ready of the ready ' +
  'workers; memoryUsage = GPU memory used (bytes) by the workers’ GPUs; lastInference = last COMPLETED job. ' +
  'metrics (last hour, from the job table): requestsLastHour = jobs submitted; averageLatency = mean ms from ' +
  'submission to completion of COMPLETED jobs; errorRate = (FAILED + TIMED_OUT) / finished runs × 100; successRate ' +
  '= 100 − errorRate. resources: the latest agent samples (≤ 2 min old) of the workers’ GPUs (utilization mean, ' +
  'memory sums, hottest temperature; a warning at 85 °C), containers (cpu and memory) and hosts (load1 mean); ' +
  'storage and cpu cores are not measured per worker (null). startupProgress (while workers start): phases ' +
  'placement, image_pull (the agent’s pull progress), container_start, health_check of the least advanced worker; ' +
  'progress = completed phases / 4 × 100 averaged over starting workers; estimates null. recoveryActions follow ' +
  'from issues; estimated_cost_increase = GPU price × gpuCount per hour of one more worker.';
