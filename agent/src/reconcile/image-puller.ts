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

export type PullState = { kind: 'pulling' } | { kind: 'failed'; error: string; retryAt: number };

/**
 * Pulls run in the background, one per image however many workloads wait for it, so a slow pull
 * never holds up the reconcile pass for other workloads. A failure is remembered until `retryMs`
 * has passed, so an unreachable registry is not hammered every pass.
 */
export class ImagePuller {
  readonly #states = new Map<string, PullState>();
  readonly #lastProgress = new Map<string, number>();

  constructor(
    private readonly runtime: ContainerRuntime,
    private readonly options: {
      clock: Clock;
      logger: Logger;
      retryMs: number;
      onProgress: (report: PullReport) => void;
      onSettled: () => void;
    },
  ) {}

  /** The image's pull state, or null when no pull is running and no failure is remembered. */
  state(image: string): PullState | null {
    const state = this.#states.get(image);
    if (state?.kind === 'failed' && this.options.clock.now() >= state.retryAt) {
      this.#states.delete(image);
      return null;
    }
    return state ?? null;
  }

  start(image: string, workloadId: string): void {
    if (this.#states.get(image)) return;
    this.#states.set(image, { kind: 'pulling' });
    const { logger, clock } = this.options;
    logger.info({ image, workloadId }, 'pulling image');
    this.runtime
      .pull(image, (event) => this.#progress(image, workloadId, event))
      .then(
        () => {
          this.#states.delete(image);
          logger.info({ image }, 'image pulled');
          this.#report({
            image,
            workloadId,
            status: 'pulled',
            layer: null,
            current: null,
            total: null,
            done: true,
            error: null,
          });
        },
        (err: unknown) => {
          const error = errorMessage(err);
          this.#states.set(image, { kind: 'failed', error, retryAt: clock.now() + this.options.retryMs });
          logger.warn({ image, error }, 'image pull failed');
          this.#report({
            image,
            workloadId,
            status: 'failed',
            layer: null,
            current: null,
            total: null,
            done: true,
            error,
          });
        },
      )
      .finally(() => this.options.onSettled());
  }

  /** Docker sends a progress line per layer many times a second; pass at most one a second per layer. */
  #progress(image: string, workloadId: string, event: PullProgressEvent): void {
    const key = `${image}\0${event.layer ?? ''}\0${event.status}`;
    const now = this.options.clock.now();
    const last = this.#lastProgress.get(key);
    if (last !== undefined && now - last < 1_000) return;
    this.#lastProgress.set(key, now);
    this.#report({ ...event, image, workloadId, done: false, error: null });
  }

  #report(report: PullReport): void {
    if (report.done) {
      for (const key of [...this.#lastProgress.keys()])
        if (key.startsWith(`${report.image}\0`)) this.#lastProgress.delete(key);
    }
    this.options.onProgress(report);
  }
}
