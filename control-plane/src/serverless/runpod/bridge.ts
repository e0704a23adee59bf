import type { RunAnswer } from '../worker-client.ts';

/** A job as RunPod's library takes it. */
export interface TakenJob {
  id: string;
  input: unknown;
}

interface Take {
  batch: number;
  deliver(jobs: TakenJob[]): boolean;
}

interface PendingRun {
  workerId: string;
  resolve(answer: RunAnswer): void;
  onChunk?: (output: unknown) => Promise<void>;
  outputs: unknown[];
}

/** Job ids kept per worker for its job-stop. */
const MAX_STOPS = 1_000;

/** Why a run handed to a worker of the RunPod protocol ended without its answer. */
export class RunAborted extends Error {}

/**
 * The RunPod worker protocol on this replica, between the dispatcher and the worker API: the takes
 * workers hold open (a job-take long poll is a worker asking for up to `batch` jobs), the jobs handed to
 * them and waiting for their job-done, and the jobs they must stop (job-stop long poll: cancelled or timed
 * out here). Pull semantics as with the HTTP contract: a job leaves the queue only when a worker asks.
 */
export class RunpodBridge {
  readonly #takes = new Map<string, Take>();
  readonly #runs = new Map<string, PendingRun>();
  readonly #stops = new Map<string, Set<string>>();
  readonly #stopWaiters = new Map<string, Set<() => void>>();

  constructor(private readonly onTake: () => void) {}

  /** Workers holding a take open here, and how many jobs each asks for. */
  takes(): Map<string, number> {
    return new Map([...this.#takes].map(([id, take]) => [id, take.batch]));
  }

  /**
   * A job-take: resolves with the jobs handed to this worker, or with none once `holdMs` passed or the
   * signal aborted (the worker hung up). A newer take of the same worker replaces an older one.
   */
  take(workerId: string, batch: number, holdMs: number, signal: AbortSignal): Promise<TakenJob[]> {
    return new Promise((resolve) => {
      let settled = false;
      const finish = (jobs: TakenJob[]) => {
        if (settled) return false;
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener('abort', gone);
        if (this.#takes.get(workerId) === take) this.#takes.delete(workerId);
        resolve(jobs);
        return true;
      };
      const take: Take = { batch, deliver: (jobs) => !signal.aborted && finish(jobs) };
      const gone = () => finish([]);
      const timer = setTimeout(gone, holdMs);
      timer.unref();
      if (signal.aborted) {
        finish([]);
        return;
      }
      signal.addEventListener('abort', gone, { once: true });
      this.#takes.get(workerId)?.deliver([]);
      this.#takes.set(workerId, take);
      this.onTake();
    });
  }

  /** Hands claimed jobs to the worker's open take; false when it is gone (the jobs go back to the queue). */
  deliver(workerId: string, jobs: TakenJob[]): boolean {
    const take = this.#takes.get(workerId);
    if (!take) return false;
    this.#takes.delete(workerId);
    return take.deliver(jobs);
  }

  /**
   * A job handed to a worker: resolves with its job-done. An abort (cancelled, timed out) asks the worker
   * to stop it (job-stop) and rejects with the signal's reason; its late job-done changes nothing.
   */
  run(
    workerId: string,
    jobId: string,
    options: { signal: AbortSignal; onChunk?: (output: unknown) => Promise<void> },
  ): Promise<RunAnswer> {
    return new Promise((resolve, reject) => {
      const { signal } = options;
      const onAbort = () => {
        if (this.#runs.get(jobId)?.workerId !== workerId) return;
        this.#runs.delete(jobId);
        // A job never handed over (its take was gone) has nothing to stop.
        if ((signal.reason as { stop?: string } | undefined)?.stop !== 'undelivered')
          this.#stop(workerId, jobId);
        reject(signal.reason ?? new RunAborted('aborted'));
      };
      if (signal.aborted) {
        reject(signal.reason ?? new RunAborted('aborted'));
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      this.#runs.set(jobId, {
        workerId,
        outputs: [],
        ...(options.onChunk ? { onChunk: options.onChunk } : {}),
        resolve: (answer) => {
          signal.removeEventListener('abort', onAbort);
          resolve(answer);
        },
      });
    });
  }

  /** Whether `jobId` runs here on `workerId` (its chunks and job-done are taken here). */
  runsHere(workerId: string, jobId: string): boolean {
    return this.#runs.get(jobId)?.workerId === workerId;
  }

  /** A stream chunk of a job running here; false when it does not run here. */
  async chunk(workerId: string, jobId: string, output: unknown): Promise<boolean> {
    const run = this.#runs.get(jobId);
    if (run?.workerId !== workerId) return false;
    run.outputs.push(output);
    await run.onChunk?.(output);
    return true;
  }

  /** The chunks a job running here streamed so far. */
  outputsOf(jobId: string): unknown[] {
    return this.#runs.get(jobId)?.outputs ?? [];
  }

  /** The job-done of a job running here; false when it does not run here. */
  done(workerId: string, jobId: string, answer: RunAnswer): boolean {
    const run = this.#runs.get(jobId);
    if (run?.workerId !== workerId) return false;
    this.#runs.delete(jobId);
    run.resolve(answer);
    return true;
  }

  /** A job-stop: the ids this worker must stop, at once when there are some, else once some come or `holdMs` passed. */
  async stops(workerId: string, holdMs: number, signal: AbortSignal): Promise<string[]> {
    if (!this.#stops.has(workerId) && !signal.aborted) {
      await new Promise<void>((resolve) => {
        const waiters = this.#stopWaiters.get(workerId) ?? new Set<() => void>();
        this.#stopWaiters.set(workerId, waiters);
        const wake = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', wake);
          waiters.delete(wake);
          if (waiters.size === 0) this.#stopWaiters.delete(workerId);
          resolve();
        };
        const timer = setTimeout(wake, holdMs);
        timer.unref();
        signal.addEventListener('abort', wake, { once: true });
        waiters.add(wake);
      });
    }
    if (signal.aborted) return [];
    const ids = [...(this.#stops.get(workerId) ?? [])];
    this.#stops.delete(workerId);
    return ids;
  }

  #stop(workerId: string, jobId: string): void {
    const ids = this.#stops.get(workerId) ?? new Set<string>();
    ids.add(jobId);
    // A worker that never asks (a library without job-stop) keeps only the latest ones.
    if (ids.size > MAX_STOPS) ids.delete(ids.values().next().value as string);
    this.#stops.set(workerId, ids);
    for (const wake of [...(this.#stopWaiters.get(workerId) ?? [])]) wake();
  }

  /** The worker is gone: what it was asked to stop is forgotten. */
  forget(workerId: string): void {
    this.#stops.delete(workerId);
    this.#takes.get(workerId)?.deliver([]);
    this.#takes.delete(workerId);
  }
}
