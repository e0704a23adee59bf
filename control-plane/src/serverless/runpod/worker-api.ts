import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ERROR_STATUS, type ErrorCode } from '@anvil/shared';
import { TUNNEL_UPGRADE, WORKER_API_HEADERS } from '@anvil/shared/protocol';
import type { Clock } from '../../auth/clock.ts';
import type { EndpointJob, EndpointWorker } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import type { HostService } from '../../fleet/hosts/hosts.ts';
import type { Logger } from '../../logger.ts';
import { outcomeOf } from '../dispatcher.ts';
import type { JobQueue } from '../jobs.ts';
import { MAX_ANSWER_BYTES, type RunAnswer } from '../worker-client.ts';
import type { RunpodBridge } from './bridge.ts';
import type { WorkerTokens } from './tokens.ts';

/** How long a job-take or job-stop is held open when there is nothing to hand out (RunPod's library waits up to 90 s). */
export const DEFAULT_HOLD_MS = 20_000;
/** Contacts (pings, takes) of a ready worker are written at most this often: they are its liveness. */
const CONTACT_WRITE_MS = 2_000;
const LIVE = new Set(['starting', 'ready', 'draining']);
const MAX_BATCH = 100;

interface Identity {
  hostId: string;
  workloadId: string;
}

class Refusal extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface RunpodWorkerApiDeps {
  db: Database;
  clock: Clock;
  jobs: JobQueue;
  bridge: RunpodBridge;
  tokens: WorkerTokens;
  hosts: Pick<HostService, 'authenticate'>;
  /** A worker became ready: the dispatcher and the supervisor look now. */
  workerReady: () => void;
  /** A job finished through this API on a replica that did not dispatch it (its waiters are told). */
  finished: (jobId: string, row: EndpointJob) => void;
  logger: Logger;
  holdMs?: number;
}

/**
 * The worker side of the RunPod protocol (what RunPod's worker library calls), served to connections the
 * agents relay from their containers (AGENT_WORKER_API_PATH: a raw upgrade with the host credential and
 * the workload the agent found at the connection's source). Every request must come from the container
 * of the worker its path names, on the host that relayed it, with that worker's token in Authorization
 * (raw, as the library sends it, or Bearer), while the worker lives.
 *
 * - GET  /v2/<ep>/job-take/<worker>?…&job_in_progress=0|1: one job `{id, input}`, or 204 after the hold;
 *   job-take-batch/…&batch_size=N: an array of up to N.
 * - GET  /v2/<ep>/job-stop/<worker>: `{jobsToStop: [ids]}` (cancelled or timed out), or 204 after the hold.
 * - POST /v2/<ep>/job-stream/<worker>/<job>: `{output}`, one stream chunk (/stream shows it at once).
 * - POST /v2/<ep>/job-done/<worker>/<job>?…&isStream=true|false: `{output}`, `{error}` (the job FAILED),
 *   `{status: 'IN_PROGRESS', output}` (progress: shown as the running job's output), `stopPod: true` (the
 *   worker is drained and replaced). After a stream (isStream=true) the job's output is its chunks.
 *   Bodies are JSON whatever the content type (the library sends form-urlencoded).
 * - GET  /v2/<ep>/ping/<worker>?job_id=…: liveness (every RUNPOD_PING_INTERVAL).
 * Any contact of a starting worker makes it ready; a ready one without contact is failed by the supervisor.
 */
export class RunpodWorkerApi {
  readonly #server = createServer((request, response) => void this.#handle(request, response));
  readonly #identity = new WeakMap<Socket, Identity>();
  readonly #written = new Map<string, number>();
  readonly #sockets = new Set<Socket>();
  readonly #holdMs: number;
  #closing = false;

  constructor(private readonly d: RunpodWorkerApiDeps) {
    this.#holdMs = d.holdMs ?? DEFAULT_HOLD_MS;
    this.#server.keepAliveTimeout = 65_000;
    this.#server.requestTimeout = 0;
  }

  /** A relayed connection at AGENT_WORKER_API_PATH (the agent gateway hands it over). */
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    void this.#authorise(request).then(
      (identity) => {
        if (typeof identity === 'string') {
          refuse(socket, identity === 'closing' ? 503 : 401, identity);
          return;
        }
        const raw = socket as Socket;
        raw.write(
          `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_UPGRADE}\r\n\r\n`,
        );
        if (head.length > 0) raw.unshift(head);
        raw.setTimeout(0);
        raw.setNoDelay(true);
        this.#identity.set(raw, identity);
        this.#sockets.add(raw);
        raw.once('close', () => this.#sockets.delete(raw));
        this.#server.emit('connection', raw);
      },
      (error: unknown) => {
        this.d.logger.error({ err: error }, 'checking a worker API relay failed');
        refuse(socket, 500, 'internal error');
      },
    );
  }

  async #authorise(request: IncomingMessage): Promise<Identity | string> {
    if (this.#closing) return 'closing';
    if ((request.headers.upgrade ?? '').toLowerCase() !== TUNNEL_UPGRADE)
      return `a worker API relay upgrades to ${TUNNEL_UPGRADE}`;
    const header = (name: string) => {
      const value = request.headers[name];
      return typeof value === 'string' && value.length > 0 && value.length <= 512 ? value : null;
    };
    const hostId = header(WORKER_API_HEADERS.hostId);
    const workloadId = header(WORKER_API_HEADERS.workloadId);
    const authorization = header('authorization');
    const credential = authorization?.startsWith('Bearer ') ? authorization.slice(7) : null;
    if (!hostId || !workloadId || !credential)
      return 'a worker API relay needs the host id, credential and workload';
    const auth = await this.d.hosts.authenticate(hostId, credential);
    if (!auth.ok) return auth.reason;
    return { hostId, workloadId };
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    try {
      const identity = this.#identity.get(request.socket);
      if (!identity) throw new Refusal('UNAUTHORIZED', 'not a relayed worker connection');
      const url = new URL(request.url ?? '/', 'http://worker');
      const [, v2, endpointId, action, workerId, jobId, ...rest] = url.pathname.split('/');
      if (v2 !== 'v2' || !endpointId || !action || !workerId || rest.length > 0)
        throw new Refusal('NOT_FOUND', `no worker API route ${url.pathname}`);
      const worker = await this.#worker(identity, endpointId, workerId, request.headers.authorization);
      const method = request.method ?? 'GET';
      const route = `${method} ${action}${jobId === undefined ? '' : '/:job'}`;
      switch (route) {
        case 'GET job-take':
        case 'GET job-take-batch': {
          await this.#contact(worker);
          const size = Number.parseInt(url.searchParams.get('batch_size') ?? '1', 10);
          const batch =
            action === 'job-take' ? 1 : Math.min(Math.max(Number.isFinite(size) ? size : 1, 1), MAX_BATCH);
          const jobs = await this.d.bridge.take(worker.id, batch, this.#holdMs, hangUp(response));
          if (jobs.length === 0) return end(response, 204);
          return send(response, 200, action === 'job-take' ? jobs[0] : jobs);
        }
        case 'GET job-stop': {
          await this.#contact(worker);
          const ids = await this.d.bridge.stops(worker.id, this.#holdMs, hangUp(response));
          return ids.length === 0 ? end(response, 204) : send(response, 200, { jobsToStop: ids });
        }
        case 'GET ping':
          await this.#contact(worker);
          return send(response, 200, {});
        case 'POST job-stream/:job':
          return send(response, 200, await this.#stream(worker, jobId!, await readJson(request)));
        case 'POST job-done/:job': {
          const body = await readJson(request);
          const isStream = url.searchParams.get('isStream') === 'true';
          return send(response, 200, await this.#done(worker, jobId!, body, isStream));
        }
        default:
          throw new Refusal('NOT_FOUND', `no worker API route ${method} ${url.pathname}`);
      }
    } catch (error) {
      if (error instanceof Refusal) {
        const status = ERROR_STATUS[error.code];
        return send(response, status, {
          error: error.code,
          message: error.message,
          code: status,
          details: {},
        });
      }
      this.d.logger.error({ err: error }, 'worker API request failed');
      send(response, 500, { error: 'INTERNAL_ERROR', message: 'internal error', code: 500, details: {} });
    }
  }

  /** The worker the path names, if this request may act for it; throws otherwise. */
  async #worker(
    identity: Identity,
    endpointId: string,
    workerId: string,
    authorization: string | undefined,
  ): Promise<EndpointWorker> {
    const refused = new Refusal('UNAUTHORIZED', `not a credential of worker ${workerId} from its container`);
    if (identity.workloadId !== workerId || !authorization) throw refused;
    if (!this.d.tokens.verify(workerId, authorization)) throw refused;
    const worker = await this.d.db.prisma.endpointWorker.findUnique({ where: { id: workerId } });
    // A stopped worker's token is void: the same answer as a wrong one.
    if (
      !worker ||
      worker.hostId !== identity.hostId ||
      worker.endpointId !== endpointId ||
      !LIVE.has(worker.status)
    )
      throw refused;
    return worker;
  }

  /** A worker's contact: the first makes a starting worker ready; later ones are its liveness. */
  async #contact(worker: EndpointWorker): Promise<void> {
    const now = this.d.clock.now();
    const data = { lastProbeAt: now, probeFailures: 0, lastProbeError: null, updatedAt: now };
    if (worker.status === 'starting') {
      const changed = await this.d.db.prisma.endpointWorker.updateMany({
        where: { id: worker.id, status: 'starting' },
        data: { ...data, status: 'ready', readyAt: now },
      });
      this.#written.set(worker.id, now.getTime());
      if (changed.count === 1) {
        this.d.logger.info({ endpoint_id: worker.endpointId, worker_id: worker.id }, 'endpoint worker ready');
        this.d.workerReady();
      }
      return;
    }
    if (now.getTime() - (this.#written.get(worker.id) ?? 0) < CONTACT_WRITE_MS) return;
    this.#written.set(worker.id, now.getTime());
    await this.d.db.prisma.endpointWorker.updateMany({
      where: { id: worker.id, status: { in: ['ready', 'draining'] } },
      data,
    });
  }

  async #stream(worker: EndpointWorker, jobId: string, body: Record<string, unknown>) {
    const output = body['output'];
    if (await this.d.bridge.chunk(worker.id, jobId, output)) return { accepted: true };
    // Dispatched by another replica: the chunk goes to the job's row, if it runs on this worker.
    if (!(await this.#runsOn(worker.id, jobId)))
      throw new Refusal('JOB_NOT_FOUND', `job ${jobId} is not running on worker ${worker.id}`);
    await this.d.jobs.appendChunk(jobId, output);
    return { accepted: true };
  }

  async #done(worker: EndpointWorker, jobId: string, body: Record<string, unknown>, isStream: boolean) {
    if (body['stopPod'] === true) {
      // refresh_worker: this worker takes no more jobs and is replaced once its jobs are done.
      await this.d.db.prisma.endpointWorker.updateMany({
        where: { id: worker.id, status: 'ready' },
        data: { status: 'draining', updatedAt: this.d.clock.now() },
      });
    }
    if (body['status'] === 'IN_PROGRESS' && !isStream) {
      // progress_update: the running job shows it as its output until it finishes.
      await this.d.db.sql.query(
        `UPDATE endpoint_jobs SET output = $3::jsonb, updated_at = $4
          WHERE id = $1 AND worker_id = $2 AND status = 'IN_PROGRESS'`,
        [jobId, worker.id, JSON.stringify(body['output'] ?? null), this.d.clock.now()],
      );
      return { accepted: true };
    }
    const error = body['error'];
    const streamed = Array.isArray(body['output']) && body['output'].length > 0 ? body['output'] : null;
    const here = this.d.bridge.runsHere(worker.id, jobId);
    const answer: RunAnswer =
      error !== undefined && error !== null && error !== ''
        ? { kind: 'error', error: typeof error === 'string' ? error : JSON.stringify(error) }
        : isStream
          ? {
              kind: 'stream',
              outputs: streamed ?? (here ? this.d.bridge.outputsOf(jobId) : await this.#chunksOf(jobId)),
              error: null,
            }
          : { kind: 'output', output: body['output'] ?? null };
    if (this.d.bridge.done(worker.id, jobId, answer)) return { accepted: true };
    const finished = await this.d.jobs.finish(jobId, worker.id, outcomeOf(answer));
    if (finished) {
      this.d.finished(jobId, finished);
      return { accepted: true };
    }
    // Cancelled or timed out meanwhile (job-stop said so): its answer changes nothing.
    return { accepted: false, reason: `job ${jobId} is no longer running on worker ${worker.id}` };
  }

  async #runsOn(workerId: string, jobId: string): Promise<boolean> {
    const rows = await this.d.db.sql.query(
      `SELECT 1 FROM endpoint_jobs WHERE id = $1 AND worker_id = $2 AND status = 'IN_PROGRESS'`,
      [jobId, workerId],
    );
    return rows.length > 0;
  }

  async #chunksOf(jobId: string): Promise<unknown[]> {
    return (await this.d.jobs.readStream(jobId, null)).map((chunk) => chunk.output);
  }

  /** Refuses new relays and cuts the open ones (their workers retry, through another replica if any). */
  close(): void {
    this.#closing = true;
    for (const socket of this.#sockets) socket.destroy();
    this.#server.close();
  }
}

/** A signal that aborts when the caller hangs up before the answer. */
function hangUp(response: ServerResponse): AbortSignal {
  const abort = new AbortController();
  response.once('close', () => {
    if (!response.writableFinished) abort.abort();
  });
  return abort.signal;
}

function end(response: ServerResponse, status: number): void {
  if (response.destroyed) return;
  response.writeHead(status).end();
}

function send(response: ServerResponse, status: number, body: unknown): void {
  if (response.destroyed) return;
  const text = JSON.stringify(body);
  response
    .writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
    .end(text);
}

async function readJson(request: IncomingMessage): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  let total = 0;
  for await (const chunk of request) {
    total += (chunk as Buffer).length;
    if (total > MAX_ANSWER_BYTES)
      throw new Refusal('PAYLOAD_TOO_LARGE', 'a worker answer may hold at most 20 MB');
    parts.push(chunk as Buffer);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.concat(parts).toString('utf8'));
  } catch {
    throw new Refusal('VALIDATION_ERROR', 'the body must be JSON');
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed))
    throw new Refusal('VALIDATION_ERROR', 'the body must be a JSON object');
  return parsed as Record<string, unknown>;
}

function refuse(socket: Duplex, status: number, reason: string): void {
  const text = { 401: 'Unauthorized', 500: 'Internal Server Error', 503: 'Service Unavailable' }[status];
  const body = `${reason}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${text ?? 'Error'}\r\nConnection: close\r\nContent-Type: text/plain\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}
