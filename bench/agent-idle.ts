// The real agent, idle with 10 containers: its CPU (% of one core, the CPU of processes it started
// included) and RSS. The control plane runs in its own process (bench/servers/fleet-control-plane.ts), the
// agent as installed servers run it: agent/dist/main.js, built first (simulated GPUs 2xH100, default
// heartbeat and metrics intervals), against the local Docker engine. BENCH_AGENT_SOURCE=1 runs the
// TypeScript sources through tsx instead, as `npm run agent` does; BENCH_AGENT_NODE_ARGS adds node flags
// (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"). The workloads are busybox `sleep` containers labelled
// anvil.test=1 and anvil.bench=1, removed at the end.
// Run: `npm run bench` (all benches) or `node --import tsx bench/agent-idle.ts` (BENCH_AGENT_IDLE_SECONDS=60).
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import Dockerode from 'dockerode';
import { buildAgent } from '../agent/scripts/build.ts';
import { ensureBusyboxImage } from '../test/fixtures/images/busybox.ts';
import { startFleetControlPlane, stopFleetControlPlane } from './fleet-sim.ts';
import { missingPrerequisites } from './prerequisites.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CONTAINERS = 10;

/** utime + stime of a process and of its finished children, in clock ticks (100 per second on Linux). */
async function cpuTicks(pid: number): Promise<{ own: number; children: number }> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return {
    own: Number(fields[11]) + Number(fields[12]),
    children: Number(fields[13]) + Number(fields[14]),
  };
}

async function rssBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? Number.NaN) * 1024;
}

async function until<T>(
  what: string,
  check: () => Promise<T | null | undefined | false>,
  timeoutMs = 120_000,
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => null);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

export interface AgentIdleResult {
  cpuPercent: number;
  /** Of the processes the agent started and waited for, over the same time. */
  childrenCpuPercent: number;
  rssMiB: number;
  rssMaxMiB: number;
  seconds: number;
}

export async function runAgentIdleBench(
  seconds = Number(process.env['BENCH_AGENT_IDLE_SECONDS'] ?? '60'),
): Promise<AgentIdleResult | null> {
  const missing = missingPrerequisites('agent-idle', { docker: true });
  if (missing) {
    process.stdout.write(missing);
    return null;
  }
  const [one, five] = loadavg();
  process.stdout.write(
    `agent-idle: the real agent with ${CONTAINERS} running containers, ${seconds} s measured after 15 s idle; ` +
      `load average ${one?.toFixed(1)} / ${five?.toFixed(1)}\n`,
  );
  const fromSource = process.env['BENCH_AGENT_SOURCE'] === '1';
  const entry = fromSource
    ? ['--import', 'tsx', join(ROOT, 'agent', 'src', 'main.ts')]
    : [await buildAgent()];
  const docker = new Dockerode();
  await ensureBusyboxImage(docker);
  const cp = await startFleetControlPlane();
  const stateDir = await mkdtemp(join(tmpdir(), 'anvil-bench-agent-'));
  let agent: ChildProcess | null = null;
  let hostId: string | null = null;
  try {
    agent = spawn(
      process.execPath,
      [
        ...(process.env['BENCH_AGENT_NODE_ARGS']?.split(' ').filter(Boolean) ?? []),
        ...entry,
        '--control-plane',
        cp.url,
        '--state-dir',
        stateDir,
      ],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
        env: {
          ...process.env,
          ANVIL_JOIN_TOKEN: cp.joinToken,
          ANVIL_SIMULATE_GPUS: '2xH100',
          ANVIL_LOG_LEVEL: 'warn',
        },
      },
    );
    const pid = agent.pid!;
    hostId = await until('the agent to register', async () => {
      const saved = JSON.parse(await readFile(join(stateDir, 'credential.json'), 'utf8')) as {
        hostId: string;
      };
      return saved.hostId;
    });
    const created = once(cp.process, 'message');
    cp.process.send({ t: 'workloads', hostId, count: CONTAINERS });
    await created;
    await until(`${CONTAINERS} running containers`, async () => {
      const list = await docker.listContainers({
        filters: { label: [`anvil.host=${hostId}`], status: ['running'] },
      });
      return list.length === CONTAINERS;
    });
    await new Promise((resolve) => setTimeout(resolve, 15_000));
    const before = await cpuTicks(pid);
    const t0 = performance.now();
    let rssMax = 0;
    const end = Date.now() + seconds * 1000;
    while (Date.now() < end) {
      rssMax = Math.max(rssMax, await rssBytes(pid));
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    const after = await cpuTicks(pid);
    const wall = (performance.now() - t0) / 1000;
    const percent = (ticks: number) => (ticks / 100 / wall) * 100;
    const result: AgentIdleResult = {
      cpuPercent: percent(after.own - before.own),
      childrenCpuPercent: percent(after.children - before.children),
      rssMiB: (await rssBytes(pid)) / 1024 / 1024,
      rssMaxMiB: rssMax / 1024 / 1024,
      seconds: wall,
    };
    process.stdout.write(
      `  agent (${fromSource ? 'sources through tsx' : 'agent/dist/main.js'}) CPU ${result.cpuPercent.toFixed(2)} % of a core ` +
        `(+ ${result.childrenCpuPercent.toFixed(2)} % in processes it started) over ${wall.toFixed(0)} s   ` +
        `RSS ${result.rssMiB.toFixed(0)} MiB (max ${result.rssMaxMiB.toFixed(0)} MiB)   (targets: < 1 % of a core, < 100 MB)\n`,
    );
    return result;
  } finally {
    if (agent && agent.exitCode === null) {
      const exited = once(agent, 'exit');
      agent.kill('SIGTERM');
      await exited;
    }
    if (hostId) {
      const list = await docker.listContainers({ all: true, filters: { label: [`anvil.host=${hostId}`] } });
      await Promise.all(
        list.map((c) =>
          docker
            .getContainer(c.Id)
            .remove({ force: true })
            .catch(() => {}),
        ),
      );
    }
    await stopFleetControlPlane(cp);
    await rm(stateDir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runAgentIdleBench();
}
