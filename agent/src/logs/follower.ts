import type { LogEntry } from '@anvil/shared/protocol';
import { isNotFound } from '../docker/errors.ts';
import type { ContainerRuntime } from '../docker/runtime.ts';
import { wrapError } from '../errors.ts';
import { Demuxer, LineSplitter, parseTimedLine, timestampSeconds } from './parse.ts';

/**
 * Last line read per stream. Docker copies stdout and stderr in separate goroutines, so the two are
 * each in time order but may interleave slightly out of order; one cursor per stream never skips.
 */
export interface StreamCursor {
  stdout: string | null;
  stderr: string | null;
}

export interface FollowOptions {
  runtime: ContainerRuntime;
  containerId: string;
  workloadId: string;
  /** Lines stamped at or before these were already read: skip them. */
  after: StreamCursor;
  onEntry: (entry: LogEntry) => void;
  now: () => number;
  signal: AbortSignal;
}

/**
 * Follow one container's stdout and stderr until it stops (Docker ends the stream) or the signal
 * aborts. Resolves with the cursor of the last lines read.
 *
 * A follow can end without the container's last output when that has no trailing newline (Docker
 * closes the stream at exit before its log copier flushes the partial line: moby/moby#43860). So once
 * the stream ends, the logs are read once more from the cursor: a stopped container's stream ends at
 * once, and lines already read are skipped.
 */
export async function followContainer(options: FollowOptions): Promise<StreamCursor> {
  const last: StreamCursor = { ...options.after };
  await readOnce(options, last);
  if (options.signal.aborted) return last;
  try {
    await readOnce(options, last);
  } catch (err) {
    // Removed right after it stopped: there is nothing more to read.
    if (!isNotFound((err as Error).cause)) throw err;
  }
  return last;
}

/** One logs stream from the cursor `last` (advanced as lines arrive) until Docker ends it or the signal aborts. */
async function readOnce(options: FollowOptions, last: StreamCursor): Promise<void> {
  const { runtime, containerId, workloadId, onEntry, signal } = options;
  // Docker's `since` is whole seconds: start at the older cursor and skip what was read already.
  const since =
    last.stdout && last.stderr ? Math.min(timestampSeconds(last.stdout), timestampSeconds(last.stderr)) : 0;
  const stream = (await runtime.followLogs(containerId, since)) as NodeJS.ReadableStream & {
    destroy(): void;
  };
  const demuxer = new Demuxer();
  const splitters = { stdout: new LineSplitter(), stderr: new LineSplitter() };
  const fallbackTs = () => new Date(options.now()).toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');

  const emit = (streamName: 'stdout' | 'stderr', lines: string[]) => {
    for (const raw of lines) {
      const { ts, line } = parseTimedLine(raw, fallbackTs);
      const previous = last[streamName];
      if (previous !== null && ts <= previous) continue;
      last[streamName] = ts;
      onEntry({ workloadId, containerId, stream: streamName, ts, line });
    }
  };

  const onAbort = () => stream.destroy();
  if (signal.aborted) onAbort();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    for await (const chunk of stream) {
      for (const frame of demuxer.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk))) {
        emit(frame.stream, splitters[frame.stream].push(frame.payload));
      }
    }
    emit('stdout', splitters.stdout.end());
    emit('stderr', splitters.stderr.end());
  } catch (err) {
    if (!signal.aborted) throw wrapError(`follow logs of ${containerId}`, err);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
