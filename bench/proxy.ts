// HTTPS port proxy against direct access to the container's port, in the same run: autocannon drives
// GET of a 1 KiB file (req/s) and of a 1 MiB file (MB/s) at the container's address on the Docker
// bridge and through the proxy (TLS, Anvil key, tunnel to the container), in alternating rounds. The
// control plane runs in its own process. busybox httpd closes every connection, so both paths open a
// container connection per request. Figures are printed, never asserted on.
// Run: `npm run bench` (all benches) or `node --import tsx bench/proxy.ts`.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import autocannon, { type Result } from 'autocannon';

const HERE = dirname(fileURLToPath(import.meta.url));
const READY = 'BENCH_READY ';

export interface ProxyBenchOptions {
  connections: number;
  /** Seconds per target per round. */
  seconds: number;
  rounds: number;
}

const DEFAULTS: ProxyBenchOptions = { connections: 32, seconds: 5, rounds: 2 };

interface Info {
  proxy: string;
  host: string;
  direct: string;
  key: string;
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

function drive(
  url: string,
  headers: Record<string, string>,
  options: ProxyBenchOptions,
  servername?: string,
) {
  return autocannon({
    url,
    connections: options.connections,
    duration: options.seconds,
    headers,
    ...(servername ? { servername } : {}),
  } as Parameters<typeof autocannon>[0]) as Promise<Result>;
}

interface Figures {
  rps: number;
  mbps: number;
  p99: number;
  errors: number;
  non2xx: number;
}

function figures(results: Result[]): Figures {
  const n = results.length;
  return {
    rps: results.reduce((s, r) => s + r.requests.average, 0) / n,
    mbps:
      results.reduce(
        (s, r) => s + (r as unknown as { throughput: { average: number } }).throughput.average,
        0,
      ) /
      n /
      1e6,
    p99: Math.max(...results.map((r) => r.latency.p99)),
    errors: results.reduce((s, r) => s + r.errors + r.timeouts, 0),
    non2xx: results.reduce((s, r) => s + r.non2xx, 0),
  };
}

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d });

export async function runProxyBench(options: ProxyBenchOptions = DEFAULTS) {
  const [one, five] = loadavg();
  process.stdout.write(
    `proxy: ${options.connections} connections, ${options.rounds} alternating rounds of ${options.seconds} s per ` +
      `target; node ${process.version}, ${availableParallelism()} CPUs, load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  // The development CA is not in Node's store: the load generator skips verification (curl tests verify it).
  process.env['NODE_TLS_REJECT_UNAUTHORIZED'] = '0';
  const { info, child } = await startServer();
  try {
    const viaProxy = { host: info.host, authorization: `Bearer ${info.key}` };
    const rows: [string, string, Record<string, string>, string | undefined][] = [
      ['direct 1 KiB', `${info.direct}/small.bin`, {}, undefined],
      ['proxy  1 KiB', `${info.proxy}/small.bin`, viaProxy, info.host],
      ['direct 1 MiB', `${info.direct}/large.bin`, {}, undefined],
      ['proxy  1 MiB', `${info.proxy}/large.bin`, viaProxy, info.host],
    ];
    // Warm-up: tunnels, caches, JIT.
    await drive(rows[1]![1], rows[1]![2], { ...options, seconds: 2 }, rows[1]![3]);
    const results = new Map<string, Result[]>(rows.map(([name]) => [name, []]));
    for (let round = 0; round < options.rounds; round++) {
      for (const [name, url, headers, servername] of rows) {
        results.get(name)!.push(await drive(url, headers, options, servername));
      }
    }
    const out = new Map([...results].map(([name, r]) => [name, figures(r)]));
    for (const [name, f] of out) {
      process.stdout.write(
        `${name}  ${fmt(f.rps).padStart(7)} req/s  ${fmt(f.mbps, 1).padStart(7)} MB/s  p99 ${fmt(f.p99, 1)} ms  ` +
          `errors ${f.errors}  non-2xx ${f.non2xx}\n`,
      );
    }
    const rps = out.get('proxy  1 KiB')!.rps / out.get('direct 1 KiB')!.rps;
    const mbps = out.get('proxy  1 MiB')!.mbps / out.get('direct 1 MiB')!.mbps;
    process.stdout.write(
      `ratio proxy/direct: req/s ${rps.toFixed(2)} (target >= 0.6: ${rps >= 0.6 ? 'met' : 'missed'}), ` +
        `MB/s ${mbps.toFixed(2)} (target >= 0.8: ${mbps >= 0.8 ? 'met' : 'missed'})\n`,
    );
    return { rps, mbps, figures: out };
  } finally {
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
