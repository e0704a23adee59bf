/**
 * NVML off the agent's event loop, with a watchdog. Every NVML call runs in the sampler process
 * (nvml-child.ts); this side sends it one request at a time and waits at most `timeoutMs` for each GPU's
 * answer. When a GPU's calls hang, that process is killed, the GPU is put aside (reported with
 * `nvml_timeout`, figures null) for `quarantineMs` (doubling while it keeps hanging, up to an hour) and a
 * fresh process reads the other GPUs. When NVML itself goes away (driver reload: init or device count
 * fails), the process exits and a new one is started at the next request, after a backoff
 * (retryInitialMs doubling to retryMaxMs); meanwhile the known GPUs are reported with `nvml_error`.
 *
 * The sampler process's entry: `nvml-child.js` next to this module when it exists (the esbuild bundle,
 * agent/dist/, built by agent/scripts/build.ts), else `nvml-child.ts` run through tsx (the sources).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { GpuDevice, GpuInventory, GpuMetrics } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { GpuHealthTracker, unknownEvidence } from './health.ts';
import { noReadings } from './no-readings.ts';
import type { ChildMessage, ChildRequest, InventoryItem, SampleItem } from './nvml-child.ts';

export interface NvmlSamplerOptions {
  libraryPath: string;
  logger: Logger;
  /** How long one GPU's calls may take before they count as hung. */
  timeoutMs?: number;
  /**
   * How long the start of the sampler process (Node, koffi, dlopen, nvmlInit_v2) may take: longer than
   * one GPU's calls, since a loaded host is slow to start a process.
   */
  startTimeoutMs?: number;
  quarantineMs?: number;
  retryInitialMs?: number;
  retryMaxMs?: number;
  now?: () => number;
}

export class NvmlInitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NvmlInitError';
  }
}

/** Where the sampler process's code is: bundled JavaScript next to this file, or the TypeScript source. */
export function samplerEntry(): { path: string; execArgv: string[] } {
  // The sampler handles a few kilobytes per sample: small V8 heaps keep its RSS near Node's floor (about
  // 50 MB instead of 80 MB measured with the bundle). The TypeScript loader (sources) needs more room.
  const small = '--max-semi-space-size=1';
  const bundled = fileURLToPath(new URL('./nvml-child.js', import.meta.url));
  if (existsSync(bundled)) return { path: bundled, execArgv: [small, '--max-old-space-size=64'] };
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  return {
    path: fileURLToPath(new URL('./nvml-child.ts', import.meta.url)),
    execArgv: [small, '--import', tsx],
  };
}

type Outcome<T> =
  | { kind: 'done'; count: number; items: Map<number, T>; system: SystemInfo | null }
  | { kind: 'timeout'; count: number | null; items: Map<number, T>; system: SystemInfo | null }
  | { kind: 'gone'; error: string };

type SystemInfo = { driverVersion: string | null; cudaVersion: string | null };

const HOUR = 3_600_000;

/** The NVML call an error message names ("nvmlInit_v2: Driver Not Loaded (nvml 9)"), else "nvml". */
function sourceOf(error: string | null): string {
  return /^(nvml\w+):/.exec(error ?? '')?.[1] ?? 'nvml';
}

/** One sampler process; `request` resolves on `done`, on a hang (after timeoutMs of silence) or on its end. */
class SamplerProcess {
  readonly #child: ChildProcess;
  #listener: ((message: ChildMessage) => void) | null = null;
  #onEnd: ((error: string) => void) | null = null;
  ended: string | null = null;

  constructor(entry: { path: string; execArgv: string[] }, libraryPath: string) {
    this.#child = fork(entry.path, [libraryPath], {
      execArgv: entry.execArgv,
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      serialization: 'json',
    });
    this.#child.on('message', (m: ChildMessage) => this.#listener?.(m));
    // Only a pending request (its watchdog timer) keeps the agent's event loop alive, never the process.
    this.#child.unref();
    this.#child.channel?.unref();
    const end = (why: string) => {
      this.ended ??= why;
      this.#onEnd?.(this.ended);
    };
    this.#child.on('exit', (code, signal) => end(`sampler process exited (${signal ?? code})`));
    this.#child.on('error', (err) => end(`sampler process: ${err.message}`));
  }

  /** Waits for `ready`; a start that hangs (nvmlInit_v2 blocking) counts as a failure. */
  ready(timeoutMs: number): Promise<string | null> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish(`nvmlInit_v2 did not answer within ${timeoutMs} ms`), timeoutMs);
      const finish = (error: string | null) => {
        clearTimeout(timer);
        this.#listener = null;
        this.#onEnd = null;
        resolve(error);
      };
      this.#listener = (m) => {
        if (m.type === 'ready') finish(null);
        else if (m.type === 'init-failed') finish(m.error);
      };
      this.#onEnd = finish;
      if (this.ended) finish(this.ended);
    });
  }

  request<T>(request: ChildRequest, timeoutMs: number): Promise<Outcome<T>> {
    return new Promise((resolve) => {
      const items = new Map<number, T>();
      let count: number | null = null;
      let system: SystemInfo | null = null;
      let timer = setTimeout(() => finish({ kind: 'timeout', count, items, system }), timeoutMs);
      const finish = (outcome: Outcome<T>) => {
        clearTimeout(timer);
        this.#listener = null;
        this.#onEnd = null;
        resolve(outcome);
      };
      this.#listener = (m) => {
        // Every answer shows the process alive: the watchdog restarts for the next GPU.
        clearTimeout(timer);
        timer = setTimeout(() => finish({ kind: 'timeout', count, items, system }), timeoutMs);
        if (m.type === 'system') system = { driverVersion: m.driverVersion, cudaVersion: m.cudaVersion };
        else if (m.type === 'count') count = m.count;
        else if (m.type === 'item') items.set(m.index, m.item as T);
        else if (m.type === 'done') finish({ kind: 'done', count: count ?? 0, items, system });
        else if (m.type === 'fatal') finish({ kind: 'gone', error: m.error });
      };
      this.#onEnd = (error) => finish({ kind: 'gone', error });
      if (this.ended) finish({ kind: 'gone', error: this.ended });
      else this.#child.send(request);
    });
  }

  kill(): void {
    // SIGKILL: a process inside a hung driver call handles nothing else. One stuck in the kernel dies
    // when the call returns; nothing here waits for that.
    this.#child.kill('SIGKILL');
    this.#child.channel?.unref();
    this.#child.unref();
  }
}

export class NvmlSampler {
  readonly #o: Required<Omit<NvmlSamplerOptions, 'logger' | 'libraryPath'>> & NvmlSamplerOptions;
  readonly #entry = samplerEntry();
  readonly #health = new GpuHealthTracker();
  #process: SamplerProcess | null = null;
  #startFailures = 0;
  #nextStartAt = 0;
  #lastError: string | null = null;
  /** GPU index -> until when it is skipped, and how long the next skip lasts should it hang again. */
  readonly #quarantine = new Map<number, { until: number; nextMs: number }>();
  /** The last inventory read, so lost or hung GPUs keep their UUIDs in samples. */
  #devices = new Map<number, GpuDevice>();
  #system: SystemInfo = { driverVersion: null, cudaVersion: null };
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: NvmlSamplerOptions) {
    this.#o = {
      timeoutMs: 5000,
      startTimeoutMs: 60_000,
      quarantineMs: 60_000,
      retryInitialMs: 1000,
      retryMaxMs: 60_000,
      now: Date.now,
      ...options,
    };
  }

  /** Starts the sampler process; throws NvmlInitError when NVML cannot be initialised (no driver). */
  async start(): Promise<void> {
    const error = await this.#ensureProcess();
    if (error) throw new NvmlInitError(error);
  }

  inventory(): Promise<GpuInventory> {
    return this.#serial(() => this.#inventory());
  }

  sample(): Promise<GpuMetrics[]> {
    return this.#serial(() => this.#sample());
  }

  close(): void {
    this.#process?.kill();
    this.#process = null;
  }

  #serial<T>(run: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(run, run);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #ensureProcess(): Promise<string | null> {
    if (this.#process && !this.#process.ended) return null;
    this.#process = null;
    const { now, logger } = this.#o;
    if (now() < this.#nextStartAt) return this.#lastError ?? 'NVML is being re-initialised';
    const started = new SamplerProcess(this.#entry, this.#o.libraryPath);
    const error = await started.ready(this.#o.startTimeoutMs);
    if (error) {
      started.kill();
      this.#startFailures++;
      const wait = Math.min(this.#o.retryMaxMs, this.#o.retryInitialMs * 2 ** (this.#startFailures - 1));
      this.#nextStartAt = now() + wait;
      this.#lastError = error;
      logger.warn({ error, retryInMs: wait }, 'NVML could not be initialised; retrying');
      return error;
    }
    if (this.#startFailures > 0) logger.info('NVML initialised again');
    this.#startFailures = 0;
    this.#lastError = null;
    this.#process = started;
    return null;
  }

  #backOff(error: string): void {
    this.#lastError = error;
    this.#startFailures = Math.max(this.#startFailures, 1);
    this.#nextStartAt = this.#o.now() + this.#o.retryInitialMs;
  }

  #quarantined(): number[] {
    const now = this.#o.now();
    return [...this.#quarantine].filter(([, q]) => q.until > now).map(([index]) => index);
  }

  /**
   * Runs one request over the GPUs, replacing the process after each hang and skipping the GPU that hung,
   * until every GPU answered or was put aside.
   */
  async #collect<T>(type: ChildRequest['type']): Promise<{
    count: number | null;
    items: Map<number, T>;
    system: SystemInfo | null;
    error: string | null;
    /** GPUs whose calls hung during this request. */
    hung: Set<number>;
    hungOutside?: boolean;
  }> {
    const items = new Map<number, T>();
    const hungNow = new Set<number>();
    let count: number | null = null;
    let system: SystemInfo | null = null;
    for (let attempt = 0; attempt <= (count ?? this.#devices.size) + 1; attempt++) {
      const error = await this.#ensureProcess();
      if (error || !this.#process) return { count, items, system, error, hung: hungNow };
      const skip = [...new Set([...this.#quarantined(), ...hungNow, ...items.keys()])];
      const outcome = await this.#process.request<T>({ type, skip }, this.#o.timeoutMs);
      if (outcome.kind === 'gone') {
        this.#process = null;
        // The next start waits a little: a driver being reloaded is not back at once.
        this.#backOff(outcome.error);
        this.#o.logger.warn({ error: outcome.error }, 'NVML went away; it will be initialised again');
        return { count, items, system, error: outcome.error, hung: hungNow };
      }
      count = outcome.count ?? count;
      system = outcome.system ?? system;
      for (const [index, item] of outcome.items) items.set(index, item);
      for (const index of items.keys()) this.#quarantine.delete(index);
      if (outcome.kind === 'done') return { count, items, system, error: null, hung: hungNow };

      // A hang: the GPU being read is the first one, in index order, that neither answered nor was skipped.
      this.#process.kill();
      this.#process = null;
      const hung =
        count === null
          ? undefined
          : Array.from({ length: count }, (_, i) => i).find((i) => !skip.includes(i) && !items.has(i));
      if (hung === undefined) {
        // A system-wide call hung (the device count): every GPU is unknown; the next start waits a little.
        const error = `NVML did not answer within ${this.#o.timeoutMs} ms`;
        this.#backOff(error);
        this.#o.logger.warn({ error }, 'NVML hung outside a GPU; the sampler process was replaced');
        return { count, items, system, error, hung: hungNow, hungOutside: true };
      }
      const previous = this.#quarantine.get(hung);
      const ms = previous?.nextMs ?? this.#o.quarantineMs;
      const now = this.#o.now();
      this.#quarantine.set(hung, { until: now + ms, nextMs: Math.min(HOUR, ms * 2) });
      hungNow.add(hung);
      this.#o.logger.warn(
        { gpu: hung, timeoutMs: this.#o.timeoutMs, skippedForMs: ms },
        'an NVML call on this GPU hung; the sampler process was replaced and the GPU is skipped for a while',
      );
    }
    return { count, items, system, error: null, hung: hungNow };
  }

  async #inventory(): Promise<GpuInventory> {
    const { count, items, system, error } = await this.#collect<InventoryItem>('inventory');
    if (system) this.#system = system;
    const devices = new Map<number, GpuDevice>();
    const known = count ?? (error ? Math.max(-1, ...this.#devices.keys()) + 1 : 0);
    for (let index = 0; index < known; index++) {
      const item = items.get(index);
      // A GPU that could not be read keeps what was known of it (its UUID above all); one never known is left out.
      const device = item?.uuid ? { ...item, uuid: item.uuid } : this.#devices.get(index);
      if (device) devices.set(index, device);
    }
    this.#devices = devices;
    return {
      simulated: false,
      source: 'nvml',
      driverVersion: this.#system.driverVersion,
      cudaVersion: this.#system.cudaVersion,
      devices: [...devices.values()],
      error: error && devices.size === 0 ? error : null,
    };
  }

  async #sample(): Promise<GpuMetrics[]> {
    const { count, items, error, hung: hungNow, hungOutside } = await this.#collect<SampleItem>('sample');
    const now = this.#o.now();
    const indices = new Set([...Array.from({ length: count ?? 0 }, (_, i) => i), ...this.#devices.keys()]);
    const out: GpuMetrics[] = [];
    for (const index of [...indices].sort((a, b) => a - b)) {
      const item = items.get(index);
      const uuid = item?.uuid ?? this.#devices.get(index)?.uuid;
      if (!uuid) continue;
      if (item) {
        out.push({ index, uuid, ...item.metrics, health: this.#health.update(uuid, item.evidence, now) });
        continue;
      }
      const hung = this.#quarantine.get(index);
      const evidence =
        hungOutside || hungNow.has(index) || (hung && hung.until > now)
          ? unknownEvidence({ timedOut: { fn: null, ms: this.#o.timeoutMs } })
          : unknownEvidence({
              errors: [{ fn: sourceOf(error), code: -1, message: error ?? 'no answer from NVML' }],
            });
      out.push({ index, uuid, ...noReadings(), health: this.#health.update(uuid, evidence, now) });
    }
    return out;
  }
}
