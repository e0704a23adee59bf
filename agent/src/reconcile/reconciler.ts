import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import type { BodyOf, WorkloadPhase, WorkloadSpec, WorkloadStatus } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { ImageMissingError, NameConflictError } from '../docker/errors.ts';
import { type DirectPorts, type GpuMode, type SpecContext, specHash } from '../docker/labels.ts';
import type { ContainerRuntime, ManagedContainer } from '../docker/runtime.ts';
import { errorMessage } from '../errors.ts';
import { type DiskUsage, overQuotaReason } from '../metrics/disk-usage.ts';
import { networkNameOf } from '../network/account-networks.ts';
import { DownloadCache, type DownloadRequester } from './download-cache.ts';
import { imageSource, snapshotRefusal, specAccount } from './image-policy.ts';
import { ImagePuller, type PullBytes, type PullReport } from './image-puller.ts';
import { statusFromInspect, statusWithoutContainer } from './status.ts';

/** What the agent tells the control plane when one container changes (the message's body, once). */
export type ContainerStateChange = BodyOf<'container_state'>;

export interface ActualReport {
  generation: number | null;
  workloads: WorkloadStatus[];
}

export interface ReconcilerOptions {
  runtime: ContainerRuntime;
  hostId: string;
  volumeRoot: string;
  gpuMode: GpuMode;
  clock: Clock;
  logger: Logger;
  onContainerState: (change: ContainerStateChange) => void;
  onActualState: (report: ActualReport) => void;
  onPullProgress: (report: PullReport) => void;
  /**
   * Where workloads' downloads are kept (one file per SHA-256, bind-mounted read-only); by default
   * `.downloads` under the volume root, which no workload's volume can be (ids never start with a dot).
   */
  downloadRoot?: string;
  /** Fetches a download from the control plane; absent, workloads with downloads fail to start. */
  requestDownload?: DownloadRequester | null;
  /** How long a failed pull or start waits before it is tried again. */
  retryMs?: number;
  /**
   * Images the operator pre-loaded and trusts for every account (references, or prefixes ending in `*`):
   * never pulled. Every other image is pulled before each create (see image-policy.ts).
   */
  hostImages?: readonly string[];
  /** Delay before retrying a pass that failed as a whole (Docker unreachable). */
  passRetryMs?: number;
  /** After every completed pass: the agent re-syncs log followers to what runs. */
  onPass?: () => void;
  /**
   * The account networks (AccountNetworks): ensured before containers are created, pruned after the
   * last container of one goes. Absent (unit tests with a fake runtime): networks are not managed.
   */
  networks?: WorkloadNetworks | null;
  /** The operator's direct-ports address and range (ANVIL_DIRECT_PORTS_ADDRESS); null: none published. */
  directPorts?: DirectPorts | null;
  /** ANVIL_RENDEZVOUS_ADDRESS: where multi-host training workers publish their rendezvous port. */
  rendezvousAddress?: string | null;
  /** Whether the engine bounds writable layers (`--storage-opt size`, see storage-quota.ts). */
  storageQuota?: boolean;
  /** The agent's worker API port (SpecContext.workerApi); null: none. */
  workerApi?: { port: number } | null;
  /** The last disk measure of a workload (DiskMeter); absent: disk is not reported. */
  diskUsage?: (workloadId: string) => DiskUsage | null;
}

/** What the reconciler needs of the account networks. */
export interface WorkloadNetworks {
  /** `desired`: the whole desired set, whose multi-host training workers' paths the firewall admits. */
  ensure(names: ReadonlySet<string>, desired: readonly WorkloadSpec[]): Promise<void>;
  prune(keep: ReadonlySet<string>): Promise<void>;
}

/** The running container Docker lists for a workload, for log following and stats. */
export interface RunningContainer {
  containerId: string;
  workloadId: string;
}

const RESTARTED_BY_US = new Set(['always', 'unless-stopped']);

/** Keep the container most worth keeping: running first, then the newest. */
function byPreference(a: ManagedContainer, b: ManagedContainer): number {
  const running = Number(b.state === 'running') - Number(a.state === 'running');
  return running !== 0 ? running : b.created - a.created;
}

/**
 * Converges Docker to the desired set, as kubelet does: creates what is missing, removes anvil-labelled
 * containers that are not desired (and duplicates), recreates containers whose spec changed, and
 * adopts whatever already matches, so an agent restart or kill -9 loses and duplicates nothing.
 * Until the first desired set arrives it only observes: a restarted agent never removes a workload
 * because it has not yet heard from the control plane.
 */
export class Reconciler {
  readonly #o: Required<
    Omit<
      ReconcilerOptions,
      | 'onPass'
      | 'downloadRoot'
      | 'requestDownload'
      | 'networks'
      | 'directPorts'
      | 'rendezvousAddress'
      | 'workerApi'
      | 'storageQuota'
      | 'diskUsage'
      | 'hostImages'
    >
  > & { hostImages: readonly string[] } & Pick<ReconcilerOptions, 'onPass' | 'networks' | 'diskUsage'>;
  readonly #context: SpecContext;
  readonly #puller: ImagePuller;
  readonly #downloads: DownloadCache;
  #generation: number | null = null;
  #desired: WorkloadSpec[] | null = null;
  #statuses = new Map<string, WorkloadStatus>();
  #running: RunningContainer[] = [];
  #existing: ReadonlySet<string> = new Set();
  /** Workloads whose last create/start failed: error and when to try again. */
  readonly #failures = new Map<
    string,
    { hash: string; error: string; retryAt: number; phase: WorkloadPhase }
  >();
  #pass: Promise<void> | null = null;
  #again = false;
  #retryTimer: unknown = null;
  #retryAt = Number.POSITIVE_INFINITY;
  #reportedGeneration: number | null | undefined = undefined;
  #stopped = false;
  /** Containers created, started or removed so far: a pass that changed none reuses its first list. */
  #changes = 0;

  constructor(options: ReconcilerOptions) {
    this.#o = { retryMs: 30_000, passRetryMs: 5_000, ...options, hostImages: options.hostImages ?? [] };
    const downloadRoot = options.downloadRoot ?? join(options.volumeRoot, '.downloads');
    this.#context = {
      hostId: options.hostId,
      volumeRoot: options.volumeRoot,
      downloadRoot,
      gpuMode: options.gpuMode,
      directPorts: options.directPorts ?? null,
      rendezvousAddress: options.rendezvousAddress ?? null,
      workerApi: options.workerApi ?? null,
      storageQuota: options.storageQuota ?? false,
      hostCpus: availableParallelism(),
    };
    this.#downloads = new DownloadCache(downloadRoot, {
      request: options.requestDownload ?? null,
      clock: options.clock,
      logger: options.logger,
      retryMs: this.#o.retryMs,
      onSettled: () => this.trigger(),
    });
    this.#puller = new ImagePuller(options.runtime, {
      clock: options.clock,
      logger: options.logger,
      retryMs: this.#o.retryMs,
      onProgress: options.onPullProgress,
      onBytes: (id, bytes) => this.#pullBytes(id, bytes),
      onSettled: () => this.trigger(),
    });
  }

  /** A running pull's bytes reach the control plane between passes, in a fresh full report. */
  #pullBytes(workloadId: string, bytes: PullBytes): void {
    const status = this.#statuses.get(workloadId);
    if (status?.phase !== 'pulling') return;
    this.#statuses.set(workloadId, { ...status, pullProgress: bytes });
    if (this.#generation !== null) this.#o.onActualState(this.report());
  }

  get generation(): number | null {
    return this.#generation;
  }

  /** The latest full report: every desired workload's status. */
  report(): ActualReport {
    const workloads = (this.#desired ?? []).flatMap((s) => {
      const status = this.#statuses.get(s.workloadId);
      return status ? [status] : [];
    });
    return { generation: this.#generation, workloads };
  }

  /** The desired spec of a workload, or null when it is not desired. */
  specOf(workloadId: string): WorkloadSpec | null {
    return this.#desired?.find((s) => s.workloadId === workloadId) ?? null;
  }

  /** Running Anvil containers of this host as of the last pass, desired or not yet removed. */
  running(): RunningContainer[] {
    return this.#running;
  }

  /** Ids of every Anvil container of this host as of the last pass, running or not. */
  existing(): ReadonlySet<string> {
    return this.#existing;
  }

  /**
   * Accept a desired set. A generation lower than the current one is stale (a late message) and
   * ignored, unless `force`: the first set of a new connection always wins, since a control plane
   * that restarted is still the source of truth.
   */
  setDesired(generation: number, workloads: WorkloadSpec[], force = false): boolean {
    if (!force && this.#generation !== null && generation < this.#generation) {
      this.#o.logger.warn({ generation, current: this.#generation }, 'stale desired state ignored');
      return false;
    }
    this.#generation = generation;
    this.#desired = workloads;
    for (const id of [...this.#statuses.keys()]) {
      if (!workloads.some((w) => w.workloadId === id)) this.#statuses.delete(id);
    }
    this.trigger();
    return true;
  }

  /** Ask for a pass; passes never overlap, and requests during one coalesce into one more. */
  trigger(): void {
    if (this.#stopped) return;
    if (this.#pass) {
      this.#again = true;
      return;
    }
    this.#pass = this.#loop().finally(() => {
      this.#pass = null;
    });
  }

  /** Resolves when no pass is running or queued (tests, graceful shutdown). */
  async idle(): Promise<void> {
    while (this.#pass) await this.#pass;
  }

  stop(): void {
    this.#stopped = true;
    this.#o.clock.clearTimeout(this.#retryTimer);
    this.#retryAt = Number.POSITIVE_INFINITY;
  }

  async #loop(): Promise<void> {
    do {
      this.#again = false;
      try {
        await this.#passOnce();
      } catch (err) {
        this.#o.logger.warn({ err: errorMessage(err) }, 'reconcile pass failed; retrying');
        this.#scheduleRetry(this.#o.passRetryMs);
      }
    } while (this.#again && !this.#stopped);
  }

  /** One timer, set for the earliest retry anyone asked for. */
  #scheduleRetry(delayMs: number): void {
    const { clock } = this.#o;
    const at = clock.now() + delayMs;
    if (at >= this.#retryAt) return;
    clock.clearTimeout(this.#retryTimer);
    this.#retryAt = at;
    this.#retryTimer = clock.setTimeout(() => {
      this.#retryAt = Number.POSITIVE_INFINITY;
      this.trigger();
    }, delayMs);
  }

  #fail(id: string, hash: string, error: string, delayMs: number, phase: WorkloadPhase = 'failed'): void {
    this.#failures.set(id, { hash, error, retryAt: this.#o.clock.now() + delayMs, phase });
    this.#scheduleRetry(delayMs);
  }

  async #passOnce(): Promise<void> {
    const { runtime, hostId } = this.#o;
    const changesBefore = this.#changes;
    const containers = await runtime.listManaged(hostId);
    const groups = new Map<string, ManagedContainer[]>();
    for (const c of containers) groups.set(c.workloadId, [...(groups.get(c.workloadId) ?? []), c]);

    const desired = this.#desired;
    const generation = this.#generation;
    if (desired) {
      const wanted = new Set(desired.map((s) => s.workloadId));
      const unwanted = containers.filter((c) => !wanted.has(c.workloadId));
      await Promise.all(unwanted.map((c) => this.#removeContainer(c, 'not desired')));
      const networks = new Set(desired.flatMap((s) => networkNameOf(s) ?? []));
      // Fenced networks first: no container is created on a network whose rules are not in place.
      await this.#o.networks?.ensure(networks, desired);
      const results = await Promise.all(
        desired.map(async (spec) =>
          this.#withDisk(spec, await this.#converge(spec, groups.get(spec.workloadId) ?? [])),
        ),
      );
      // Record every status (map, not some: each one must be stored and may emit its own event).
      const changed = results.map((status) => this.#record(status)).includes(true);
      await this.#downloads.prune(new Set(desired.flatMap((s) => (s.downloads ?? []).map((d) => d.sha256))));
      await this.#o.networks?.prune(networks);
      this.#puller.retain(wanted);
      // The desired set may have been replaced while this pass ran; report only a consistent one.
      if (this.#desired === desired && (changed || generation !== this.#reportedGeneration)) {
        this.#reportedGeneration = generation;
        this.#o.onActualState(this.report());
      }
    }
    const after = this.#changes !== changesBefore ? await runtime.listManaged(hostId) : containers;
    this.#running = after
      .filter((c) => c.state === 'running')
      .map((c) => ({ containerId: c.id, workloadId: c.workloadId }));
    this.#existing = new Set(after.map((c) => c.id));
    this.#o.onPass?.();
  }

  /**
   * A running workload's last disk measure and bound; over the bound, the error says so (the phase stays
   * running: where the engine cannot bound the disk, the measure is all there is, and the customer decides).
   */
  #withDisk(spec: WorkloadSpec, status: WorkloadStatus): WorkloadStatus {
    if (!this.#o.diskUsage || status.phase !== 'running') return status;
    const usage = this.#o.diskUsage(spec.workloadId);
    const limit = spec.diskBytes ?? null;
    return {
      ...status,
      diskUsedBytes: usage?.usedBytes ?? null,
      diskLimitBytes: limit,
      error: status.error ?? overQuotaReason(usage, limit),
    };
  }

  /** Store a status; emit container_state when it differs from the last one. True when it changed. */
  #record(status: WorkloadStatus): boolean {
    const previous = this.#statuses.get(status.workloadId);
    if (!this.#desired?.some((s) => s.workloadId === status.workloadId)) return false;
    this.#statuses.set(status.workloadId, status);
    const same =
      previous &&
      previous.containerId === status.containerId &&
      previous.phase === status.phase &&
      previous.containerState === status.containerState &&
      previous.exitCode === status.exitCode &&
      previous.error === status.error &&
      previous.restartCount === status.restartCount &&
      previous.pullProgress?.bytesDone === status.pullProgress?.bytesDone;
    if (same) {
      this.#statuses.set(status.workloadId, { ...status, at: previous.at });
      return false;
    }
    this.#o.onContainerState({
      workloadId: status.workloadId,
      containerId: status.containerId,
      phase: status.phase,
      containerState: status.containerState,
      exitCode: status.exitCode,
      error: status.error,
      startedAt: status.startedAt,
      at: status.at,
    });
    return true;
  }

  async #removeContainer(container: ManagedContainer, why: string): Promise<void> {
    const { runtime, logger, clock } = this.#o;
    logger.info({ containerId: container.id, workloadId: container.workloadId, why }, 'removing container');
    this.#changes += 1;
    await runtime.stop(container.id, container.stopGraceSeconds ?? 10);
    await runtime.remove(container.id);
    this.#o.onContainerState({
      workloadId: container.workloadId,
      containerId: container.id,
      phase: 'removed',
      containerState: null,
      exitCode: null,
      error: null,
      at: clock.now(),
    });
  }

  async #converge(spec: WorkloadSpec, containers: ManagedContainer[]): Promise<WorkloadStatus> {
    const { runtime, clock, logger } = this.#o;
    const id = spec.workloadId;
    const hash = specHash(spec, this.#context);
    try {
      const [keep, ...duplicates] = [...containers].sort(byPreference);
      for (const extra of duplicates) await this.#removeContainer(extra, 'duplicate of the kept container');

      let current = keep;
      if (current && current.specHash !== hash) {
        await this.#removeContainer(current, 'spec changed');
        current = undefined;
      }

      const failure = this.#failures.get(id);
      if (failure && failure.hash !== hash) this.#failures.delete(id);
      const waiting = this.#failures.get(id);
      // A container running again (the engine restarted it as it came back, or someone started it) ends the
      // wait at once: it is reported as it is, and the failure is cleared below like any converged one.
      if (waiting && current?.state !== 'running' && clock.now() < waiting.retryAt) {
        // The pass that woke us may be an earlier failure's retry: make sure this one gets its own.
        this.#scheduleRetry(waiting.retryAt - clock.now());
        const details = current ? await runtime.inspect(current.id) : null;
        return details
          ? { ...statusFromInspect(id, details, clock.now()), phase: waiting.phase, error: waiting.error }
          : statusWithoutContainer(id, waiting.phase, waiting.error, clock.now());
      }

      if (!current) {
        // A container starts only with every download in the cache: fetched in the background first.
        if (spec.downloads && spec.downloads.length > 0) {
          const waiting = await this.#downloads.pending(spec.downloads);
          if (waiting?.kind === 'failed') {
            this.#scheduleRetry(Math.max(0, waiting.retryAt - clock.now()));
            return statusWithoutContainer(id, 'failed', waiting.error, clock.now());
          }
          if (waiting) {
            this.#downloads.start(spec.downloads, id);
            return statusWithoutContainer(id, 'pulling', null, clock.now());
          }
        }
        const imageWait = await this.#imageReady(spec, hash);
        if (imageWait) return imageWait;
        let containerId: string;
        try {
          containerId = await runtime.create(spec, this.#context);
        } catch (err) {
          if (err instanceof ImageMissingError) {
            const source = imageSource(spec.image, this.#o.hostImages);
            if (source.kind === 'registry') {
              // Removed between our pull and the create: pull again.
              this.#puller.consume(id);
              this.trigger();
              return statusWithoutContainer(id, 'pulling', null, clock.now());
            }
            const error =
              source.kind === 'host'
                ? `image ${spec.image} is not on this host (the operator lists it as a host image, and host images are never pulled)`
                : `snapshot image ${spec.image} is not on this host`;
            this.#fail(id, hash, error, this.#o.retryMs);
            return statusWithoutContainer(id, 'failed', error, clock.now());
          }
          // A half-finished removal, or a container Anvil does not own, holds the name: look again
          // shortly, and never create a second container for the workload.
          if (err instanceof NameConflictError) {
            this.#fail(id, hash, errorMessage(err), this.#o.passRetryMs, 'pending');
            return statusWithoutContainer(id, 'pending', errorMessage(err), clock.now());
          }
          throw err;
        }
        this.#puller.consume(id);
        logger.info({ workloadId: id, containerId }, 'container created');
        if (!spec.accountId)
          logger.warn(
            { workloadId: id },
            'workload names no account: it runs on the default bridge, not isolated',
          );
        this.#changes += 1;
        await runtime.start(containerId);
        this.#failures.delete(id);
        const details = await runtime.inspect(containerId);
        return details
          ? statusFromInspect(id, details, clock.now())
          : statusWithoutContainer(id, 'pending', null, clock.now());
      }

      const restartable = RESTARTED_BY_US.has(spec.restartPolicy.name);
      if (
        current.state === 'created' ||
        ((current.state === 'exited' || current.state === 'dead') && restartable)
      ) {
        logger.info({ workloadId: id, containerId: current.id, state: current.state }, 'starting container');
        // Secret files are written before every start, so a rotated value reaches a restarted container.
        if (spec.files && spec.files.length > 0) await runtime.writeFiles(current.id, spec.files);
        this.#changes += 1;
        await runtime.start(current.id);
      }
      this.#failures.delete(id);
      const details = await runtime.inspect(current.id);
      return details
        ? statusFromInspect(id, details, clock.now())
        : statusWithoutContainer(id, 'pending', null, clock.now());
    } catch (err) {
      const error = errorMessage(err);
      logger.warn({ workloadId: id, error }, 'workload failed to converge');
      this.#fail(id, hash, error, this.#o.retryMs);
      return statusWithoutContainer(id, 'failed', error, clock.now());
    }
  }

  /**
   * Null when the workload may be created from its image now; else the status to report meanwhile. An
   * image merely present on the host proves nothing: registry images are pulled (with the account's
   * credentials) before every create, snapshots run only for their own account, and only the images the
   * operator listed as host images run as they are.
   */
  async #imageReady(spec: WorkloadSpec, hash: string): Promise<WorkloadStatus | null> {
    const { runtime, clock } = this.#o;
    const id = spec.workloadId;
    const source = imageSource(spec.image, this.#o.hostImages);
    if (source.kind === 'host') return null;
    if (source.kind === 'snapshot') {
      if (!runtime.imageLabels) throw new Error('this runtime cannot inspect images');
      const refusal = snapshotRefusal(
        spec.image,
        source,
        await runtime.imageLabels(spec.image),
        specAccount(spec),
      );
      if (refusal === null) return null;
      this.#fail(id, hash, refusal, this.#o.retryMs);
      return statusWithoutContainer(id, 'failed', refusal, clock.now());
    }
    const pull = this.#puller.state(id, hash);
    if (pull?.kind === 'pulled') return null;
    if (pull?.kind === 'failed') {
      this.#scheduleRetry(Math.max(0, pull.retryAt - clock.now()));
      return statusWithoutContainer(id, 'failed', pull.error, clock.now());
    }
    if (!pull) this.#puller.start(spec.image, id, hash, spec.registryAuth ?? null);
    const progress = pull?.kind === 'pulling' ? pull.progress : { bytesDone: 0, bytesTotal: null };
    return { ...statusWithoutContainer(id, 'pulling', null, clock.now()), pullProgress: { ...progress } };
  }
}
