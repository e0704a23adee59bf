// HTTPS port proxy against nginx, in the same run: one load tool (wrk, or autocannon where wrk is not
// installed; the first line says which) drives GET of a 1 KiB file (req/s) and of a 1 MiB file (MB/s)
// through each target in alternating rounds:
// - direct: the container's port on the Docker bridge (plain HTTP, the load tool's and network's ceiling);
// - nginx (Debian's package, bench/nginx.ts): TLS-terminating reverse proxy with upstream keep-alive to the
//   same container backend, the peer the proxy is measured against;
// - tunnel: Anvil's production path, the control plane's proxy (TLS, Anvil key) through a real agent in
//   its own process (raw upgraded tunnel socket to the control plane, TCP to the container);
// - bridge: the same control plane code with the DockerBridgeTunnels test double (net.connect to the
//   container), the proxy alone without the agent hop;
// - ceiling: a bare node:https server (bench/servers/https-ceiling.ts) with the proxy's certificate and
//   TLS settings serving the bodies from memory: what any Node.js TLS endpoint reaches here.
// The container runs bench/fixtures/static-http (keep-alive, epoll, bodies in memory). Each row prints
// the CPU time its server side spent per request (control plane and agent apart on the tunnel path), and
// the tunnel and bridge rows their ratio to nginx. Last, the API's p99 for `GET /v2/auth/verify` at a
// fixed 1,000 req/s (autocannon, 10 connections) on the tunnel control plane, idle and while the load
// tool saturates its proxy, and the ratio. wrk is preferred: autocannon's own response handling tops out
// near 30 MB/s on 1 MiB bodies, below what every target here serves. Figures are printed, never asserted.
// Run: `npm run bench` (all benches) or `node --import tsx bench/proxy.ts`; prerequisites (Debian
// packages): docker.io, nginx, and wrk (else autocannon is used).
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { CONTROL_PLANE_NODE_FLAGS } from '@anvil/control-plane';
import autocannon from 'autocannon';
import { startNginx } from './nginx.ts';
import { installed, missingPrerequisites } from './prerequisites.ts';

const run = promisify(execFile);
const HERE = dirname(fileURLToPath(import.meta.url));
const READY = 'BENCH_READY ';

export interface ProxyBenchOptions {
  /** wrk threads: one leaves the other core(s) to the servers on a small machine. */
  threads: number;
  connections: number;
  /** Seconds per target per round. */
  seconds: number;
  rounds: number;
  /** nginx worker_processes (1: as many threads as the control plane's proxy). */
  nginxWorkers: number;
  /** Seconds of each API latency measurement (idle, then under proxy load); 0 skips it. */
  apiSeconds: number;
  /** Targets besides direct and tunnel (which always run): nginx, bridge, ceiling. */
  targets: string[];
}

const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const DEFAULTS: ProxyBenchOptions = {
  threads: env('ANVIL_BENCH_PROXY_THREADS', 1),
  connections: env('ANVIL_BENCH_PROXY_CONNECTIONS', 32),
  seconds: env('ANVIL_BENCH_PROXY_SECONDS', 5),
  rounds: env('ANVIL_BENCH_PROXY_ROUNDS', 2),
  nginxWorkers: env('ANVIL_BENCH_NGINX_WORKERS', 1),
  apiSeconds: env('ANVIL_BENCH_PROXY_API_SECONDS', 10),
  // ANVIL_BENCH_PROXY_TARGETS=nginx (say) for a shorter run, as when profiling the tunnel path.
  targets: (process.env['ANVIL_BENCH_PROXY_TARGETS'] ?? 'nginx,bridge,ceiling').split(','),
};
/** The API measurement: a fixed offered rate, as users load it, not saturation. */
const API_RATE = 1_000;
const API_CONNECTIONS = 10;

interface Info {
  proxy: string;
  api: string;
  host: string;
  direct: string;
  key: string;
  tunnels: 'bridge' | 'agent';
  agentPid: number | null;
  /** PEM files of the certificate the proxy serves (the ceiling server and nginx serve the same). */
  tls: { cert: string; key: string };
}

/** A server process started by the bench: its READY line's JSON and the process (CPU over IPC). */
async function spawnServer<T>(
  script: string,
  ready: string,
  env: Record<string, string>,
  flags: string[] = [],
): Promise<{ info: T; child: ChildProcess }> {
  const argv = [...CONTROL_PLANE_NODE_FLAGS, ...flags, '--import', 'tsx', join(HERE, 'servers', script)];
  const child = spawn(process.execPath, argv, {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
  });
  const lines = createInterface({ input: child.stdout! });
  const info = await new Promise<T>((resolve, reject) => {
    lines.on('line', (line) => {
      if (line.startsWith(ready)) resolve(JSON.parse(line.slice(ready.length)) as T);
      else process.stdout.write(`[${script}] ${line}\n`);
    });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code} before it was ready`)));
  });
  return { info, child };
}

async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}

function startProxyServer(tunnels: 'agent' | 'bridge'): Promise<{ info: Info; child: ChildProcess }> {
  // ANVIL_BENCH_PROXY_PROFILE=<dir>: the control plane (and the agent) write V8 CPU profiles there on exit.
  const profile = process.env['ANVIL_BENCH_PROXY_PROFILE'];
  return spawnServer<Info>(
    'proxy.ts',
    READY,
    { ANVIL_BENCH_PROXY_TUNNELS: tunnels },
    profile ? ['--cpu-prof', '--cpu-prof-dir', profile] : [],
  );
}

/** Prints one JSON line when wrk is done: what figures() needs, in wrk's own units (µs, bytes). */
const WRK_REPORT = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"bytes":%d,"duration_us":%d,"errors":%d,"non2xx":%d,"p99_us":%d}\\n',
    summary.requests, summary.bytes, summary.duration, e.connect + e.read + e.write + e.timeout,
    e.status, latency:percentile(99)))
end
`;

interface LoadResult {
  requests: number;
  bytes: number;
  duration_us: number;
  errors: number;
  non2xx: number;
  p99_us: number;
}

type Tool = 'wrk' | 'autocannon';

/** One run of the load tool; the Host header names the mapping (TLS goes to the address). */
async function drive(
  tool: Tool,
  url: string,
  headers: Record<string, string>,
  options: Pick<ProxyBenchOptions, 'threads' | 'connections' | 'seconds'>,
  script: string,
): Promise<LoadResult> {
  if (tool === 'autocannon') {
    const result = await autocannon({
      url,
      headers,
      connections: options.connections,
      duration: options.seconds,
    });
    return {
      requests: result.requests.total,
      bytes: result.throughput.total,
      duration_us: result.duration * 1e6,
      errors: result.errors + result.timeouts,
      non2xx: result.non2xx,
      p99_us: result.latency.p99 * 1000,
    };
  }
  const args = ['-t', String(options.threads), '-c', String(options.connections)];
  args.push('-d', `${options.seconds}s`, '--timeout', '30s', '-s', script);
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  const { stdout } = await run('wrk', [...args, url], { maxBuffer: 1024 * 1024 });
  const line = stdout.split('\n').find((l) => l.startsWith('WRK_JSON '));
  if (!line) throw new Error(`wrk printed no summary:\n${stdout}`);
  return JSON.parse(line.slice('WRK_JSON '.length)) as LoadResult;
}

/** CPU time (µs, user + system) of processes read from /proc: nginx's workers, the agent. */
function procCpuUs(pids: number[]): number {
  const tick = 1e6 / 100;
  let total = 0;
  for (const pid of pids) {
    try {
      // Fields after the command's closing parenthesis: state is 3rd, utime 14th, stime 15th.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(fields[11]) + Number(fields[12])) * tick;
    } catch {
      // Gone: counts nothing.
    }
  }
  return total;
}

function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

function ipcCpuUs(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (usage: NodeJS.CpuUsage) => resolve(usage.user + usage.system));
    child.send('cpu');
  });
}

/** The server side of a row: CPU meters (µs so far) under a name each; none for direct rows. */
type Meters = Record<string, () => Promise<number>>;

interface Figures {
  rps: number;
  mbps: number;
  p99: number;
  errors: number;
  non2xx: number;
  /** CPU per request (µs) of each meter of the row. */
  cpu: Record<string, number>;
}

function figures(results: LoadResult[], cpuUs: Record<string, number>): Figures {
  const seconds = results.reduce((s, r) => s + r.duration_us, 0) / 1e6;
  const requests = results.reduce((s, r) => s + r.requests, 0);
  return {
    rps: requests / seconds,
    mbps: results.reduce((s, r) => s + r.bytes, 0) / seconds / 1e6,
    p99: Math.max(...results.map((r) => r.p99_us)) / 1000,
    errors: results.reduce((s, r) => s + r.errors, 0),
    non2xx: results.reduce((s, r) => s + r.non2xx, 0),
    cpu: Object.fromEntries(Object.entries(cpuUs).map(([name, us]) => [name, us / Math.max(1, requests)])),
  };
}

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d });

/** p99 (ms) of GET /v2/auth/verify at a fixed rate, with the error count. */
async function apiP99(api: string, key: string, seconds: number) {
  const result = await autocannon({
    url: `${api}/v2/auth/verify`,
    headers: { authorization: `Bearer ${key}` },
    connections: API_CONNECTIONS,
    overallRate: API_RATE,
    duration: seconds,
  });
  return {
    p99: result.latency.p99,
    rps: result.requests.total / result.duration,
    bad: result.errors + result.timeouts + result.non2xx,
  };
}

export async function runProxyBench(options: ProxyBenchOptions = DEFAULTS) {
  const missing = missingPrerequisites('proxy', {
    docker: true,
    programs: options.targets.includes('nginx') ? [{ command: 'nginx', debianPackage: 'nginx' }] : [],
  });
  if (missing) {
    process.stdout.write(missing);
    return null;
  }
  const tool: Tool = installed('wrk') ? 'wrk' : 'autocannon';
  const [one, five] = loadavg();
  process.stdout.write(
    `proxy: ${tool === 'wrk' ? `wrk ${options.threads} thread(s)` : 'autocannon (wrk missing: apt-get install wrk; autocannon caps MB/s on 1 MiB bodies)'}, ` +
      `${options.connections} keep-alive connections, ${options.rounds} alternating rounds of ` +
      `${options.seconds} s per target; nginx ${options.nginxWorkers} worker(s); node ${process.version}, ` +
      `${availableParallelism()} CPUs, load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), 'anvil-bench-wrk-'));
  const script = join(dir, 'report.lua');
  writeFileSync(script, WRK_REPORT);
  const stops: (() => Promise<void>)[] = [];
  try {
    const tunnel = await startProxyServer('agent');
    stops.push(() => stopServer(tunnel.child));
    const tls = tunnel.info.tls;
    const through = (info: Info) => ({ Host: info.host, Authorization: `Bearer ${info.key}` });
    const agentPid = tunnel.info.agentPid!;
    const bases: [string, string, Record<string, string>, Meters][] = [
      ['direct', tunnel.info.direct, {}, {}],
    ];
    if (options.targets.includes('nginx')) {
      const nginx = await startNginx({
        cert: tls.cert,
        key: tls.key,
        upstream: new URL(tunnel.info.direct).host,
        workers: options.nginxWorkers,
      });
      stops.push(() => nginx.stop());
      const pid = nginx.child.pid!;
      bases.push(['nginx', nginx.url, {}, { nginx: async () => procCpuUs([pid, ...childPids(pid)]) }]);
    }
    bases.push([
      'tunnel',
      tunnel.info.proxy,
      through(tunnel.info),
      { 'control plane': () => ipcCpuUs(tunnel.child), agent: async () => procCpuUs([agentPid]) },
    ]);
    if (options.targets.includes('bridge')) {
      const bridge = await startProxyServer('bridge');
      stops.push(() => stopServer(bridge.child));
      bases.push([
        'bridge',
        bridge.info.proxy,
        through(bridge.info),
        { 'control plane': () => ipcCpuUs(bridge.child) },
      ]);
    }
    if (options.targets.includes('ceiling')) {
      const ceiling = await spawnServer<{ url: string }>('https-ceiling.ts', 'CEILING_READY ', {
        ANVIL_BENCH_CEILING_CERT: tls.cert,
        ANVIL_BENCH_CEILING_KEY: tls.key,
      });
      stops.push(() => stopServer(ceiling.child));
      bases.push(['ceiling', ceiling.info.url, {}, { server: () => ipcCpuUs(ceiling.child) }]);
    }
    const rows: { name: string; url: string; headers: Record<string, string>; meters: Meters }[] = [];
    for (const [size, file] of [
      ['1 KiB', 'small.bin'],
      ['1 MiB', 'large.bin'],
    ] as const) {
      for (const [name, base, headers, meters] of bases) {
        rows.push({ name: `${name} ${size}`, url: `${base}/${file}`, headers, meters });
      }
    }
    // Warm-up: tunnels, caches, JIT.
    for (const row of rows) await drive(tool, row.url, row.headers, { ...options, seconds: 2 }, script);
    const results = new Map<string, LoadResult[]>(rows.map((r) => [r.name, []]));
    const cpu = new Map<string, Record<string, number>>(rows.map((r) => [r.name, {}]));
    for (let round = 0; round < options.rounds; round++) {
      for (const row of rows) {
        const names = Object.keys(row.meters);
        const before = await Promise.all(names.map((n) => row.meters[n]!()));
        results.get(row.name)!.push(await drive(tool, row.url, row.headers, options, script));
        const after = await Promise.all(names.map((n) => row.meters[n]!()));
        const used = cpu.get(row.name)!;
        names.forEach((n, i) => {
          used[n] = (used[n] ?? 0) + after[i]! - before[i]!;
        });
      }
    }
    const out = new Map(rows.map((r) => [r.name, figures(results.get(r.name)!, cpu.get(r.name)!)]));
    const nginxOf = (name: string) => out.get(`nginx ${name.slice(name.indexOf(' ') + 1)}`);
    for (const [name, f] of out) {
      const cpuText = Object.entries(f.cpu)
        .map(([who, us]) => `${who} ${fmt(us, 1)}`)
        .join(' + ');
      const n = nginxOf(name);
      const vsNginx =
        n && (name.startsWith('tunnel') || name.startsWith('bridge'))
          ? `  vs nginx: req/s ${(f.rps / n.rps).toFixed(2)}, MB/s ${(f.mbps / n.mbps).toFixed(2)}`
          : '';
      process.stdout.write(
        `${name.padEnd(13)}  ${fmt(f.rps).padStart(7)} req/s  ${fmt(f.mbps, 1).padStart(7)} MB/s  ` +
          `p99 ${fmt(f.p99, 1).padStart(5)} ms  errors ${f.errors}  non-2xx ${f.non2xx}` +
          (cpuText ? `  CPU µs/request: ${cpuText}` : '') +
          vsNginx +
          '\n',
      );
    }
    const ratio = (a: string, by: 'rps' | 'mbps') => {
      const row = out.get(a);
      const peer = out.get(`nginx ${a.slice(a.indexOf(' ') + 1)}`);
      return row && peer ? row[by] / peer[by] : Number.NaN;
    };
    const rps = ratio('tunnel 1 KiB', 'rps');
    const mbps = ratio('tunnel 1 MiB', 'mbps');
    const pair = (name: string) =>
      `${ratio(`${name} 1 KiB`, 'rps').toFixed(2)} req/s, ${ratio(`${name} 1 MiB`, 'mbps').toFixed(2)} MB/s`;
    process.stdout.write(
      `ratio tunnel/nginx: req/s on 1 KiB ${rps.toFixed(2)} (target >= 0.5: ${rps >= 0.5 ? 'met' : 'missed'}), ` +
        `MB/s on 1 MiB ${mbps.toFixed(2)} (target >= 0.8: ${mbps >= 0.8 ? 'met' : 'missed'}); ` +
        `bridge/nginx: ${pair('bridge')}; ceiling/nginx: ${pair('ceiling')}\n`,
    );
    let api: { idle: number; loaded: number } | null = null;
    if (options.apiSeconds > 0) {
      const { api: apiUrl, key } = tunnel.info;
      await apiP99(apiUrl, key, 2);
      const idle = await apiP99(apiUrl, key, options.apiSeconds);
      // The proxy saturated for the whole measurement: the load starts first and outlasts it.
      const load = drive(
        tool,
        `${tunnel.info.proxy}/small.bin`,
        through(tunnel.info),
        { ...options, seconds: options.apiSeconds + 3 },
        script,
      );
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const loaded = await apiP99(apiUrl, key, options.apiSeconds);
      const proxied = await load;
      const r = loaded.p99 / idle.p99;
      process.stdout.write(
        `api GET /v2/auth/verify at ${fmt(API_RATE)} req/s (${API_CONNECTIONS} connections): idle p99 ` +
          `${fmt(idle.p99, 1)} ms (${fmt(idle.rps)} req/s, ${idle.bad} failed); proxy saturated ` +
          `(${fmt(proxied.requests / (proxied.duration_us / 1e6))} req/s of 1 KiB through the tunnel) p99 ` +
          `${fmt(loaded.p99, 1)} ms (${fmt(loaded.rps)} req/s, ${loaded.bad} failed); ratio ${r.toFixed(2)} ` +
          `(target <= 2: ${r <= 2 ? 'met' : 'missed'})\n`,
      );
      api = { idle: idle.p99, loaded: loaded.p99 };
    }
    const [after] = loadavg();
    process.stdout.write(`proxy: load average after ${after?.toFixed(1)}\n`);
    return { rps, mbps, api, figures: out };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    for (const stop of stops.reverse()) await stop().catch(() => {});
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runProxyBench();
}
