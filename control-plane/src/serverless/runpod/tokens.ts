import type { SecretBox } from '../../crypto/secret-box.ts';
import type { SpecResolver } from '../../fleet/workloads/workloads.ts';
import { RUNPOD_TOKEN_ENV } from './environment.ts';

const PREFIX = 'anw_';

/**
 * The worker API token of one worker (RUNPOD_AI_API_KEY): an HMAC of its id under the control plane's
 * secret key, so it is re-derived as the spec is sent and never stored. It names its worker alone; the
 * worker API takes it only from that worker's own container (the agent's word), and only while the worker
 * is starting, ready or draining: once the worker stops, its token is void.
 */
export class WorkerTokens {
  constructor(private readonly box: () => SecretBox) {}

  issue(workerId: string): string {
    return `${PREFIX}${this.box().mac(`endpoint-worker-token:${workerId}`)}`;
  }

  /** Whether `token` is `workerId`'s (the Authorization header's value, with or without `Bearer `). */
  verify(workerId: string, token: string): boolean {
    const bare = token.startsWith('Bearer ') ? token.slice(7).trim() : token.trim();
    if (!bare.startsWith(PREFIX) || bare.length > 128) return false;
    return this.box().verifyMac(`endpoint-worker-token:${workerId}`, bare.slice(PREFIX.length));
  }
}

/** A RunPod-protocol worker's token reaches its container as the spec is sent (never stored). */
export function workerTokenResolver(tokens: WorkerTokens): SpecResolver {
  return async (spec, workload) =>
    workload.kind === 'endpoint_worker' && spec.workerApi
      ? { ...spec, secretEnv: { ...spec.secretEnv, [RUNPOD_TOKEN_ENV]: tokens.issue(workload.id) } }
      : spec;
}
