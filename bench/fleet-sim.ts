// Simulated hosts against the real control plane: N agents speaking the real protocol (register with the
// join token, hello with a synthetic inventory flagged simulated, heartbeat and one metric batch every
// 10 s), no Docker. The control plane runs in its own process (bench/servers/fleet-control-plane.ts, on
// PGlite, or PostgreSQL with DATABASE_URL); this process plays every host over loopback. Prints the
// control plane's CPU (% of one core) and RSS and the heartbeat round trip p50/p99 as the hosts see it
// (which includes this process's own event-loop delay). Bounded: ramp, settle, measure, stop.
// Run: `npm run bench` (all benches) or `node --import tsx bench/fleet-sim.ts`
// (BENCH_FLEET_SIZES=1000,5000 BENCH_FLEET_MEASURE_SECONDS=30).
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
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
import { createPostgresDatabase } from '../control-plane/src/testing/database.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const READY = 'BENCH_READY ';
const HEARTBEAT_MS = 10_000;

export interface ControlPlaneChild {
  url: string;
  joinToken: string;
  process: ChildProcess;
}

/** Starts bench/servers/fleet-control-plane.ts and waits for its ready line. */
export async function startFleetControlPlane(env: Record<string, string> = {}): Promise<ControlPlaneChild> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(HERE, 'servers', 'fleet-control-plane.ts')],
    {
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
      env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    },
  );
  const lines = createInterface({ input: child.stdout! });
  const info = await new Promise<{ url: string; joinToken: string }>((resolve, reject) => {
    lines.on('line', (line) => {
      if (line.startsWith(READY)) resolve(JSON.parse(line.slice(READY.length)));
      // Errors only: every simulated host's hello logs a loud "simulated GPUs" warning by design.
      else if (!/^\{"level":[1-4]\d,/.test(line)) process.stdout.write(`[control plane] ${line}\n`);
    });
    child.once('exit', (code) =>
      reject(new Error(`the control plane exited with ${code} before it was ready`)),
    );
  });
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
      utilizationPercent: null,
      memoryUtilizationPercent: null,
      memoryUsedBytes: null,
      memoryTotalBytes: null,
      temperatureC: null,
      powerWatts: null,
      smClockMhz: null,
      memoryClockMhz: null,
      processes: [],
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

/** One simulated host after hello: answers desired_state, heartbeats and sends metrics every 10 s. */
class SimHost {
  #timer: NodeJS.Timeout | null = null;
  #seq = 0;
  readonly #sent = new Map<string, number>();

  constructor(
    readonly ws: WebSocket,
    readonly index: number,
    readonly rtts: number[],
  ) {
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
    ws.on('error', () => {});
  }

  start(): void {
    // Spread the hosts over the interval, as real agents started at different times are.
    const tick = () => {
      if (this.ws.readyState !== WebSocket.OPEN) return;
      const heartbeat = createMessage('heartbeat', {
        seq: this.#seq++,
        sentAt: Date.now(),
        uptimeSeconds: 1,
      });
      this.#sent.set(heartbeat.id, performance.now());
      send(this.ws, heartbeat);
      send(this.ws, createMessage('metric_batch', { samples: [sample(this.index)], dropped: 0 }));
    };
    this.#timer = setTimeout(() => {
      tick();
      this.#timer = setInterval(tick, HEARTBEAT_MS);
    }, Math.random() * HEARTBEAT_MS);
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.ws.terminate();
  }
}

/** Like a real agent, a host whose hello was refused for now (the control plane busy) redials. */
async function hello(url: string, credential: Credential, i: number, rtts: number[]): Promise<SimHost> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await helloOnce(url, credential, i, rtts);
    } catch (error) {
      if (attempt >= 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 1_000 * attempt));
    }
  }
}

async function helloOnce(url: string, credential: Credential, i: number, rtts: number[]): Promise<SimHost> {
  const ws = await open(url);
  const welcome = next(ws, 'welcome');
  send(ws, createMessage('hello', { agentVersion: 'fleet-sim', ...credential, inventory: inventory(i) }));
  try {
    await welcome;
  } catch (error) {
    ws.terminate();
    throw error;
  }
  // Heartbeats start at once, as a real agent's do: a host silent through a long connection burst
  // would be closed for missing heartbeats.
  const host = new SimHost(ws, i, rtts);
  host.start();
  return host;
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

export async function runFleetSimBench(
  sizes = (process.env['BENCH_FLEET_SIZES'] ?? '1000,5000').split(',').map(Number),
  measureSeconds = Number(process.env['BENCH_FLEET_MEASURE_SECONDS'] ?? '30'),
): Promise<FleetRound[]> {
  const [one, five] = loadavg();
  process.stdout.write(
    `fleet-sim: ${sizes.join(' and ')} simulated hosts, heartbeat + metric batch every ${HEARTBEAT_MS / 1000} s, ` +
      `${measureSeconds} s measured after one settling interval; database ${benchDatabaseKind()}; ` +
      `node ${process.version}, ${availableParallelism()} CPUs, load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  const database = await benchDatabase();
  const cp = await startFleetControlPlane(database.env);
  const rounds: FleetRound[] = [];
  try {
    const url = `${cp.url.replace(/^http/, 'ws')}${AGENT_CONNECT_PATH}`;
    const most = Math.max(...sizes);
    const registerStart = performance.now();
    const credentials = await pool(most, 8, (i) => register(url, cp.joinToken, i));
    process.stdout.write(
      `  registered ${most} hosts in ${((performance.now() - registerStart) / 1000).toFixed(1)} s\n`,
    );
    for (const size of sizes) {
      const rtts: number[] = [];
      const connectStart = performance.now();
      const hosts = await pool(size, 64, (i) => hello(url, credentials[i]!, i, rtts));
      const connectSeconds = (performance.now() - connectStart) / 1000;
      // One full interval so every host has sent once and the connection burst has drained.
      await new Promise((resolve) => setTimeout(resolve, HEARTBEAT_MS + 2_000));
      rtts.length = 0;
      const before = await controlPlaneUsage(cp);
      const t0 = performance.now();
      await new Promise((resolve) => setTimeout(resolve, measureSeconds * 1000));
      const after = await controlPlaneUsage(cp);
      const wallMicros = (performance.now() - t0) * 1000;
      const alive = hosts.filter((h) => h.ws.readyState === WebSocket.OPEN).length;
      const sorted = [...rtts].sort((a, b) => a - b);
      const round: FleetRound = {
        hosts: size,
        connectSeconds,
        cpuPercent: ((after.cpuMicros - before.cpuMicros) / wallMicros) * 100,
        rssMiB: after.rss / 1024 / 1024,
        heartbeats: sorted.length,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        max: sorted.at(-1) ?? Number.NaN,
      };
      rounds.push(round);
      process.stdout.write(
        `  N=${String(size).padStart(5)}  hello burst ${connectSeconds.toFixed(1)} s   control plane CPU ` +
          `${round.cpuPercent.toFixed(1)} % of a core   RSS ${round.rssMiB.toFixed(0)} MiB   heartbeat RTT ` +
          `p50 ${round.p50.toFixed(1)} ms  p99 ${round.p99.toFixed(1)} ms  max ${round.max.toFixed(1)} ms ` +
          `(${round.heartbeats} heartbeats; ${alive} of ${size} hosts still connected; target at 5000: p99 < 100 ms)\n`,
      );
      for (const host of hosts) host.stop();
      // Let the control plane record the disconnects before the next round.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
    }
  } finally {
    await stopFleetControlPlane(cp);
    await database.drop();
  }
  return rounds;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runFleetSimBench();
}
