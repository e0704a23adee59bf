import { mkdir, rm, stat } from 'node:fs/promises';
import { hostname as osHostname } from 'node:os';
import {
  type AgentMessage,
  type CommandBody,
  type ControlPlaneMessage,
  createMessage,
  type Inventory,
  type MessageOf,
  PROTOCOL_VERSION,
} from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import type { Logger } from 'pino';
import { type Clock, sleep, systemClock } from './clock.ts';
import { type BackoffPolicy, DEFAULT_BACKOFF } from './connection/backoff.ts';
import type { Channel } from './connection/channel.ts';
import { type CredentialStore, fileCredentialStore } from './connection/credential-store.ts';
import type { HandshakeResult } from './connection/handshake.ts';
import { runHeartbeats } from './connection/heartbeat.ts';
import { runConnectionLoop } from './connection/loop.ts';
import { runCredentialRenewal } from './connection/renewal.ts';
import { type Dialer, wsDialer } from './connection/transport.ts';
import { connectUrl } from './connection/url.ts';
import { volumeDir } from './docker/container-config.ts';
import type { DirectPorts } from './docker/labels.ts';
import type { ContainerRuntime } from './docker/runtime.ts';
import { detectStorageQuota, type StorageQuota } from './docker/storage-quota.ts';
import { errorMessage } from './errors.ts';
import { VolumeFiles } from './files/volume-files.ts';
import type { GpuProvider } from './gpu/provider.ts';
import type { HostProvider } from './host/provider.ts';
import { LogBuffer } from './logs/buffer.ts';
import { LogCursors } from './logs/cursors.ts';
import { LogManager } from './logs/manager.ts';
import { DiskMeter } from './metrics/disk-usage.ts';
import { MetricsSampler } from './metrics/sampler.ts';
import { SnapshotMeter } from './metrics/snapshot-meter.ts';
import { AccountNetworks } from './network/account-networks.ts';
import { createIptablesFirewall, type Firewall } from './network/firewall.ts';
import { controlPlaneDownloads } from './reconcile/download-request.ts';
import { Reconciler } from './reconcile/reconciler.ts';
import { watchDocker } from './reconcile/watch.ts';
import { TunnelManager } from './tunnels/manager.ts';
import type { SelfUpgrader, UpgradeResult } from './upgrade/self-upgrade.ts';
import { AGENT_VERSION } from './version.ts';
import { ContainerAddresses } from './worker-api/addresses.ts';
import { WorkerApiRelay } from './worker-api/relay.ts';

/** How old an inventory a reconnect's hello may reuse (a fresh one follows the welcome). */
const INVENTORY_REUSE_MS = 10 * 60_000;

/** Everything the agent touches, injected (Coder's agent style): tests swap any part. */
export interface AgentOptions {
  controlPlaneUrl: string;
  /** Plain ws:// off loopback allowed (--allow-insecure-control-plane): for tunnels' dial addresses too. */
  allowInsecureControlPlane?: boolean;
  joinToken: string | null;
  stateDir: string;
  /** Per-workload volume directories live under this root. */
  volumeRoot: string;
  /** Images every account may run without a pull (ReconcilerOptions.hostImages). */
  hostImages?: readonly string[];
  runtime: ContainerRuntime;
  /** The engine's client for reverse tunnels (exec, container addresses); without it tunnels are refused. */
  docker?: Dockerode;
  gpu: GpuProvider;
  host: HostProvider;
  logger: Logger;
  clock?: Clock;
  dial?: Dialer;
  credentials?: CredentialStore;
  hostname?: string;
  agentVersion?: string;
  /** Tests set this to play an agent of another protocol version. */
  protocolVersion?: number;
  backoff?: BackoffPolicy;
  random?: () => number;
  handshakeTimeoutMs?: number;
  /** Full reconcile pass this often even without Docker events. */
  resyncIntervalMs?: number;
  /** Bound on log lines held while they cannot be sent. */
  logBufferBytes?: number;
  /** The buffer those lines wait in (tests watch it fill); by default one of logBufferBytes. */
  logBuffer?: LogBuffer;
  /** Bound on metric samples held while they cannot be sent. */
  maxMetricSamples?: number;
  /** How often buffered logs and metrics are sent. */
  flushIntervalMs?: number;
  /** The firewall that fences account networks; iptables by default. */
  firewall?: Firewall;
  /** How often each workload's disk is measured (writable layer plus volume). */
  diskMeasureMs?: number;
  /** ANVIL_DIRECT_PORTS_ADDRESS and its range; absent: no port is published on the host. */
  directPorts?: DirectPorts | null;
  /** Installs another agent version when the control plane asks (upgrade_agent); null: refused. */
  upgrader?: SelfUpgrader | null;
  /** Called after an upgrade was staged and its reply sent: the process should exit to run it. */
  onUpgraded?: (result: UpgradeResult) => void;
  /** ANVIL_RENDEZVOUS_ADDRESS; absent: this host takes single-host training gangs only. */
  rendezvousAddress?: string | null;
  /**
   * The worker API port (ANVIL_WORKER_API_PORT, worker-api/relay.ts) containers reach the control plane's
   * worker API through; absent or null: none, and workers of the RunPod protocol cannot take jobs here.
   */
  workerApi?: { port: number; address?: string } | null;
}

export interface Agent {
  /** Runs until the signal aborts (resolves) or the control plane refuses for good (FatalAgentError). */
  run(signal: AbortSignal): Promise<void>;
  /** Known after registration, or at start from a saved credential. */
  readonly hostId: string | null;
  readonly reconciler: Reconciler | null;
}

/** Above this many bytes queued on the socket, logs and metrics wait: the control plane is slow. */
const BACKPRESSURE_BYTES = 1024 * 1024;
const LOG_BATCH_BYTES = 512 * 1024;
const LOG_BATCH_ENTRIES = 2_000;
const METRIC_BATCH_SAMPLES = 60;

interface Workers {
  hostId: string;
  reconciler: Reconciler;
  logs: LogManager;
  sampler: MetricsSampler;
  stop: AbortController;
  done: Promise<unknown>;
}

export function createAgent(options: AgentOptions): Agent {
  const clock = options.clock ?? systemClock;
  const credentials = options.credentials ?? fileCredentialStore(options.stateDir);
  const agentVersion = options.agentVersion ?? AGENT_VERSION;
  const startedAt = clock.now();
  const logBuffer = options.logBuffer ?? new LogBuffer(options.logBufferBytes ?? 16 * 1024 * 1024);
  let logger = options.logger;
  let cursors: LogCursors | null = null;
  let workers: Workers | null = null;
  /** The connected channel, when there is one: events go out through it, or wait/drop when null. */
  let channel: Channel | null = null;
  let heartbeatMs = 10_000;
  let metricsMs: number | null = null;
  /** The credential of the current session: tunnel sockets present it. */
  let sessionCredential: HandshakeResult['credential'] | null = null;
  const workerApiPort = options.docker ? (options.workerApi?.port ?? null) : null;
  const firewall =
    options.firewall ??
    createIptablesFirewall(undefined, { acceptTcpPorts: workerApiPort ? [workerApiPort] : [] });
  /** Probed once at start (run), before any container is created. */
  let storageQuota: StorageQuota = { enforced: false, reason: 'not probed yet' };
  const files = new VolumeFiles(options.volumeRoot);
  const tunnels = new TunnelManager({
    docker: options.docker ?? null,
    files,
    controlPlaneUrl: options.controlPlaneUrl,
    allowInsecure: options.allowInsecureControlPlane ?? false,
    logger: options.logger.child({ component: 'tunnels' }),
  });

  const relay =
    options.docker && workerApiPort
      ? new WorkerApiRelay({
          controlPlaneUrl: options.controlPlaneUrl,
          addresses: new ContainerAddresses(options.docker, () => workers?.hostId ?? null),
          credential: () => sessionCredential,
          logger: options.logger.child({ component: 'worker-api' }),
        })
      : null;
  /** Set once the relay listens: only then do containers get its address. */
  let workerApi: { port: number } | null = null;

  function send(message: AgentMessage): boolean {
    if (!channel?.isOpen) return false;
    try {
      channel.send(message);
      return true;
    } catch (err) {
      logger.debug({ type: message.type, err: errorMessage(err) }, 'message not sent');
      return false;
    }
  }

  async function inventory(): Promise<Inventory> {
    const [host, gpus, docker] = await Promise.all([
      options.host.inventory(),
      options.gpu.inventory(),
      options.runtime.info(),
    ]);
    const network = options.docker
      ? await firewall.probe()
      : { enforced: false, reason: 'the agent has no Docker client to make account networks with' };
    return {
      host,
      gpus,
      docker,
      isolation: { network, diskQuota: storageQuota },
      rendezvousAddress: options.rendezvousAddress ?? null,
    };
  }

  /** The inventory the last hello carried, and when it was gathered. */
  let lastInventory: { value: Inventory; at: number } | null = null;
  let refreshInventory = false;

  /**
   * For the hello: a fresh inventory on the first connection, the last one on a reconnect within
   * INVENTORY_REUSE_MS (gathering it spawns tools that take tens of seconds on a loaded host, and a
   * control-plane failover should not wait for that); the session then gathers a fresh one and sends it
   * (`inventory`) if anything changed.
   */
  async function helloInventory(): Promise<Inventory> {
    const cached = lastInventory;
    if (cached && clock.now() - cached.at < INVENTORY_REUSE_MS) {
      refreshInventory = true;
      return cached.value;
    }
    const value = await inventory();
    lastInventory = { value, at: clock.now() };
    return value;
  }

  async function sendInventoryIfChanged(): Promise<void> {
    const sent = lastInventory;
    const value = await inventory();
    lastInventory = { value, at: clock.now() };
    if (JSON.stringify(value) !== JSON.stringify(sent?.value))
      send(createMessage('inventory', { inventory: value }));
  }

  function sendActualState(): void {
    const report = workers?.reconciler.report();
    // Before the first desired set the agent knows no workloads: saying "none" would be a lie.
    if (report && report.generation !== null) send(createMessage('actual_state', report));
  }

  /** Start reconciling, log following and sampling for a host; they outlive connections. */
  function startWorkers(hostId: string): Workers {
    if (workers) {
      if (workers.hostId !== hostId) throw new Error(`host id changed from ${workers.hostId} to ${hostId}`);
      return workers;
    }
    logger = options.logger.child({ hostId });
    const stop = new AbortController();
    let debounce: unknown = null;
    const logs = new LogManager({
      runtime: options.runtime,
      buffer: logBuffer,
      cursors: cursors!,
      logger,
      now: () => clock.now(),
    });
    const layerBytes = options.runtime.layerBytes?.bind(options.runtime);
    const disk = layerBytes
      ? new DiskMeter({
          layerBytes,
          clock,
          logger,
          everyMs: options.diskMeasureMs ?? 60_000,
          // A new figure may cross a workload's bound: the reconciler's pass puts it in the status.
          onMeasured: () => reconciler.trigger(),
        })
      : null;
    const reconciler: Reconciler = new Reconciler({
      runtime: options.runtime,
      hostId,
      volumeRoot: options.volumeRoot,
      hostImages: options.hostImages ?? [],
      gpuMode: options.gpu.simulated ? 'env-only' : 'device-requests',
      clock,
      logger,
      onContainerState: (change) => send(createMessage('container_state', change)),
      onActualState: (report) => send(createMessage('actual_state', report)),
      onPullProgress: (report) => send(createMessage('pull_progress', report)),
      // The credential of the session at the time of each fetch (a new session may bring a new one).
      requestDownload: controlPlaneDownloads(options.controlPlaneUrl, () => sessionCredential),
      networks: options.docker
        ? new AccountNetworks({
            docker: options.docker,
            hostId,
            firewall,
            rendezvousAddress: options.rendezvousAddress ?? null,
            logger: logger.child({ component: 'networks' }),
          })
        : null,
      directPorts: options.directPorts ?? null,
      rendezvousAddress: options.rendezvousAddress ?? null,
      workerApi,
      storageQuota: storageQuota.enforced,
      ...(disk ? { diskUsage: (id: string) => disk.usage(id) } : {}),
      onPass: () => {
        logs.sync(reconciler.running());
        logs.retain(reconciler.existing());
      },
    });
    const sampler = new MetricsSampler({
      host: options.host,
      gpu: options.gpu,
      runtime: options.runtime,
      running: () => reconciler.running(),
      clock,
      logger,
      maxSamples: options.maxMetricSamples ?? 360,
      snapshots: options.runtime.snapshotUsage
        ? new SnapshotMeter({
            list: options.runtime.snapshotUsage.bind(options.runtime),
            clock,
            everyMs: options.diskMeasureMs ?? 60_000,
          })
        : null,
      disk: disk && {
        meter: disk,
        volumeDirOf: (id) => (reconciler.specOf(id)?.volume ? volumeDir(options.volumeRoot, id) : null),
        limitOf: (id) => reconciler.specOf(id)?.diskBytes ?? null,
      },
    });
    const trigger = () => {
      // Docker sends events in bursts (create, start, attach...): one pass for the burst.
      if (debounce !== null) return;
      debounce = clock.setTimeout(() => {
        debounce = null;
        reconciler.trigger();
      }, 100);
    };
    const done = Promise.allSettled([
      watchDocker(
        {
          runtime: options.runtime,
          hostId,
          onChange: trigger,
          clock,
          logger,
          resyncMs: options.resyncIntervalMs ?? 30_000,
        },
        stop.signal,
      ),
      sampler.run(stop.signal),
    ]);
    reconciler.trigger();
    workers = { hostId, reconciler, logs, sampler, stop, done };
    return workers;
  }

  async function handleCommand(command: CommandBody): Promise<unknown> {
    switch (command.name) {
      case 'ping':
        return { pong: true, at: clock.now() };
      case 'set_intervals':
        if (command.heartbeatSeconds !== null) heartbeatMs = command.heartbeatSeconds * 1000;
        if (command.metricsSeconds !== null) {
          metricsMs = command.metricsSeconds * 1000;
          workers?.sampler.setInterval(metricsMs);
        }
        return {
          heartbeatSeconds: heartbeatMs / 1000,
          metricsSeconds: metricsMs === null ? null : metricsMs / 1000,
        };
      case 'resync':
        send(createMessage('inventory', { inventory: await inventory() }));
        sendActualState();
        return { generation: workers?.reconciler.generation ?? null };
      case 'inspect_workload':
        return (
          workers?.reconciler.report().workloads.find((w) => w.workloadId === command.workloadId) ?? null
        );
      case 'open_tunnel':
        if (!sessionCredential) throw new Error('not registered');
        return tunnels.open(command, sessionCredential);
      case 'signal_workload': {
        const container = await managedContainer(command.workloadId);
        if (!container || !options.runtime.kill)
          return { containerId: container?.id ?? null, signalled: false };
        return {
          containerId: container.id,
          signalled: await options.runtime.kill(container.id, command.signal),
        };
      }
      case 'commit_workload': {
        const container = await managedContainer(command.workloadId);
        if (!container) throw new Error(`no container for workload ${command.workloadId}`);
        if (!options.runtime.commit) throw new Error('this container runtime cannot commit containers');
        const image = await options.runtime.commit(container.id, {
          ...command,
          volumeDir: command.includeVolume ? volumeDir(options.volumeRoot, command.workloadId) : null,
        });
        logger.info(
          { workloadId: command.workloadId, imageId: image.imageId },
          'workload committed to an image',
        );
        return { ...image, repository: command.repository, tag: command.tag, containerId: container.id };
      }
      case 'remove_snapshots': {
        if (!options.runtime.removeSnapshots) throw new Error('this container runtime cannot remove images');
        const outcome = await options.runtime.removeSnapshots(command);
        logger.info(
          {
            workloadId: command.workloadId,
            removed: outcome.removed.length,
            failed: outcome.failed.length,
            kept: outcome.kept.length,
          },
          'workload snapshots removed',
        );
        return outcome;
      }
      case 'list_snapshots': {
        if (!options.runtime.listSnapshots) throw new Error('this container runtime cannot list images');
        return { images: await options.runtime.listSnapshots(command) };
      }
      case 'upgrade_agent': {
        if (!options.upgrader) {
          throw new Error(
            'this agent was not installed from an artifact (no ANVIL_INSTALL_DIR): it cannot upgrade itself',
          );
        }
        if (command.version === agentVersion) {
          return { version: agentVersion, previous: agentVersion, installDir: null };
        }
        logger.info({ from: agentVersion, to: command.version }, 'agent upgrade: downloading');
        const result = await options.upgrader.stage(command);
        logger.info({ ...result }, 'agent upgrade staged: restarting into the new version');
        // After the reply (sent when this resolves) has left: exit, and systemd starts the new version.
        setImmediate(() => options.onUpgraded?.(result));
        return result;
      }
      case 'stat_file':
        return files.stat(command.workloadId, command.path, command.hash);
      case 'delete_file': {
        const outcome = await files.remove(command.workloadId, command.path);
        logger.info(
          { workloadId: command.workloadId, path: command.path, ...outcome },
          'volume file deleted',
        );
        return outcome;
      }
      case 'remove_volume': {
        // The id matched the protocol's WorkloadId pattern (no slashes, no leading dot), so this stays under volumeRoot.
        const dir = volumeDir(options.volumeRoot, command.workloadId);
        const existed = await stat(dir).then(
          () => true,
          () => false,
        );
        await rm(dir, { recursive: true, force: true });
        logger.info({ workloadId: command.workloadId, existed }, 'workload volume removed');
        return { removed: existed };
      }
    }
  }

  /** The Anvil container of a workload on this host, if there is one. */
  async function managedContainer(workloadId: string) {
    const hostId = workers?.hostId;
    if (!hostId) return null;
    const list = await options.runtime.listManaged(hostId);
    return list.find((c) => c.workloadId === workloadId) ?? null;
  }

  function reply(to: MessageOf<'desired_state'> | MessageOf<'command'>, work: () => Promise<unknown>): void {
    work().then(
      (result) => send(createMessage('reply', { ok: true, result: result ?? null }, { id: to.id })),
      (err: unknown) =>
        send(
          createMessage(
            'reply',
            { ok: false, error: { code: 'failed', message: errorMessage(err) } },
            { id: to.id },
          ),
        ),
    );
  }

  /** Flush buffered logs and metrics while the socket keeps up. */
  function flush(): void {
    if (!workers || !channel?.isOpen) return;
    const losses = logBuffer.takeLosses();
    if (losses.length > 0) {
      for (const loss of losses) logger.warn({ ...loss }, 'log buffer was full: lines dropped');
      // Could not report the loss now: keep it to report next time rather than forget it.
      if (!send(createMessage('logs_dropped', { losses }))) logBuffer.restoreLosses(losses);
    }
    while (logBuffer.length > 0 && channel.bufferedAmount < BACKPRESSURE_BYTES) {
      const entries = logBuffer.take(LOG_BATCH_BYTES, LOG_BATCH_ENTRIES);
      if (!send(createMessage('log_batch', { entries }))) {
        logBuffer.unshift(entries);
        break;
      }
      for (const e of entries) cursors?.advance(e.containerId, e.stream, e.ts);
    }
    // After the lines on the same socket: the control plane waits for this before it trusts a stopped
    // container's reports are all in (a preempted trainer's checkpoint written on SIGTERM).
    const complete = logBuffer.takeEnded();
    if (complete.length > 0 && !send(createMessage('log_batch', { entries: [], complete }))) {
      logBuffer.restoreEnded(complete);
    }
    while (workers.sampler.pending > 0 && channel.bufferedAmount < BACKPRESSURE_BYTES) {
      const batch = workers.sampler.take(METRIC_BATCH_SAMPLES);
      if (!send(createMessage('metric_batch', batch))) {
        workers.sampler.requeue(batch);
        break;
      }
    }
  }

  async function runSession(ch: Channel, { credential, welcome }: HandshakeResult, signal: AbortSignal) {
    const w = startWorkers(credential.hostId);
    sessionCredential = credential;
    logger.info({ controlPlane: options.controlPlaneUrl }, 'connected to the control plane');
    heartbeatMs = welcome.heartbeatSeconds * 1000;
    metricsMs = welcome.metricsSeconds * 1000;
    w.sampler.setInterval(metricsMs);
    let firstDesired = true;
    ch.onMessage((message: ControlPlaneMessage) => {
      if (message.type === 'desired_state') {
        reply(message, async () => {
          const accepted = w.reconciler.setDesired(message.generation, message.workloads, firstDesired);
          firstDesired = false;
          return { generation: message.generation, accepted };
        });
      } else if (message.type === 'command') {
        reply(message, () => handleCommand(message.command));
      }
    });
    channel = ch;
    if (refreshInventory) {
      refreshInventory = false;
      void sendInventoryIfChanged().catch((err: unknown) =>
        logger.warn({ err: errorMessage(err) }, 'inventory refresh after reconnect failed'),
      );
    }
    // Alongside the session, never ending it: a failed renewal is retried on the next connection.
    void runCredentialRenewal(
      ch,
      {
        credential,
        welcome,
        credentials,
        clock,
        logger,
        timeoutMs: options.handshakeTimeoutMs ?? 15_000,
        renewed: (next) => {
          sessionCredential = next;
        },
      },
      signal,
    ).catch((err: unknown) => {
      if (!signal.aborted) logger.warn({ err: errorMessage(err) }, 'host credential renewal failed');
    });
    try {
      // Resync: whatever the control plane missed while the connection was down.
      sendActualState();
      const flushMs = options.flushIntervalMs ?? 500;
      const flusher = (async () => {
        while (!signal.aborted) {
          flush();
          await cursors?.flush();
          await sleep(clock, flushMs, signal);
        }
      })();
      // Named routines share one cancellation: if the heartbeat fails, the session ends and redials.
      await Promise.race([
        runHeartbeats(ch, { intervalMs: () => heartbeatMs, clock, logger, startedAt }, signal),
        flusher,
      ]);
    } finally {
      if (channel === ch) channel = null;
    }
  }

  return {
    get hostId() {
      return workers?.hostId ?? null;
    },
    get reconciler() {
      return workers?.reconciler ?? null;
    },
    async run(signal) {
      await mkdir(options.stateDir, { recursive: true, mode: 0o700 });
      cursors = await LogCursors.open(options.stateDir, options.logger);
      if (options.docker) storageQuota = await detectStorageQuota(options.docker);
      if (!storageQuota.enforced)
        options.logger.warn(
          { reason: storageQuota.reason },
          'storage_gb cannot be enforced on this host (measured only)',
        );
      if (relay && workerApiPort) {
        try {
          workerApi = { port: await relay.listen(workerApiPort, options.workerApi?.address) };
          options.logger.info({ port: workerApi.port }, 'worker API relay listening');
        } catch (err) {
          // The rest of the agent works without it; RunPod-protocol workers on this host cannot take jobs.
          options.logger.error(
            { port: workerApiPort, err: errorMessage(err) },
            'worker API port not available: workers of the RunPod protocol cannot reach the control plane from this host',
          );
        }
      }
      // A saved credential names the host: start observing Docker and following logs right away,
      // before the control plane answers, so an outage at start loses no log line.
      const saved = await credentials.load();
      if (saved) startWorkers(saved.hostId);
      const url = connectUrl(options.controlPlaneUrl);
      try {
        await runConnectionLoop(
          {
            url,
            controlPlane: options.controlPlaneUrl,
            dial: options.dial ?? wsDialer({ handshakeTimeoutMs: options.handshakeTimeoutMs ?? 15_000 }),
            clock,
            logger,
            backoff: options.backoff ?? DEFAULT_BACKOFF,
            protocolVersion: options.protocolVersion ?? PROTOCOL_VERSION,
            credentials,
            joinToken: options.joinToken,
            hostname: options.hostname ?? osHostname(),
            agentVersion,
            inventory: helloInventory,
            timeoutMs: options.handshakeTimeoutMs ?? 15_000,
            ...(options.random ? { random: options.random } : {}),
          },
          runSession,
          signal,
        );
      } finally {
        tunnels.closeAll();
        await relay?.close();
        // Workloads keep running: stopping the agent must never stop a customer's container.
        if (workers) {
          workers.stop.abort();
          workers.logs.stop();
          workers.reconciler.stop();
          await workers.done;
          await workers.reconciler.idle();
        }
        await cursors.flush();
      }
    },
  };
}
