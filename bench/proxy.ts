// HTTPS port proxy against direct access to the container's port, in the same run: wrk drives GET of a
// 1 KiB file (req/s) and of a 1 MiB file (MB/s) at the container's address on the Docker bridge and
// through the proxy (TLS, Anvil key, tunnel to the container), in alternating rounds. The control plane
// runs in its own process; the container runs bench/fixtures/static-http (keep-alive, epoll, bodies in
// memory), so the direct figures are the load generator's and the network's ceiling rather than a slow
// server's, and the ratios measure what the proxy costs. wrk (Debian: apt-get install wrk) rather than
// autocannon: autocannon's own response handling tops out near 30 MB/s on 1 MiB bodies, below what a
// container port serves. The server process's CPU time per request is printed beside each proxy row.
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
import { dockerAvailable } from '../test/fixtures/images/docker.ts';

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
}

async function startServer(): Promise<{ info: Info; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(HERE, 'servers', 'proxy.ts')], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    env: { ...process.env, LOG_LEVEL: 'warn' },
  });
  const lines = createInterface({ input: child.stdout! });
  const info = await new Promise<Info>((resolve, reject) => {
    lines.on('line', (line) => {
      if (line.startsWith(READY)) resolve(JSON.parse(line.slice(READY.length)) as Info);
      else process.stdout.write(`[proxy server] ${line}\n`);
    });
    child.once('exit', (code) => reject(new Error(`proxy server exited with ${code} before it was ready`)));
  });
  return { info, child };
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

async function wrkInstalled(): Promise<boolean> {
  try {
    await run('wrk', ['--version']);
    return true;
  } catch (error) {
    // wrk --version exits 1 after printing its version.
    return (error as { stdout?: string }).stdout?.startsWith('wrk') === true;
  }
}

function serverCpu(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (usage: NodeJS.CpuUsage) => resolve(usage.user + usage.system));
    child.send('cpu');
  });
}

export async function runProxyBench(options: ProxyBenchOptions = DEFAULTS) {
  if (!dockerAvailable()) {
    process.stdout.write('proxy: skipped (no Docker engine)\n');
    return null;
  }
  if (!(await wrkInstalled())) {
    process.stdout.write('proxy: skipped (wrk is not installed: apt-get install wrk)\n');
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
  process.stdout.write(
    info.tunnels === 'agent'
      ? 'proxy: tunnels through a real agent process (ANVIL_BENCH_PROXY_TUNNELS=agent); the CPU column is the control plane only\n'
      : 'proxy: tunnels by the DockerBridgeTunnels test double (the proxy alone; ANVIL_BENCH_PROXY_TUNNELS=agent adds the agent hop)\n',
  );
  try {
    const viaProxy = { Host: info.host, Authorization: `Bearer ${info.key}` };
    const rows: [string, string, Record<string, string>][] = [
      ['direct 1 KiB', `${info.direct}/small.bin`, {}],
      ['proxy  1 KiB', `${info.proxy}/small.bin`, viaProxy],
      ['direct 1 MiB', `${info.direct}/large.bin`, {}],
      ['proxy  1 MiB', `${info.proxy}/large.bin`, viaProxy],
    ];
    // Warm-up: tunnels, caches, JIT.
    await drive(rows[1]![1], rows[1]![2], { ...options, seconds: 2 }, script);
    await drive(rows[3]![1], rows[3]![2], { ...options, seconds: 2 }, script);
    const results = new Map<string, WrkResult[]>(rows.map(([name]) => [name, []]));
    const cpu = new Map<string, number[]>(rows.map(([name]) => [name, []]));
    for (let round = 0; round < options.rounds; round++) {
      for (const [name, url, headers] of rows) {
        const before = await serverCpu(child);
        results.get(name)!.push(await drive(url, headers, options, script));
        if (name.startsWith('proxy')) cpu.get(name)!.push((await serverCpu(child)) - before);
      }
    }
    const out = new Map([...results].map(([name, r]) => [name, figures(r, cpu.get(name)!)]));
    for (const [name, f] of out) {
      process.stdout.write(
        `${name}  ${fmt(f.rps).padStart(7)} req/s  ${fmt(f.mbps, 1).padStart(7)} MB/s  p99 ${fmt(f.p99, 1)} ms  ` +
          `errors ${f.errors}  non-2xx ${f.non2xx}` +
          (f.cpuUs === null ? '' : `  control-plane CPU ${fmt(f.cpuUs, 1)} µs/request`) +
          '\n',
      );
    }
    const rps = out.get('proxy  1 KiB')!.rps / out.get('direct 1 KiB')!.rps;
    const mbps = out.get('proxy  1 MiB')!.mbps / out.get('direct 1 MiB')!.mbps;
    const [after] = loadavg();
    process.stdout.write(
      `ratio proxy/direct: req/s ${rps.toFixed(2)} (target >= 0.6: ${rps >= 0.6 ? 'met' : 'missed'}), ` +
        `MB/s ${mbps.toFixed(2)} (target >= 0.8: ${mbps >= 0.8 ? 'met' : 'missed'}); ` +
        `load average after ${after?.toFixed(1)}\n`,
    );
    return { rps, mbps, figures: out };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    if (child.exitCode === null) {
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runProxyBench();
}
