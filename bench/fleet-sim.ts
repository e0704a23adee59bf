// Simulated hosts against the real control plane: N agents speaking the real protocol (register with the
// join token, hello with a synthetic inventory flagged simulated, heartbeats and metric batches at the
// cadence the welcome gives: 10 s and 15 s by default), no Docker. The control plane runs in its own process (bench/servers/fleet-control-plane.ts, on
// PGlite, or PostgreSQL with DATABASE_URL); this process plays every host over loopback. Prints the
// control plane's CPU (% of one core) and RSS and the heartbeat round trip p50/p99 as the hosts see it
// (which includes this process's own event-loop delay). Bounded: ramp, settle, measure, stop. Then, under
// the largest fleet, the control plane is restarted (SIGTERM, a new process on the same database and
// port) and every host redials with the agent's own backoff: how long until all are ready again
// (welcomed and sent their desired state), and the heartbeat round trip meanwhile
// (BENCH_FLEET_RECONNECT=0 skips it).
// Run: `npm run bench` (all benches) or `node --import tsx bench/fleet-sim.ts`
// (BENCH_FLEET_SIZES=1000,5000 BENCH_FLEET_MEASURE_SECONDS=30).
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CONTROL_PLANE_NODE_FLAGS } from '@anvil/control-plane';
import {
  AGENT_CONNECT_PATH,
  type AgentMessage,
  type ControlPlaneMessage,
  createMessage,
  decodeControlPlaneMessage,
  encodeMessage,
  type Inventory,
  type MetricSample,
} from '@anvil/shared/protocol';
import { WebSocket } from 'ws';
import { backoffDelay, DEFAULT_BACKOFF } from '../agent/src/connection/backoff.ts';
import { noReadings } from '../agent/src/gpu/no-readings.ts';
import { createPostgresDatabase } from '../control-plane/src/testing/database.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const READY = 'BENCH_READY ';
/** The longest of the default cadences (metrics, 15 s), and a little more. */
const SETTLE_MS = 17_000;

export interface ControlPlaneChild {
  url: string;
  joinToken: string;
  /** The agent version the control plane ships: the simulated hosts run it, as an up-to-date fleet does. */
  agentVersion: string;
  process: ChildProcess;
}

/** Starts bench/servers/fleet-control-plane.ts and waits for its ready line. */
export async function startFleetControlPlane(env: Record<string, string> = {}): Promise<ControlPlaneChild> {
  const child = spawn(
    process.execPath,
    [
      ...CONTROL_PLANE_NODE_FLAGS,
      // BENCH_FLEET_PROFILE=<dir>: a V8 CPU profile of the control plane there, written when it stops.
      ...(process.env['BENCH_FLEET_PROFILE']
        ? ['--cpu-prof', `--cpu-prof-dir=${process.env['BENCH_FLEET_PROFILE']}`]
        : []),
      '--import',
      'tsx',
      join(HERE, 'servers', 'fleet-control-plane.ts'),
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
      env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    },
  );
  const lines = createInterface({ input: child.stdout! });
  const info = await new Promise<{ url: string; joinToken: string; agentVersion: string }>(
    (resolve, reject) => {
      lines.on('line', (line) => {
        if (line.startsWith(READY)) resolve(JSON.parse(line.slice(READY.length)));
        // Errors only: every simulated host's hello logs a loud "simulated GPUs" warning by design.
        else if (!/^\{"level":[1-4]\d,/.test(line)) process.stdout.write(`[control plane] ${line}\n`);
      });
      child.once('exit', (code) =>
        reject(new Error(`the control plane exited with ${code} before it was ready`)),
      );
    },
  );
  return { ...info, process: child };
}

export async function controlPlaneUsage(cp: ControlPlaneChild): Promise<{ cpuMicros: number; rss: number }> {
  const reply = once(cp.process, 'message') as Promise<
    [{ cpu: { user: number; system: number }; rss: number }]
  >;
  cp.process.send('usage');
  const [usage] = await reply;
  return { cpuMicros: usage.cpu.user + usage.cpu.system, rss: usage.rss };
}

export async function stopFleetControlPlane(cp: ControlPlaneChild): Promise<void> {
  if (cp.process.exitCode !== null) return;
  const exited = once(cp.process, 'exit');
  cp.process.kill('SIGTERM');
  await exited;
}

/** A synthetic inventory, flagged simulated everywhere it can be: no field pretends to be measured. */
function inventory(i: number): Inventory {
  return {
    host: {
      hostname: `sim-${i}`,
      os: { platform: 'linux', distro: null, release: null, kernel: null, arch: 'x64' },
      cpu: { model: null, cores: null, threads: null },
      memoryBytes: null,
      disks: [],
      networkInterfaces: [],
    },
    gpus: {
      simulated: true,
      source: 'simulated',
      driverVersion: null,
      cudaVersion: null,
      devices: [0, 1].map((index) => ({
        index,
        uuid: `GPU-sim-${i}-${index}`,
        name: 'NVIDIA H100 80GB HBM3 (simulated)',
        memoryTotalBytes: null,
        pciBusId: null,
      })),
      error: null,
    },
    docker: { version: null, apiVersion: null, runtimes: [], nvidiaRuntime: false, error: null },
  };
}

/** A sample shaped like a real agent's (host, two GPUs), with unknown readings null as a simulated GPU's are. */
function sample(i: number): MetricSample {
  return {
    at: Date.now(),
    host: {
      cpuPercent: null,
      load1: null,
      load5: null,
      load15: null,
      memoryTotalBytes: null,
      memoryUsedBytes: null,
      memoryAvailableBytes: null,
      disks: [],
      diskIo: null,
      network: [],
    },
    gpus: [0, 1].map((index) => ({
      index,
      uuid: `GPU-sim-${i}-${index}`,
      ...noReadings(),
    })),
    containers: [],
  };
}

function benchDatabaseKind(): string {
  if (process.env['DATABASE_URL']) return 'PostgreSQL (DATABASE_URL)';
  if (process.env['ANVIL_TEST_POSTGRES_URL']) return 'PostgreSQL (a fresh database, dropped after)';
  return 'embedded PGlite';
}

/** DATABASE_URL as given; else a fresh PostgreSQL database when ANVIL_TEST_POSTGRES_URL names a server; else PGlite. */
export async function benchDatabase(): Promise<{ env: Record<string, string>; drop(): Promise<void> }> {
  if (process.env['DATABASE_URL'] || !process.env['ANVIL_TEST_POSTGRES_URL'])
    return { env: {}, drop: async () => {} };
  const created = await createPostgresDatabase();
  return { env: { DATABASE_URL: created.url }, drop: () => created.drop() };
}

interface Credential {
  hostId: string;
  credential: string;
}

/** Opens a socket and runs `onMessage` for each decoded frame until the returned promise's work is done. */
function open(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

function send(ws: WebSocket, message: AgentMessage): void {
  ws.send(encodeMessage(message));
}

function next(ws: WebSocket, type: string, timeoutMs = 60_000): Promise<ControlPlaneMessage> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${type} within ${timeoutMs} ms`)), timeoutMs);
    const onMessage = (data: Buffer) => {
      const decoded = decodeControlPlaneMessage(data);
      if (!decoded.ok) return;
      if (decoded.message.type === 'refusal') {
        clearTimeout(timer);
        ws.off('message', onMessage);
        reject(new Error(`refused: ${decoded.message.reason}`));
      } else if (decoded.message.type === type) {
        clearTimeout(timer);
        ws.off('message', onMessage);
        resolve(decoded.message);
      }
    };
    ws.on('message', onMessage);
  });
}

/** Registration is set-up, not what is measured: a retryable refusal (the control plane busy) is retried. */
async function register(url: string, joinToken: string, i: number): Promise<Credential> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await registerOnce(url, joinToken, i);
    } catch (error) {
      if (attempt >= 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}

async function registerOnce(url: string, joinToken: string, i: number): Promise<Credential> {
  const ws = await open(url);
  try {
    const answer = next(ws, 'registered');
    send(ws, createMessage('register', { joinToken, hostname: `sim-${i}`, agentVersion: 'fleet-sim' }));
    const registered = (await answer) as Extract<ControlPlaneMessage, { type: 'registered' }>;
    return { hostId: registered.hostId, credential: registered.credential };
  } finally {
    ws.close();
  }
}

/**
 * One simulated host: hello with its credential, then as a real agent does after welcome (heartbeats at
 * the welcome's cadence starting at once, a metric batch at the welcome's metrics cadence, answers to
 * desired_state and commands). `ready` is the moment its first desired_state arrived after the latest
 * welcome: the control plane has accepted its hello and reconciled it. With `redial` on, a closed
 * connection is redialled the way the agent does it (agent/src/connection: the same backoff).
 */
class SimHost {
  ws: WebSocket | null = null;
  /** performance.now() when the current connection became ready; null while not. */
  readyAt: number | null = null;
  /** Dials since the last ready connection (refused or failed ones included). */
  dials = 0;
  redial = false;
  #timers: NodeJS.Timeout[] = [];
  #seq = 0;
  #stopped = false;
  readonly #sent = new Map<string, number>();

  constructor(
    readonly url: string,
    readonly credential: Credential,
    readonly index: number,
    readonly agentVersion: string,
    readonly rtts: number[],
    /** Spread the first beat over the interval (a fleet started at different times) rather than at once. */
    readonly spreadFirstBeat: boolean,
    readonly onReady: (host: SimHost) => void = () => {},
  ) {}

  /** One dial and hello; resolves once welcomed and sent its first desired_state, rejects on a refusal. */
  async connect(timeoutMs = 60_000): Promise<void> {
    this.dials += 1;
    const ws = await open(this.url);
    this.ws = ws;
    ws.on('error', () => {});
    const welcome = next(ws, 'welcome', timeoutMs);
    const desired = next(ws, 'desired_state', timeoutMs);
    desired.catch(() => {});
    send(
      ws,
      createMessage('hello', {
        agentVersion: this.agentVersion,
        ...this.credential,
        inventory: inventory(this.index),
      }),
    );
    let intervals: { heartbeatMs: number; metricsMs: number };
    try {
      const w = (await welcome) as Extract<ControlPlaneMessage, { type: 'welcome' }>;
      intervals = { heartbeatMs: w.heartbeatSeconds * 1000, metricsMs: w.metricsSeconds * 1000 };
    } catch (error) {
      ws.terminate();
      throw error;
    }
    this.#serve(ws, intervals);
    await desired;
    this.readyAt = performance.now();
    this.dials = 0;
    this.onReady(this);
  }

  #serve(ws: WebSocket, intervals: { heartbeatMs: number; metricsMs: number }): void {
    ws.on('message', (data: Buffer) => {
      const decoded = decodeControlPlaneMessage(data);
      if (!decoded.ok) return;
      const message = decoded.message;
      if (message.type === 'heartbeat_ack') {
        const at = this.#sent.get(message.id);
        if (at !== undefined) {
          this.#sent.delete(message.id);
          this.rtts.push(performance.now() - at);
        }
      } else if (message.type === 'desired_state') {
        send(
          ws,
          createMessage(
            'reply',
            { ok: true, result: { generation: message.generation, accepted: true } },
            { id: message.id },
          ),
        );
        send(ws, createMessage('actual_state', { generation: message.generation, workloads: [] }));
      } else if (message.type === 'command') {
        send(
          ws,
          createMessage(
            'reply',
            { ok: false, error: { code: 'failed', message: 'simulated host' } },
            { id: message.id },
          ),
        );
      }
    });
    ws.once('close', () => {
      this.#clearTimers();
      this.readyAt = null;
      if (this.redial && !this.#stopped) void this.#redialLoop();
    });
    const beat = () => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const heartbeat = createMessage('heartbeat', {
        seq: this.#seq++,
        sentAt: Date.now(),
        uptimeSeconds: 1,
      });
      this.#sent.set(heartbeat.id, performance.now());
      send(ws, heartbeat);
    };
    const metrics = () => {
      if (ws.readyState !== WebSocket.OPEN) return;
      send(ws, createMessage('metric_batch', { samples: [sample(this.index)], dropped: 0 }));
    };
    const every = (ms: number, first: number, task: () => void) => {
      this.#timers.push(
        setTimeout(() => {
          task();
          this.#timers.push(setInterval(task, ms));
        }, first),
      );
    };
    every(intervals.heartbeatMs, this.spreadFirstBeat ? Math.random() * intervals.heartbeatMs : 0, beat);
    every(intervals.metricsMs, Math.random() * intervals.metricsMs, metrics);
  }

  /** As the agent's connection loop: a jittered, capped exponential wait before each dial. */
  async #redialLoop(): Promise<void> {
    for (let attempt = 0; !this.#stopped; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, backoffDelay(attempt, DEFAULT_BACKOFF)));
      if (this.#stopped) return;
      try {
        await this.connect();
        return;
      } catch {
        // refused, or nothing listening yet: wait longer and redial
      }
    }
  }

  #clearTimers(): void {
    for (const timer of this.#timers.splice(0)) clearTimeout(timer);
  }

  stop(): void {
    this.#stopped = true;
    this.#clearTimers();
    this.ws?.terminate();
  }
}

/** Like a real agent, a host whose hello was refused for now (the control plane busy) redials. */
async function hello(host: SimHost): Promise<SimHost> {
  for (let attempt = 1; ; attempt++) {
    try {
      await host.connect();
      return host;
    } catch (error) {
      if (attempt >= 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 1_000 * attempt));
    }
  }
}

/** Runs `work` for 0..n-1 with at most `limit` in flight. */
async function pool<T>(n: number, limit: number, work: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let nextIndex = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, n) }, async () => {
      while (nextIndex < n) {
        const i = nextIndex++;
        out[i] = await work(i);
      }
    }),
  );
  return out;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export interface FleetRound {
  hosts: number;
  connectSeconds: number;
  cpuPercent: number;
  rssMiB: number;
  heartbeats: number;
  p50: number;
  p99: number;
  max: number;
}

export interface ReconnectRound {
  hosts: number;
  /** SIGTERM to the old control plane until the new one listens. */
  restartSeconds: number;
  /** The new control plane listening until every host is ready again (welcomed and reconciled). */
  readySeconds: number;
  ready: number;
  /** Dials that did not end in a welcome, over the whole fleet. */
  failedDials: number;
  /** Control-plane CPU from listening until all were ready: the wave's own cost, whatever the machine's load. */
  cpuSeconds: number;
  heartbeats: number;
  p50: number;
  p99: number;
  max: number;
}

function rttFigures(rtts: number[]): { heartbeats: number; p50: number; p99: number; max: number } {
  const sorted = [...rtts].sort((a, b) => a - b);
  return {
    heartbeats: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.at(-1) ?? Number.NaN,
  };
}

/**
 * Restarts the control plane under `hosts` (all connected and ready): SIGTERM, then a new process on
 * the same database and port. Every host redials as the agent does and the clock runs until all are
 * ready again or `limitSeconds` pass.
 */
async function restartUnder(
  hosts: SimHost[],
  cp: ControlPlaneChild,
  env: Record<string, string>,
  rtts: number[],
  limitSeconds: number,
): Promise<{ round: ReconnectRound; cp: ControlPlaneChild }> {
  for (const host of hosts) host.redial = true;
  const stopAt = performance.now();
  await stopFleetControlPlane(cp);
  const port = new URL(cp.url).port;
  const next = await startFleetControlPlane({ ...env, BENCH_FLEET_PORT: port });
  const upAt = performance.now();
  const startUsage = await controlPlaneUsage(next);
  rtts.length = 0;
  const failedBefore = hosts.reduce((sum, h) => sum + h.dials, 0);
  const allReady = () => hosts.every((h) => h.readyAt !== null && h.readyAt > stopAt);
  while (!allReady() && performance.now() - upAt < limitSeconds * 1000) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const readyAt = performance.now();
  const usage = await controlPlaneUsage(next);
  const ready = hosts.filter((h) => h.readyAt !== null && h.readyAt > stopAt).length;
  const last = Math.max(...hosts.map((h) => h.readyAt ?? 0));
  return {
    cp: next,
    round: {
      hosts: hosts.length,
      restartSeconds: (upAt - stopAt) / 1000,
      readySeconds: ((ready === hosts.length ? last : readyAt) - upAt) / 1000,
      ready,
      failedDials: failedBefore + hosts.reduce((sum, h) => sum + h.dials, 0),
      cpuSeconds: (usage.cpuMicros - startUsage.cpuMicros) / 1e6,
      ...rttFigures(rtts),
    },
  };
}

export async function runFleetSimBench(
  sizes = (process.env['BENCH_FLEET_SIZES'] ?? '1000,5000').split(',').map(Number),
  measureSeconds = Number(process.env['BENCH_FLEET_MEASURE_SECONDS'] ?? '30'),
  reconnect = process.env['BENCH_FLEET_RECONNECT'] !== '0',
): Promise<{ rounds: FleetRound[]; reconnect: ReconnectRound | null }> {
  const [one, five] = loadavg();
  process.stdout.write(
    `fleet-sim: ${sizes.join(' and ')} simulated hosts, heartbeat and metric batch at the welcome's cadence, ` +
      `${measureSeconds} s measured after one settling interval` +
      `${reconnect ? `, then a control-plane restart under the last ${sizes.at(-1)}` : ''}; database ${benchDatabaseKind()}; ` +
      `node ${process.version}, ${availableParallelism()} CPUs, load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  const database = await benchDatabase();
  // A data directory of the bench's own, so a restarted control plane finds the same embedded database.
  const dataDir = mkdtempSync(join(tmpdir(), 'anvil-bench-fleet-'));
  const env = { ...database.env, BENCH_FLEET_DATA_DIR: dataDir };
  let cp = await startFleetControlPlane(env);
  const rounds: FleetRound[] = [];
  let reconnectRound: ReconnectRound | null = null;
  try {
    const url = `${cp.url.replace(/^http/, 'ws')}${AGENT_CONNECT_PATH}`;
    const most = Math.max(...sizes);
    const registerStart = performance.now();
    const credentials = await pool(most, 8, (i) => register(url, cp.joinToken, i));
    process.stdout.write(
      `  registered ${most} hosts in ${((performance.now() - registerStart) / 1000).toFixed(1)} s\n`,
    );
    for (const [n, size] of sizes.entries()) {
      const rtts: number[] = [];
      const connectStart = performance.now();
      const burstStart = await controlPlaneUsage(cp);
      const hosts = await pool(size, 64, (i) =>
        hello(new SimHost(url, credentials[i]!, i, cp.agentVersion, rtts, true)),
      );
      const connectSeconds = (performance.now() - connectStart) / 1000;
      const burstCpuMs = ((await controlPlaneUsage(cp)).cpuMicros - burstStart.cpuMicros) / 1000;
      // One full interval so every host has sent once and the connection burst has drained.
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      rtts.length = 0;
      const before = await controlPlaneUsage(cp);
      const t0 = performance.now();
      await new Promise((resolve) => setTimeout(resolve, measureSeconds * 1000));
      const after = await controlPlaneUsage(cp);
      const wallMicros = (performance.now() - t0) * 1000;
      const alive = hosts.filter((h) => h.ws?.readyState === WebSocket.OPEN).length;
      const round: FleetRound = {
        hosts: size,
        connectSeconds,
        cpuPercent: ((after.cpuMicros - before.cpuMicros) / wallMicros) * 100,
        rssMiB: after.rss / 1024 / 1024,
        ...rttFigures(rtts),
      };
      rounds.push(round);
      process.stdout.write(
        `  N=${String(size).padStart(5)}  hello burst ${connectSeconds.toFixed(1)} s ` +
          `(control plane CPU ${(burstCpuMs / size).toFixed(1)} ms a hello)   then control plane CPU ` +
          `${round.cpuPercent.toFixed(1)} % of a core   RSS ${round.rssMiB.toFixed(0)} MiB   heartbeat RTT ` +
          `p50 ${round.p50.toFixed(1)} ms  p99 ${round.p99.toFixed(1)} ms  max ${round.max.toFixed(1)} ms ` +
          `(${round.heartbeats} heartbeats; ${alive} of ${size} hosts still connected; target at 5000: p99 < 100 ms)\n`,
      );
      if (reconnect && n === sizes.length - 1) {
        const limit = Number(process.env['BENCH_FLEET_RECONNECT_LIMIT_SECONDS'] ?? '180');
        const restarted = await restartUnder(hosts, cp, env, rtts, limit);
        cp = restarted.cp;
        const r = restarted.round;
        reconnectRound = r;
        process.stdout.write(
          `  restart under N=${size}: down ${r.restartSeconds.toFixed(1)} s (SIGTERM to listening again), then ` +
            `${r.ready} of ${size} ready in ${r.readySeconds.toFixed(1)} s (target: all within 30 s; ${r.failedDials} ` +
            `refused or failed dials)   control plane CPU meanwhile ${r.cpuSeconds.toFixed(1)} s ` +
            `(${((r.cpuSeconds * 1000) / size).toFixed(1)} ms a host)   heartbeat RTT meanwhile ` +
            `p50 ${r.p50.toFixed(1)} ms  p99 ${r.p99.toFixed(1)} ms  max ${r.max.toFixed(1)} ms (${r.heartbeats} heartbeats; target p99 < 100 ms)\n`,
        );
      }
      for (const host of hosts) host.stop();
      // Let the control plane record the disconnects before the next round.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
    }
  } finally {
    await stopFleetControlPlane(cp);
    await database.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return { rounds, reconnect: reconnectRound };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runFleetSimBench();
}
