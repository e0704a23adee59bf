// HTTPS port proxy against direct access to the container's port, in the same run: wrk drives GET of a
// 1 KiB file (req/s) and of a 1 MiB file (MB/s) at the container's address on the Docker bridge and
// through the proxy (TLS, Anvil key, tunnel to the container), in alternating rounds. The control plane
// runs in its own process; the container runs bench/fixtures/static-http (keep-alive, epoll, bodies in
// memory), so the direct figures are the load generator's and the network's ceiling rather than a slow
// server's, and the ratios measure what the proxy costs. wrk (Debian: apt-get install wrk) rather than
// autocannon: autocannon's own response handling tops out near 30 MB/s on 1 MiB bodies, below what a
// container port serves. The server process's CPU time per request is printed beside each proxy row.
// A "ceiling" row per body size is a bare node:https server (bench/servers/https-ceiling.ts, its own
// process, the proxy's certificate and TLS settings) serving the same bodies from memory: what any Node.js
// TLS endpoint reaches on this machine against the plain-HTTP C server, the bound the proxy works under.
// Figures are printed, never asserted on.
// Run: `npm run bench` (all benches) or `node --import tsx bench/proxy.ts`.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { CONTROL_PLANE_NODE_FLAGS } from '@anvil/control-plane';
import { missingPrerequisites } from './prerequisites.ts';

const run = promisify(execFile);
const HERE = dirname(fileURLToPath(import.meta.url));
const READY = 'BENCH_READY ';

export interface ProxyBenchOptions {
  /** wrk threads: one leaves the other core(s) to the control plane on a small machine. */
  threads: number;
  connections: number;
  /** Seconds per target per round. */
  seconds: number;
  rounds: number;
}

const DEFAULTS: ProxyBenchOptions = {
  threads: Number(process.env['ANVIL_BENCH_PROXY_THREADS'] ?? 1),
  connections: Number(process.env['ANVIL_BENCH_PROXY_CONNECTIONS'] ?? 32),
  seconds: Number(process.env['ANVIL_BENCH_PROXY_SECONDS'] ?? 5),
  rounds: Number(process.env['ANVIL_BENCH_PROXY_ROUNDS'] ?? 2),
};

interface Info {
  proxy: string;
  host: string;
  direct: string;
  key: string;
  tunnels: 'bridge' | 'agent';
  /** PEM files of the certificate the proxy serves (the ceiling server serves the same). */
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

function startServer(): Promise<{ info: Info; child: ChildProcess }> {
  // ANVIL_BENCH_PROXY_PROFILE=<dir>: the proxy's process writes a V8 CPU profile there when it exits.
  const profile = process.env['ANVIL_BENCH_PROXY_PROFILE'];
  return spawnServer<Info>('proxy.ts', READY, {}, profile ? ['--cpu-prof', '--cpu-prof-dir', profile] : []);
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

interface WrkResult {
  requests: number;
  bytes: number;
  duration_us: number;
  errors: number;
  non2xx: number;
  p99_us: number;
}

/** One wrk run; the Host header names the mapping (TLS goes to the address, as a resolver would send it). */
async function drive(
  url: string,
  headers: Record<string, string>,
  options: ProxyBenchOptions,
  script: string,
): Promise<WrkResult> {
  const args = [
    '-t',
    String(options.threads),
    '-c',
    String(options.connections),
    '-d',
    `${options.seconds}s`,
  ];
  args.push('--timeout', '30s', '-s', script);
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  const { stdout } = await run('wrk', [...args, url], { maxBuffer: 1024 * 1024 });
  const line = stdout.split('\n').find((l) => l.startsWith('WRK_JSON '));
  if (!line) throw new Error(`wrk printed no summary:\n${stdout}`);
  return JSON.parse(line.slice('WRK_JSON '.length)) as WrkResult;
}

interface Figures {
  rps: number;
  mbps: number;
  p99: number;
  errors: number;
  non2xx: number;
  /** Server process CPU (user + system) per request, µs; null for direct rows. */
  cpuUs: number | null;
}

function figures(results: WrkResult[], cpuUs: number[]): Figures {
  const seconds = results.reduce((s, r) => s + r.duration_us, 0) / 1e6;
  const requests = results.reduce((s, r) => s + r.requests, 0);
  return {
    rps: requests / seconds,
    mbps: results.reduce((s, r) => s + r.bytes, 0) / seconds / 1e6,
    p99: Math.max(...results.map((r) => r.p99_us)) / 1000,
    errors: results.reduce((s, r) => s + r.errors, 0),
    non2xx: results.reduce((s, r) => s + r.non2xx, 0),
    cpuUs: cpuUs.length > 0 ? cpuUs.reduce((s, c) => s + c, 0) / requests : null,
  };
}

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d });

function serverCpu(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (usage: NodeJS.CpuUsage) => resolve(usage.user + usage.system));
    child.send('cpu');
  });
}

export async function runProxyBench(options: ProxyBenchOptions = DEFAULTS) {
  const missing = missingPrerequisites('proxy', {
    docker: true,
    programs: [{ command: 'wrk', debianPackage: 'wrk' }],
  });
  if (missing) {
    process.stdout.write(missing);
    return null;
  }
  const [one, five] = loadavg();
  process.stdout.write(
    `proxy: wrk ${options.threads} thread(s), ${options.connections} keep-alive connections, ${options.rounds} ` +
      `alternating rounds of ${options.seconds} s per target; node ${process.version}, ` +
      `${availableParallelism()} CPUs, load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), 'anvil-bench-wrk-'));
  const script = join(dir, 'report.lua');
  writeFileSync(script, WRK_REPORT);
  const { info, child } = await startServer();
  const ceiling = await spawnServer<{ url: string }>('https-ceiling.ts', 'CEILING_READY ', {
    ANVIL_BENCH_CEILING_CERT: info.tls.cert,
    ANVIL_BENCH_CEILING_KEY: info.tls.key,
  }).catch(async (error: unknown) => {
    await stopServer(child);
    throw error;
  });
  process.stdout.write(
    info.tunnels === 'agent'
      ? 'proxy: tunnels through a real agent process (ANVIL_BENCH_PROXY_TUNNELS=agent); the CPU column is the control plane only\n'
      : 'proxy: tunnels by the DockerBridgeTunnels test double (the proxy alone; ANVIL_BENCH_PROXY_TUNNELS=agent adds the agent hop)\n',
  );
  try {
    const viaProxy = { Host: info.host, Authorization: `Bearer ${info.key}` };
    // [row, url, headers, the process whose CPU is measured (null: not ours)]
    const rows: [string, string, Record<string, string>, ChildProcess | null][] = [
      ['direct 1 KiB', `${info.direct}/small.bin`, {}, null],
      ['proxy 1 KiB', `${info.proxy}/small.bin`, viaProxy, child],
      ['ceiling 1 KiB', `${ceiling.info.url}/small.bin`, {}, ceiling.child],
      ['direct 1 MiB', `${info.direct}/large.bin`, {}, null],
      ['proxy 1 MiB', `${info.proxy}/large.bin`, viaProxy, child],
      ['ceiling 1 MiB', `${ceiling.info.url}/large.bin`, {}, ceiling.child],
    ];
    // Warm-up: tunnels, caches, JIT.
    for (const [, url, headers, owner] of rows) {
      if (owner) await drive(url, headers, { ...options, seconds: 2 }, script);
    }
    const results = new Map<string, WrkResult[]>(rows.map(([name]) => [name, []]));
    const cpu = new Map<string, number[]>(rows.map(([name]) => [name, []]));
    for (let round = 0; round < options.rounds; round++) {
      for (const [name, url, headers, owner] of rows) {
        const before = owner ? await serverCpu(owner) : 0;
        results.get(name)!.push(await drive(url, headers, options, script));
        if (owner) cpu.get(name)!.push((await serverCpu(owner)) - before);
      }
    }
    const out = new Map([...results].map(([name, r]) => [name, figures(r, cpu.get(name)!)]));
    for (const [name, f] of out) {
      process.stdout.write(
        `${name.padEnd(13)}  ${fmt(f.rps).padStart(7)} req/s  ${fmt(f.mbps, 1).padStart(7)} MB/s  ` +
          `p99 ${fmt(f.p99, 1)} ms  errors ${f.errors}  non-2xx ${f.non2xx}` +
          (f.cpuUs === null
            ? ''
            : `  ${name.startsWith('proxy') ? 'control-plane' : 'server'} CPU ${fmt(f.cpuUs, 1)} µs/request`) +
          '\n',
      );
    }
    const ratio = (a: string, b: string, by: 'rps' | 'mbps') => out.get(a)![by] / out.get(b)![by];
    const rps = ratio('proxy 1 KiB', 'direct 1 KiB', 'rps');
    const mbps = ratio('proxy 1 MiB', 'direct 1 MiB', 'mbps');
    const [after] = loadavg();
    process.stdout.write(
      `ratio proxy/direct: req/s ${rps.toFixed(2)} (target >= 0.6: ${rps >= 0.6 ? 'met' : 'missed'}), ` +
        `MB/s ${mbps.toFixed(2)} (target >= 0.8: ${mbps >= 0.8 ? 'met' : 'missed'}); ` +
        `load average after ${after?.toFixed(1)}\n` +
        `ratio proxy/ceiling: req/s ${ratio('proxy 1 KiB', 'ceiling 1 KiB', 'rps').toFixed(2)}, ` +
        `MB/s ${ratio('proxy 1 MiB', 'ceiling 1 MiB', 'mbps').toFixed(2)}; ` +
        `ceiling/direct: req/s ${ratio('ceiling 1 KiB', 'direct 1 KiB', 'rps').toFixed(2)}, ` +
        `MB/s ${ratio('ceiling 1 MiB', 'direct 1 MiB', 'mbps').toFixed(2)}\n`,
    );
    return { rps, mbps, figures: out };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await Promise.all([stopServer(ceiling.child), stopServer(child)]);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runProxyBench();
}
