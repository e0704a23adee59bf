// Authenticated GET /v2/auth/verify on the real control plane against a bare fastify hello route, both
// driven the same way by autocannon (10 connections) at fixed offered rates (autocannon's overallRate:
// 500, 1,000 and 2,000 req/s by default, what users feel) and at saturation, in alternating rounds. Each
// server runs in its own process so the load generator does not share its event loop; server CPU is the
// whole process's (background work included). Figures are printed, never asserted on.
// Run: `npm run bench` (all benches) or `node --import tsx bench/auth-verify.ts`;
// BENCH_AUTH_RATES=500,1000,2000,0 picks the offered rates (0: saturation), BENCH_AUTH_SECONDS the measured
// seconds per rate and target.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CONTROL_PLANE_NODE_FLAGS } from '@anvil/control-plane';
import autocannon, { type Result } from 'autocannon';
import type { ServerUsage } from './servers/usage-reply.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const CONNECTIONS = 10;
/** The line a server script prints once it listens: the prefix, then {url, path, keys} as JSON. */
const READY = 'BENCH_READY ';

export interface BenchOptions {
  /** Offered rates (req/s over all connections); 0 drives as fast as the server answers (saturation). */
  rates: number[];
  /** Measured seconds per rate and target, split over the rounds. */
  durationSeconds: number;
  warmupSeconds: number;
  rounds: number;
}

function ratesFromEnv(): number[] {
  const text = process.env['BENCH_AUTH_RATES'];
  if (!text) return [500, 1_000, 2_000, 0];
  return text.split(',').map((rate) => Number(rate.trim()));
}

const DEFAULTS: BenchOptions = {
  rates: ratesFromEnv(),
  durationSeconds: Number(process.env['BENCH_AUTH_SECONDS'] ?? '10'),
  warmupSeconds: 10,
  rounds: 2,
};

interface Target {
  url: string;
  path: string;
  keys: string[];
  process: ChildProcess;
}

async function startTarget(script: string): Promise<Target> {
  // BENCH_CPU_PROF=<dir> writes a V8 CPU profile of each server there (open it in Chrome DevTools).
  const profile = process.env['BENCH_CPU_PROF'];
  // Both servers run with the control plane's V8 flags (npm start's), so the baseline is tuned alike.
  const flags = [
    ...CONTROL_PLANE_NODE_FLAGS,
    ...(profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : []),
  ];
  if (process.env['BENCH_TRACE_GC']) flags.push('--trace-gc');
  const child = spawn(process.execPath, [...flags, '--import', 'tsx', join(HERE, 'servers', script)], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    env: { ...process.env, LOG_LEVEL: 'warn' },
  });
  // Keep reading the server's output to the end (a full pipe would stall it); echo all but the ready line.
  const lines = createInterface({ input: child.stdout! });
  const info = await new Promise<Omit<Target, 'process'>>((resolve, reject) => {
    lines.on('line', (line) => {
      if (line.startsWith(READY)) resolve(JSON.parse(line.slice(READY.length)) as Omit<Target, 'process'>);
      else process.stdout.write(`[${script}] ${line}\n`);
    });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code} before it was ready`)));
  });
  return { ...info, process: child };
}

/** The server's CPU time so far and its event-loop delay since the last ask, over its IPC channel. */
async function usageOf(target: Target): Promise<ServerUsage> {
  const reply = once(target.process, 'message') as Promise<[ServerUsage]>;
  target.process.send('cpu');
  const [usage] = await reply;
  return usage;
}

async function stopTarget(target: Target): Promise<void> {
  if (target.process.exitCode !== null) return;
  const exited = once(target.process, 'exit');
  target.process.kill('SIGTERM');
  await exited;
}

interface Round {
  result: Result;
  /** Server CPU time per answered request, µs. */
  cpuPerRequest: number;
  /** How late the server's event loop ran during the round (ms). */
  loopDelay: ServerUsage['loopDelay'];
}

async function measure(target: Target, seconds: number, rate: number): Promise<Round> {
  // One unmeasured second at the round's rate first: the round measures the steady state at that rate,
  // not the resumption after the other target's round (caches re-read only what is in use).
  await drive(target, 1, rate);
  const before = await usageOf(target);
  const result = await drive(target, seconds, rate);
  const after = await usageOf(target);
  const used = after.user + after.system - (before.user + before.system);
  return { result, cpuPerRequest: used / Math.max(1, result.requests.total), loopDelay: after.loopDelay };
}

/**
 * Each request carries the next bench account's key in turn, so the run measures admitted requests of many
 * customers rather than one account's 429s once its 10,000 reads an hour are spent.
 */
function drive(target: Target, seconds: number, rate: number): Promise<Result> {
  let next = 0;
  const keys = target.keys;
  return autocannon({
    url: target.url,
    connections: CONNECTIONS,
    duration: seconds,
    ...(rate > 0 ? { overallRate: rate } : {}),
    requests: [
      {
        method: 'GET',
        path: target.path,
        setupRequest: (request) => {
          const key = keys[next++ % Math.max(1, keys.length)];
          if (key) request.headers = { ...request.headers, authorization: `Bearer ${key}` };
          return request;
        },
      },
    ],
  });
}

/** Figures of one target at one rate over all its rounds. */
export interface Summary {
  rps: number;
  /** Server CPU time per request (µs): steadier than req/s when other work shares the machine. */
  cpuPerRequest: number;
  /** The worst round's p50 and p99 (ms). */
  p50: number;
  p99: number;
  errors: number;
  statuses: Map<string, number>;
  /** The worst round's event-loop delay p99 and max (ms). */
  loopDelayP99: number;
  loopDelayMax: number;
}

function summarise(rounds: Round[]): Summary {
  const results = rounds.map((r) => r.result);
  const statuses = new Map<string, number>();
  for (const result of results) {
    for (const [code, { count }] of Object.entries(result.statusCodeStats ?? {})) {
      statuses.set(code, (statuses.get(code) ?? 0) + count);
    }
  }
  return {
    rps: results.reduce((sum, r) => sum + r.requests.total / r.duration, 0) / results.length,
    cpuPerRequest: rounds.reduce((sum, r) => sum + r.cpuPerRequest, 0) / rounds.length,
    p50: Math.max(...results.map((r) => r.latency.p50)),
    p99: Math.max(...results.map((r) => r.latency.p99)),
    errors: results.reduce((sum, r) => sum + r.errors + r.timeouts, 0),
    statuses,
    loopDelayP99: Math.max(...rounds.map((r) => r.loopDelay.p99Ms)),
    loopDelayMax: Math.max(...rounds.map((r) => r.loopDelay.maxMs)),
  };
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });
const rateName = (rate: number) => (rate > 0 ? `${fmt(rate)}/s` : 'saturated');

function line(rate: number, name: string, s: Summary): string {
  const statuses = [...s.statuses].map(([code, count]) => `${code}: ${fmt(count)}`).join(', ');
  return (
    `${rateName(rate).padStart(9)}  ${name.padEnd(13)} ${fmt(s.rps).padStart(6)} req/s  ` +
    `p50 ${fmt(s.p50, 2).padStart(5)} ms  p99 ${fmt(s.p99, 2).padStart(6)} ms  ` +
    `CPU ${fmt(s.cpuPerRequest, 1).padStart(6)} µs/req  ` +
    `loop delay p99 ${fmt(s.loopDelayP99, 1)} max ${fmt(s.loopDelayMax, 1)} ms  errors ${s.errors}  [${statuses}]`
  );
}

/** Anvil over bare: ≤ 2 on p99 and on CPU per request is the target (issue 21). */
function ratios(rate: number, bare: Summary, verify: Summary): string {
  const p99 = verify.p99 / bare.p99;
  const cpu = verify.cpuPerRequest / bare.cpuPerRequest;
  const verdict = (r: number) => (r <= 2 ? 'met' : 'missed');
  return (
    `${rateName(rate).padStart(9)}  Anvil/bare    p99 ${p99.toFixed(2)} (≤ 2: ${verdict(p99)})  ` +
    `CPU/req ${cpu.toFixed(2)} (≤ 2: ${verdict(cpu)})  req/s ${(verify.rps / bare.rps).toFixed(2)}`
  );
}

export interface RateResult {
  /** Offered req/s; 0 for saturation. */
  rate: number;
  bare: Summary;
  verify: Summary;
}

/**
 * Both servers run side by side and are measured in alternating rounds at each rate, so load from elsewhere
 * on the machine drifting during the run weighs on both alike.
 */
export async function runAuthVerifyBench(options: BenchOptions = DEFAULTS): Promise<RateResult[]> {
  const [one, five] = loadavg();
  process.stdout.write(
    `auth-verify: ${CONNECTIONS} connections, offered ${options.rates.map(rateName).join(', ')}; ` +
      `${options.warmupSeconds} s warm-up, then ${options.rounds} alternating rounds of ` +
      `${options.durationSeconds / options.rounds} s per rate and target; node ${process.version}, ` +
      `${availableParallelism()} CPUs, load average ${one?.toFixed(1)} / ${five?.toFixed(1)}; control plane on ` +
      `${process.env['BENCH_DATABASE_URL'] ? 'PostgreSQL (BENCH_DATABASE_URL)' : 'embedded PGlite'}\n` +
      `Anvil: GET /v2/auth/verify with a key; bare: a bare fastify GET / route. p50/p99 are autocannon's ` +
      `(corrected for coordinated omission at fixed rates), CPU is the server process's per answered request\n`,
  );
  const bareTarget = await startTarget('hello.ts');
  let verifyTarget: Target | null = null;
  try {
    verifyTarget = await startTarget('control-plane.ts');
    await drive(bareTarget, options.warmupSeconds, 0);
    await drive(verifyTarget, options.warmupSeconds, 0);
    const results: RateResult[] = [];
    for (const rate of options.rates) {
      const bareRounds: Round[] = [];
      const verifyRounds: Round[] = [];
      for (let round = 0; round < options.rounds; round++) {
        bareRounds.push(await measure(bareTarget, options.durationSeconds / options.rounds, rate));
        verifyRounds.push(await measure(verifyTarget, options.durationSeconds / options.rounds, rate));
      }
      const bare = summarise(bareRounds);
      const verify = summarise(verifyRounds);
      process.stdout.write(`${line(rate, 'bare fastify', bare)}\n`);
      process.stdout.write(`${line(rate, 'Anvil', verify)}\n`);
      process.stdout.write(`${ratios(rate, bare, verify)}\n`);
      results.push({ rate, bare, verify });
    }
    return results;
  } finally {
    if (verifyTarget) await stopTarget(verifyTarget);
    await stopTarget(bareTarget);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runAuthVerifyBench();
}
