import type { RegistryAuth } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import type { PullProgressEvent } from '../docker/pull.ts';
import type { ContainerRuntime } from '../docker/runtime.ts';
import { errorMessage } from '../errors.ts';

export interface PullReport extends PullProgressEvent {
  image: string;
  workloadId: string | null;
  done: boolean;
  error: string | null;
}

export interface PullBytes {
  bytesDone: number;
  /** null until Docker announced the size of every layer it downloads. */
  bytesTotal: number | null;
}

export type PullState =
  | { kind: 'pulling'; hash: string; progress: PullBytes }
  | { kind: 'pulled'; hash: string }
  | { kind: 'failed'; hash: string; error: string; retryAt: number };

/** The statuses of Docker's progress lines about one layer. */
const LAYER_STATUSES = new Set([
  'Pulling fs layer',
  'Waiting',
  'Downloading',
  'Verifying Checksum',
  'Download complete',
  'Extracting',
  'Pull complete',
  'Already exists',
]);

/** Layer ids Docker reports, with what each has downloaded; layers the host already has are left out. */
class LayerTally {
  readonly #layers = new Map<string, { current: number; total: number | null }>();

  add(event: PullProgressEvent): void {
    const id = event.layer;
    const status = event.status;
    // Other lines name the tag ("Pulling from ...", "Digest: ..."), not a layer.
    if (!id || !LAYER_STATUSES.has(status)) return;
    if (status === 'Already exists') {
      this.#layers.delete(id);
      return;
    }
    const layer = this.#layers.get(id) ?? { current: 0, total: null };
    if (status === 'Downloading') {
      if (event.current !== null) layer.current = event.current;
      if (event.total !== null && event.total > 0) layer.total = event.total;
    } else if (status === 'Download complete' || status === 'Pull complete' || status === 'Extracting') {
      if (layer.total !== null) layer.current = layer.total;
    }
    this.#layers.set(id, layer);
  }

  bytes(): PullBytes {
    let done = 0;
    let total: number | null = 0;
    for (const layer of this.#layers.values()) {
      done += layer.current;
      total = total === null || layer.total === null ? null : total + layer.total;
    }
    return { bytesDone: done, bytesTotal: total };
  }
}

/**
 * Pulls run in the background, one per workload about to be created, so a slow pull never holds up the
 * reconcile pass for other workloads. Each workload pulls with its own account's credentials: two
 * accounts asking for the same image each prove they may (Docker shares the layers). A success lets one
 * create through (`consume`); a failure is remembered until `retryMs` has passed, so a registry that
 * refuses is not hammered every pass.
 */
export class ImagePuller {
  readonly #states = new Map<string, PullState>();
  readonly #lastReport = new Map<string, number>();
  readonly #trailing = new Map<string, { send: () => void; timer: unknown }>();

  constructor(
    private readonly runtime: ContainerRuntime,
    private readonly options: {
      clock: Clock;
      logger: Logger;
      retryMs: number;
      onProgress: (report: PullReport) => void;
      /** Aggregated bytes of a running pull, at most once a second per workload. */
      onBytes: (workloadId: string, bytes: PullBytes) => void;
      onSettled: () => void;
    },
  ) {}

  /** The workload's pull for spec `hash`, or null when none is running, done or remembered as failed. */
  state(workloadId: string, hash: string): PullState | null {
    const state = this.#states.get(workloadId);
    if (!state) return null;
    if (state.kind === 'pulling') return state;
    if (state.hash !== hash || (state.kind === 'failed' && this.options.clock.now() >= state.retryAt)) {
      this.#states.delete(workloadId);
      return null;
    }
    return state;
  }

  /** A create used the pull: the next create pulls again. */
  consume(workloadId: string): void {
    if (this.#states.get(workloadId)?.kind === 'pulled') this.#states.delete(workloadId);
  }

  /** Drop what is remembered for workloads no longer desired (a running pull finishes on its own). */
  retain(workloadIds: ReadonlySet<string>): void {
    for (const [id, state] of this.#states)
      if (!workloadIds.has(id) && state.kind !== 'pulling') this.#states.delete(id);
  }

  start(image: string, workloadId: string, hash: string, auth: RegistryAuth | null): void {
    if (this.#states.get(workloadId)?.kind === 'pulling') return;
    const tally = new LayerTally();
    const state: PullState = { kind: 'pulling', hash, progress: tally.bytes() };
    this.#states.set(workloadId, state);
    const { logger, clock } = this.options;
    // Never the credentials: only whether there were any, and for which registry.
    logger.info({ image, workloadId, registry: auth?.serverAddress ?? null }, 'pulling image');
    const final = { layer: null, current: null, total: null, done: true } as const;
    this.runtime
      .pull(
        image,
        (event) => {
          tally.add(event);
          state.progress = tally.bytes();
          this.#progress(image, workloadId, event, state.progress);
        },
        auth,
      )
      .then(
        () => {
          this.#states.set(workloadId, { kind: 'pulled', hash });
          logger.info({ image, workloadId }, 'image pulled');
          this.#report({ image, workloadId, status: 'pulled', ...final, error: null });
        },
        (err: unknown) => {
          const error = errorMessage(err);
          this.#states.set(workloadId, {
            kind: 'failed',
            hash,
            error,
            retryAt: clock.now() + this.options.retryMs,
          });
          logger.warn({ image, workloadId, error }, 'image pull failed');
          this.#report({ image, workloadId, status: 'failed', ...final, error });
        },
      )
      .finally(() => this.options.onSettled());
  }

  /**
   * Docker sends a progress line per layer many times a second: pass on the sum at most once a second.
   * The last line of a burst is sent when its second is up (a pull held up by a slow registry sends no
   * more lines, and its last figures must not be lost).
   */
  #progress(image: string, workloadId: string, event: PullProgressEvent, bytes: PullBytes): void {
    const { clock } = this.options;
    const send = () => {
      this.#lastReport.set(workloadId, clock.now());
      this.options.onBytes(workloadId, bytes);
      this.options.onProgress({
        image,
        workloadId,
        status: event.status,
        layer: null,
        current: bytes.bytesDone,
        total: bytes.bytesTotal,
        done: false,
        error: null,
      });
    };
    const last = this.#lastReport.get(workloadId);
    const wait = last === undefined ? 0 : last + 1_000 - clock.now();
    const pending = this.#trailing.get(workloadId);
    if (pending) pending.send = send;
    else if (wait <= 0) send();
    else {
      const trailing = { send, timer: null as unknown };
      trailing.timer = clock.setTimeout(() => {
        this.#trailing.delete(workloadId);
        if (this.#states.get(workloadId)?.kind === 'pulling') trailing.send();
      }, wait);
      this.#trailing.set(workloadId, trailing);
    }
  }

  #report(report: PullReport): void {
    if (report.workloadId) {
      this.#lastReport.delete(report.workloadId);
      const trailing = this.#trailing.get(report.workloadId);
      if (trailing) this.options.clock.clearTimeout(trailing.timer);
      this.#trailing.delete(report.workloadId);
    }
    this.options.onProgress(report);
  }
}
