// The idle control plane: the real one as `npm start` runs it (embedded PGlite in a fresh data directory,
// no local agent, no request), against a bare fastify hello server in the same run. Each is left alone for
// a while after it listens, then its utime + stime (/proc/<pid>/stat) is read over the measured window:
// ticks / seconds = % of one core. Background work (supervisors, dispatchers, sweeps) is all it does.
// Run: `npm run bench` (all benches) or `node --import tsx bench/idle.ts`
// (BENCH_IDLE_SETTLE_SECONDS=60, BENCH_IDLE_SECONDS=120).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CONTROL_PLANE_NODE_FLAGS } from '@anvil/control-plane';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TICKS_PER_SECOND = 100;
const BARE_FASTIFY = `
import Fastify from 'fastify';
const app = Fastify({ logger: false });
app.get('/', async () => ({ hello: 'world' }));
const url = await app.listen({ port: 0, host: '127.0.0.1' });
process.stdout.write('BENCH_READY ' + JSON.stringify({ url }) + '\\n');
process.once('SIGTERM', () => app.close().then(() => process.exit(0)));
`;

export interface IdleResult {
  /** % of one core over the measured window. */
  controlPlanePercent: number;
  barePercent: number;
  seconds: number;
}

/** utime + stime of a process, in clock ticks (100 per second on Linux). */
async function cpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Waits until the server at `url` answers anything over HTTP (start-up takes minutes on a saturated machine). */
async function listening(url: string, child: ChildProcess, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${url}: the server exited with ${child.exitCode}`);
    const answered = await fetch(url).then(
      (r) => r.arrayBuffer().then(() => true),
      () => false,
    );
    if (answered) return;
    if (Date.now() > deadline) throw new Error(`${url} did not listen within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
  });
}

export async function runIdleBench(
  settleSeconds = Number(process.env['BENCH_IDLE_SETTLE_SECONDS'] ?? '60'),
  seconds = Number(process.env['BENCH_IDLE_SECONDS'] ?? '120'),
): Promise<IdleResult> {
  const [one, five] = loadavg();
  process.stdout.write(
    `idle: control plane (PGlite, no agent, no request) vs bare fastify, ${seconds} s measured after ` +
      `${settleSeconds} s idle; load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  const dataDir = await mkdtemp(join(tmpdir(), 'anvil-bench-idle-'));
  const port = await freePort();
  // Its HTTPS proxy and SSH relay listen too (as in production), on free ports rather than 8443 and 2222,
  // which another control plane on the machine may hold.
  const [proxyPort, sshPort] = [await freePort(), await freePort()];
  const controlPlane = spawn(
    process.execPath,
    [...CONTROL_PLANE_NODE_FLAGS, '--import', 'tsx', join(ROOT, 'control-plane', 'src', 'main.ts')],
    {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'inherit'],
      env: {
        ...process.env,
        PORT: String(port),
        ANVIL_PROXY_PORT: String(proxyPort),
        ANVIL_SSH_PORT: String(sshPort),
        ANVIL_DATA_DIR: dataDir,
        ANVIL_LOCAL_AGENT: '0',
        LOG_LEVEL: 'warn',
      },
    },
  );
  // The peer: a bare fastify hello route in its own process, nothing else (bench/servers/hello.ts also
  // samples its event loop every millisecond for the latency benches, which an idle figure must not count).
  const bare = spawn(process.execPath, ['--input-type=module', '--eval', BARE_FASTIFY], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const bareUrl = await new Promise<string>((resolve, reject) => {
      let buffered = '';
      bare.stdout!.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        const ready = /BENCH_READY (\{.*\})\n/.exec(buffered);
        if (ready) resolve((JSON.parse(ready[1]!) as { url: string }).url);
      });
      bare.once('exit', (code) => reject(new Error(`the bare fastify server exited with ${code}`)));
    });
    await Promise.all([
      listening(`http://127.0.0.1:${port}/healthz`, controlPlane),
      listening(bareUrl, bare),
    ]);
    await new Promise((resolve) => setTimeout(resolve, settleSeconds * 1_000));
    const before = [await cpuTicks(controlPlane.pid!), await cpuTicks(bare.pid!)];
    const t0 = performance.now();
    await new Promise((resolve) => setTimeout(resolve, seconds * 1_000));
    const after = [await cpuTicks(controlPlane.pid!), await cpuTicks(bare.pid!)];
    const elapsed = (performance.now() - t0) / 1_000;
    const percent = (i: number) => ((after[i]! - before[i]!) / TICKS_PER_SECOND / elapsed) * 100;
    const result: IdleResult = {
      controlPlanePercent: percent(0),
      barePercent: percent(1),
      seconds: elapsed,
    };
    process.stdout.write(
      `control plane idle ${result.controlPlanePercent.toFixed(2)} % of a core ` +
        `(${after[0]! - before[0]!} ticks), bare fastify ${result.barePercent.toFixed(2)} % ` +
        `(${after[1]! - before[1]!} ticks), over ${elapsed.toFixed(0)} s ` +
        `(target < 0.5 %: ${result.controlPlanePercent < 0.5 ? 'met' : 'missed'})\n`,
    );
    return result;
  } finally {
    await Promise.all([stop(controlPlane), stop(bare)]);
    await rm(dataDir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await runIdleBench();
