import type { LogEntry } from '@anvil/shared/protocol';
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
 */
export async function followContainer(options: FollowOptions): Promise<StreamCursor> {
  const { runtime, containerId, workloadId, onEntry, signal } = options;
  const last: StreamCursor = { ...options.after };
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
  return last;
}
