import type { Endpoint } from '../../db/generated/client.ts';

/** How often RunPod's library pings (RUNPOD_PING_INTERVAL, ms): a worker silent for PING_MISSES of them is failed. */
export const RUNPOD_PING_INTERVAL_MS = 5_000;

/** The variable RunPod's library sends as its Authorization header: the worker's own token. */
export const RUNPOD_TOKEN_ENV = 'RUNPOD_AI_API_KEY';

/**
 * What RunPod's worker library reads from its environment (runpod-python, serverless/modules): its id,
 * the ping interval, and the URL templates of the worker API. `$ID` in the job-take URL becomes the
 * worker id; `$RUNPOD_POD_ID` and `$ID` in the job-done and stream URLs the worker id and the job id. The
 * library appends `&job_in_progress=` (and `&batch_size=`, `&isStream=`), so those URLs carry a query
 * already: the GPU type, as RunPod's own do. The agent puts its worker API address in front of each path.
 */
export function runpodWorkerEnv(endpoint: Pick<Endpoint, 'id' | 'gpuType'>, workerId: string) {
  const base = `/v2/${endpoint.id}`;
  const query = `?gpu=${encodeURIComponent(endpoint.gpuType)}`;
  return {
    env: {
      RUNPOD_POD_ID: workerId,
      RUNPOD_POD_HOSTNAME: workerId,
      RUNPOD_ENDPOINT_ID: endpoint.id,
      RUNPOD_PING_INTERVAL: String(RUNPOD_PING_INTERVAL_MS),
    },
    workerApi: {
      urlEnv: {
        RUNPOD_WEBHOOK_GET_JOB: `${base}/job-take/$ID${query}`,
        RUNPOD_WEBHOOK_POST_OUTPUT: `${base}/job-done/$RUNPOD_POD_ID/$ID${query}`,
        RUNPOD_WEBHOOK_POST_STREAM: `${base}/job-stream/$RUNPOD_POD_ID/$ID${query}`,
        RUNPOD_WEBHOOK_PING: `${base}/ping/$RUNPOD_POD_ID`,
      },
    },
  };
}
