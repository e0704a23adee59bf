import { once } from 'node:events';
import { PassThrough, type Readable } from 'node:stream';
import type { ClusterLogEntry, ClusterLogService, LogFilter, LogSubject } from './logs.ts';

export interface LogStreamOptions {
  /** How often new lines are looked for while following. */
  pollMs: number;
  /** A comment line is sent at least this often so idle proxies keep the connection. */
  heartbeatMs: number;
  pageSize: number;
}

export const DEFAULT_STREAM_OPTIONS: LogStreamOptions = { pollMs: 1_000, heartbeatMs: 15_000, pageSize: 500 };

/** One SSE event per log entry; its id is the entry id, which a client sends back as Last-Event-ID. */
export function sseEvent(entry: ClusterLogEntry): string {
  return `id: ${entry.id}\nevent: log\ndata: ${JSON.stringify(entry)}\n\n`;
}

/**
 * A Server-Sent Events body of a cluster's logs: the backlog (the lines after `afterSeq`, or the newest
 * `tail` lines), then, when following, new lines as they are stored, with heartbeats. Destroying the
 * stream (the client went away) stops it at its next step. When `revoked` aborts (the caller lost access
 * to the cluster), an `event: revoked` with the reason is the last thing sent and the stream ends.
 */
export function streamLogs(args: {
  logs: ClusterLogService;
  cluster: LogSubject;
  follow: boolean;
  tail: number;
  afterSeq: number | undefined;
  filter: LogFilter;
  options: LogStreamOptions;
  revoked?: AbortSignal;
  onError: (error: unknown) => void;
}): Readable {
  const { logs, cluster, follow, tail, filter, options } = args;
  const out = new PassThrough();
  let closed = false;
  let wake: (() => void) | null = null;
  out.on('close', () => {
    closed = true;
    wake?.();
  });

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      wake = done;
    });

  const write = async (text: string) => {
    if (closed) return;
    if (!out.write(text)) await Promise.race([once(out, 'drain'), once(out, 'close')]);
  };

  args.revoked?.addEventListener(
    'abort',
    () => {
      if (closed) return;
      closed = true;
      wake?.();
      const reason = String(args.revoked?.reason ?? 'access revoked');
      out.end(`event: revoked\ndata: ${JSON.stringify({ reason })}\n\n`);
    },
    { once: true },
  );

  const send = async (entries: ClusterLogEntry[]) => {
    for (const entry of entries) await write(sseEvent(entry));
  };

  void (async () => {
    await write(': connected\nretry: 2000\n\n');
    let cursor: number;
    if (args.afterSeq !== undefined) {
      cursor = args.afterSeq;
    } else {
      cursor = await logs.newestSeq(cluster);
      await send(await logs.last(cluster, tail, { ...filter, maxSeq: cursor }));
    }
    let lastBeat = Date.now();
    while (!closed) {
      const page = await logs.after(cluster, cursor, options.pageSize, filter);
      await send(page);
      if (page.length > 0) cursor = Number(page.at(-1)!.id);
      if (page.length === options.pageSize) continue;
      if (!follow) {
        await write('event: end\ndata: {}\n\n');
        if (!closed) out.end();
        return;
      }
      if (Date.now() - lastBeat >= options.heartbeatMs) {
        await write(`: heartbeat ${new Date().toISOString()}\n\n`);
        lastBeat = Date.now();
      }
      await sleep(Math.min(options.pollMs, options.heartbeatMs));
    }
  })().catch((error) => {
    args.onError(error);
    out.destroy();
  });
  return out;
}
