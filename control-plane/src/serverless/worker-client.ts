import { Agent, type ClientRequestArgs, type IncomingMessage, request } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TunnelOpener } from '../fleet/tunnels/types.ts';
import { socketLike } from '../proxy/upstream.ts';

/**
 * The worker contract, control-plane side: HTTP/1.1 to the worker container's port, reached through the
 * agent's reverse tunnel (as the HTTPS proxy reaches cluster ports: hosts behind NAT work and the
 * container needs no credentials). `GET /health` answers 2xx when the worker can take jobs;
 * `POST /run` with `{id, input}` answers `{output}` or `{error}` as JSON, or streams
 * `application/x-ndjson` lines `{"output": <partial>}` (each one a stream chunk) ending with an optional
 * `{"error": "..."}` line.
 *
 * Jobs go over keep-alive connections kept per worker: opening a tunnel costs a command to the agent, the
 * agent's look-up of the container in the engine and a new connection both ways, which was most of a
 * short job's overhead. A worker that answers `Connection: close` (or closes idle connections) simply
 * gets a new tunnel for its next job. Health checks always open their own, so they test the whole path.
 */

/** The largest answer a worker may send (RunPod caps results at 20 MB too). */
export const MAX_ANSWER_BYTES = 20 * 1024 * 1024;

export type RunAnswer =
  | { kind: 'output'; output: unknown }
  | { kind: 'error'; error: string }
  /** A streamed answer ended: the chunks were handed to onChunk as they came. */
  | { kind: 'stream'; outputs: unknown[]; error: string | null };

/** Why a call did not get an answer; `sent` says whether the request reached the worker. */
export class WorkerUnreachable extends Error {
  constructor(
    message: string,
    readonly sent: boolean,
  ) {
    super(message);
    this.name = 'WorkerUnreachable';
  }
}

interface CallOptions {
  signal: AbortSignal;
  onChunk?: (output: unknown) => Promise<void>;
}

/**
 * An idle kept connection is closed after this long: under the 5 s idle timeout of common HTTP servers
 * (Node's, uvicorn's), so a kept connection is seldom one the worker is closing as a job is sent on it.
 */
export const IDLE_CONNECTION_MS = 4_000;
/** A job sent on a kept connection that turned out closed is sent again on a new one, this many times. */
const STALE_RETRIES = 2;

/** node:http's pool whose connections are tunnels to one worker's port. */
class TunnelAgent extends Agent {
  constructor(private readonly open: () => Promise<Duplex>) {
    super({ keepAlive: true, timeout: IDLE_CONNECTION_MS, scheduling: 'lifo' });
  }

  override createConnection(
    _options: ClientRequestArgs,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): undefined {
    this.open().then(
      (stream) => callback?.(null, socketLike(stream)),
      (error: Error) => callback?.(error, undefined as unknown as Duplex),
    );
    return undefined;
  }

  get idle(): boolean {
    const empty = (table: NodeJS.ReadOnlyDict<unknown[]>) => Object.values(table).every((l) => !l?.length);
    return empty(this.sockets) && empty(this.freeSockets) && empty(this.requests);
  }
}

export class WorkerClient {
  /** Kept connections per worker port; a pool is dropped once its last connection closed. */
  readonly #pools = new Map<string, TunnelAgent>();

  constructor(private readonly tunnels: () => TunnelOpener) {}

  /** Connections kept open now, over all workers (tests read it). */
  get keptConnections(): number {
    let n = 0;
    for (const pool of this.#pools.values())
      for (const list of [...Object.values(pool.sockets), ...Object.values(pool.freeSockets)])
        n += list?.length ?? 0;
    return n;
  }

  #pool(workerId: string, port: number): TunnelAgent {
    const key = `${workerId}:${port}`;
    let pool = this.#pools.get(key);
    if (!pool) {
      const created: TunnelAgent = new TunnelAgent(async () => {
        const stream = await this.tunnels().openStream(workerId, port);
        stream.once('close', () =>
          // After the agent's own bookkeeping of the closed connection.
          setImmediate(() => {
            if (created.idle && this.#pools.get(key) === created) this.#pools.delete(key);
          }),
        );
        return stream;
      });
      pool = created;
      this.#pools.set(key, pool);
    }
    return pool;
  }

  /** GET /health: the status and how long it took, or the reason it failed. */
  async probe(workerId: string, port: number, timeoutMs: number) {
    const started = performance.now();
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const response = await this.#call(workerId, port, 'GET', '/health', null, signal);
      response.resume();
      const ms = Math.round(performance.now() - started);
      const status = response.statusCode ?? 0;
      return status >= 200 && status < 300
        ? { ok: true as const, ms, status }
        : { ok: false as const, ms, error: `GET /health answered ${status}` };
    } catch (error) {
      const ms = Math.round(performance.now() - started);
      return {
        ok: false as const,
        ms,
        error: signal.aborted ? `timed out after ${timeoutMs} ms` : (error as Error).message,
      };
    }
  }

  /** POST /run {id, input}: the worker's answer. Throws WorkerUnreachable, or the signal's reason. */
  async run(
    workerId: string,
    port: number,
    job: { id: string; input: unknown },
    options: CallOptions,
  ): Promise<RunAnswer> {
    const body = Buffer.from(JSON.stringify({ id: job.id, input: job.input ?? null }));
    const response = await this.#send(workerId, port, body, options.signal);
    const status = response.statusCode ?? 0;
    const type = String(response.headers['content-type'] ?? '');
    if (status >= 200 && status < 300 && type.includes('ndjson')) return this.#readStream(response, options);
    const text = await readAll(response, options.signal);
    let parsed: unknown;
    try {
      parsed = text.length === 0 ? null : JSON.parse(text);
    } catch {
      return {
        kind: 'error',
        error: `worker answered ${status} with a body that is not JSON: ${excerpt(text)}`,
      };
    }
    const record = parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : null;
    if (record && typeof record['error'] === 'string' && record['error'] !== '') {
      return { kind: 'error', error: record['error'] };
    }
    if (status < 200 || status >= 300)
      return { kind: 'error', error: `worker answered ${status}: ${excerpt(text)}` };
    if (!record || !('output' in record)) {
      return { kind: 'error', error: 'worker answer has neither output nor error' };
    }
    return { kind: 'output', output: record['output'] };
  }

  async #readStream(response: IncomingMessage, options: CallOptions): Promise<RunAnswer> {
    const outputs: unknown[] = [];
    let error: string | null = null;
    let pending = '';
    let total = 0;
    const take = async (line: string) => {
      if (line.trim() === '') return;
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(line) as Record<string, unknown>;
      } catch {
        error = `stream line is not JSON: ${excerpt(line)}`;
        return;
      }
      if (typeof record['error'] === 'string') error = record['error'];
      else if ('output' in record) {
        outputs.push(record['output']);
        await options.onChunk?.(record['output']);
      }
    };
    for await (const chunk of abortable(response, options.signal)) {
      total += chunk.length;
      if (total > MAX_ANSWER_BYTES) throw new WorkerUnreachable('worker answer exceeds 20 MB', true);
      pending += chunk.toString('utf8');
      let newline = pending.indexOf('\n');
      while (newline !== -1) {
        await take(pending.slice(0, newline));
        pending = pending.slice(newline + 1);
        newline = pending.indexOf('\n');
      }
    }
    await take(pending);
    return { kind: 'stream', outputs, error };
  }

  /** POST /run over a kept connection; one found closed as the job went out is replaced by a new one. */
  async #send(workerId: string, port: number, body: Buffer, signal: AbortSignal): Promise<IncomingMessage> {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this.#pooledCall(this.#pool(workerId, port), body, signal);
      } catch (error) {
        if (!(error instanceof StaleConnection)) throw error;
        if (attempt >= STALE_RETRIES) throw new WorkerUnreachable(error.message, false);
      }
    }
  }

  #pooledCall(pool: TunnelAgent, body: Buffer, signal: AbortSignal): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason);
        return;
      }
      let sent = false;
      const req = request({
        method: 'POST',
        path: '/run',
        host: 'worker',
        agent: pool,
        headers: { 'content-type': 'application/json', 'content-length': body.length },
        signal,
      });
      req.on('response', resolve);
      req.on('error', (error: NodeJS.ErrnoException) => {
        if (signal.aborted) reject(signal.reason);
        // A kept connection the worker had closed: the job never reached it (no answer began), so it goes
        // out again on a new connection (node:http's documented use of reusedSocket).
        else if (req.reusedSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE'))
          reject(new StaleConnection(error.message));
        else reject(error instanceof WorkerUnreachable ? error : new WorkerUnreachable(error.message, sent));
      });
      req.on('finish', () => {
        sent = true;
      });
      req.end(body);
    });
  }

  #call(
    workerId: string,
    port: number,
    method: string,
    path: string,
    body: Buffer | null,
    signal: AbortSignal,
  ): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      let sent = false;
      const fail = (error: Error) =>
        reject(
          signal.aborted
            ? signal.reason
            : error instanceof WorkerUnreachable
              ? error
              : new WorkerUnreachable(error.message, sent),
        );
      if (signal.aborted) {
        reject(signal.reason);
        return;
      }
      this.tunnels()
        .openStream(workerId, port, { signal })
        .then((stream) => {
          const req = request({
            method,
            path,
            host: 'worker',
            headers: {
              'content-type': 'application/json',
              connection: 'close',
              ...(body ? { 'content-length': body.length } : {}),
            },
            createConnection: () => socketLike(stream) as unknown as Socket,
            signal,
          });
          req.on('response', resolve);
          req.on('error', fail);
          req.on('finish', () => {
            sent = true;
          });
          req.end(body ?? undefined);
        }, fail);
    });
  }
}

/** A kept connection turned out closed before the worker answered. */
class StaleConnection extends Error {}

async function* abortable(stream: IncomingMessage, signal: AbortSignal): AsyncGenerator<Buffer> {
  const onAbort = () => stream.destroy(signal.reason as Error);
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    for await (const chunk of stream) yield chunk as Buffer;
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw new WorkerUnreachable(`worker connection broke: ${(error as Error).message}`, true);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

async function readAll(stream: IncomingMessage, signal: AbortSignal): Promise<string> {
  const parts: Buffer[] = [];
  let total = 0;
  for await (const chunk of abortable(stream, signal)) {
    total += chunk.length;
    if (total > MAX_ANSWER_BYTES) throw new WorkerUnreachable('worker answer exceeds 20 MB', true);
    parts.push(chunk);
  }
  return Buffer.concat(parts).toString('utf8');
}

function excerpt(text: string): string {
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}
