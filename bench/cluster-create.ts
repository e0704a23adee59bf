// Two cluster figures, printed, never asserted on:
// 1. Time from POST /v1/clusters to `running` (a real agent with simulated 2xH100 running a real busybox
//    container in Docker) against a bare `docker run -d` of the same image and command, alternating, in
//    the same run: the ratio of medians is the control plane's overhead factor. The agent is its own
//    process, as `npm start` and `npm run agent` run it (BENCH_CLUSTER_AGENT=in-process runs it inside the
//    bench, sharing the control plane's event loop, as the end-to-end tests do). Both sides are polled
//    alike: a first check as soon as the call returns (POST / docker start), then one every
//    BENCH_POLL_MS (20), so a status poll does not eat the CPU of what it measures.
// 2. Scheduler placements per second committed to PostgreSQL with 5,000 simulated hosts (8 H100 each,
//    rows inserted directly): pending clusters placed by the real Allocator (row locks, best fit) from
//    CONCURRENCY workers, three times in the same run: one statement (and commit) per placement
//    (`allocate`); each worker placing one cluster at a time through `allocateJoined`, as parallel creates do
//    (calls arriving while a statement runs go together in the next one); the queue drained in batches of
//    BENCH_PLACEMENT_BATCH (50) pending clusters per statement and commit (`allocateMany`, as the supervisor
//    does); and concurrent single creates as POST /v1/clusters commits them (ClusterCreation: each cluster
//    registered, inserted, placed and its workload written in one statement and commit). Only placements
//    whose statement returned (committed) count; afterwards every GPU is checked to be held at most once
//    and the capacity rows against the allocations. The same workers then commit one-row UPDATEs: the
//    machine's own commit rate in that run, the peer the figures are read against (the machine is shared).
// Run: `npm run bench` (all benches) or `node --import tsx bench/cluster-create.ts`.
// Needs Docker (part 1) and ANVIL_TEST_POSTGRES_URL (part 2); a part without its dependency is skipped.
// BENCH_CLUSTER_PARTS=create (or =placement) runs one part only; unset or `all` runs both.
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import { systemClock } from '../control-plane/src/auth/clock.ts';
import { ClusterCreation, clusterDraft } from '../control-plane/src/clusters/creation.ts';
import { workloadSpecOf } from '../control-plane/src/clusters/service.ts';
import { type Database, openPostgres } from '../control-plane/src/db/index.ts';
import { validSpec } from '../control-plane/src/fleet/workloads/workloads.ts';
import { Allocator } from '../control-plane/src/scheduler/allocator.ts';
import { driftedHosts } from '../control-plane/src/scheduler/capacity.ts';
import { insertSimulatedHosts } from '../control-plane/src/scheduler/simulated-hosts.ts';
import { call } from '../control-plane/src/testing/accounts.ts';
import { createTestApp } from '../control-plane/src/testing/app.ts';
import { createTestDatabase } from '../control-plane/src/testing/database.ts';
import { startAgent } from '../test/agent/harness.ts';
import { BUSYBOX_IMAGE, ensureBusyboxImage } from '../test/fixtures/images/busybox.ts';
import { testDocker } from '../test/fixtures/images/docker.ts';
import { spawnAgent } from '../test/fleet/agent-process.ts';
import { missingPrerequisites } from './prerequisites.ts';

const ROUNDS = Number(process.env['BENCH_CLUSTER_ROUNDS'] ?? 5);
const POLL_MS = Number(process.env['BENCH_POLL_MS'] ?? 20);
const IN_PROCESS_AGENT = process.env['BENCH_CLUSTER_AGENT'] === 'in-process';
const HOSTS = 5_000;
const PLACEMENTS = Number(process.env['BENCH_PLACEMENTS'] ?? 2_000);
const CONCURRENCY = Number(process.env['BENCH_PLACEMENT_WORKERS'] ?? 8);
const BATCH = Number(process.env['BENCH_PLACEMENT_BATCH'] ?? 50);

/** The database the placement part runs in (its backends' CPU is measured). */
let benchDatabase = '';

/** Figures go to stdout (benchmarks print, never assert). */
function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

async function until<T>(check: () => Promise<T | null>, timeoutMs: number, everyMs = 5): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== null) return value;
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

export interface ClusterCreateResult {
  createToRunningMs: number[];
  dockerRunMs: number[];
  ratio: number;
}

export async function runCreateToRunning(rounds = ROUNDS): Promise<ClusterCreateResult | null> {
  const missing = missingPrerequisites('cluster create → running', { docker: true });
  if (missing) {
    process.stdout.write(missing);
    return null;
  }
  const docker = testDocker();
  await ensureBusyboxImage(docker);
  const t = await createTestApp({ env: { ANVIL_HEARTBEAT_SECONDS: '2' } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const token = (await call(t, { method: 'POST', url: '/v2/admin/hosts/join-tokens', payload: {} })).json()
    .value;
  const controlPlaneUrl = `http://127.0.0.1:${port}`;
  const agent = IN_PROCESS_AGENT
    ? await startAgent(docker, { controlPlaneUrl, joinToken: token, handshakeTimeoutMs: 60_000 })
    : await spawnAgent({ controlPlaneUrl, joinToken: token, env: { ANVIL_LOG_LEVEL: 'warn' } });
  const stopAgent = () => ('stop' in agent ? agent.stop() : agent.kill().then(() => {}));
  const hostId = await until(
    async () =>
      (await t.context.db.prisma.host.findFirst({ where: { state: 'ready', gpuCount: 2 } }))?.id ?? null,
    180_000,
    50,
  );
  const command = ['sleep', '3600'];
  const cluster: number[] = [];
  const bare: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      // Cluster: POST → GET until running (the agent reported the container running).
      const started = performance.now();
      const created = await call(t, {
        method: 'POST',
        url: '/v1/clusters',
        payload: {
          name: `bench-${round}`,
          docker_image: BUSYBOX_IMAGE,
          gpu_type: 'H100',
          command,
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
        },
      });
      if (created.statusCode !== 201) throw new Error(`create: ${created.body}`);
      const id = created.json().data.id as string;
      await until(
        async () =>
          (await call(t, { url: `/v1/clusters/${id}` })).json().data.status === 'running' ? true : null,
        120_000,
        POLL_MS,
      );
      cluster.push(performance.now() - started);
      await call(t, {
        method: 'DELETE',
        url: `/v1/clusters/${id}`,
        payload: { confirm_deletion: 'DELETE', force: true, wait_for_completion: true },
      });

      // Bare docker run -d of the same image and command, until Docker says it runs.
      const bareStarted = performance.now();
      const container = await docker.createContainer({
        Image: BUSYBOX_IMAGE,
        Cmd: command,
        Labels: { 'anvil.test': '1' },
      });
      await container.start();
      await until(async () => ((await container.inspect()).State.Running ? true : null), 60_000, POLL_MS);
      bare.push(performance.now() - bareStarted);
      await container.remove({ force: true });
    }
  } finally {
    await stopAgent().catch(() => {});
    await t.close();
    const left = await docker.listContainers({ all: true, filters: { label: [`anvil.host=${hostId}`] } });
    await Promise.all(
      left.map((c) =>
        docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {}),
      ),
    );
  }
  const ratio = median(cluster) / median(bare);
  print(
    `cluster create → running: median ${median(cluster).toFixed(0)} ms (${cluster.map((v) => v.toFixed(0)).join(', ')}); ` +
      `bare docker run: median ${median(bare).toFixed(0)} ms (${bare.map((v) => v.toFixed(0)).join(', ')}); ` +
      `ratio ${ratio.toFixed(2)} (target <= 1.5); agent ${IN_PROCESS_AGENT ? 'in-process' : 'process'}, poll ${POLL_MS} ms; ` +
      `load average ${loadavg()[0]!.toFixed(1)}`,
  );
  return { createToRunningMs: cluster, dockerRunMs: bare, ratio };
}

export async function runPlacementBench(placements = PLACEMENTS): Promise<{ perSecond: number } | null> {
  if (!process.env['ANVIL_TEST_POSTGRES_URL']) {
    print('scheduler placements/s: skipped (set ANVIL_TEST_POSTGRES_URL)');
    return null;
  }
  process.env['ANVIL_TEST_DB'] = 'postgres';
  const database = await createTestDatabase();
  benchDatabase = new URL(database.url!).pathname.slice(1);
  // A connection per worker, as a control plane's pool gives concurrent requests: commits then share
  // WAL flushes (group commit) instead of queueing for the test helper's five connections.
  const db = openPostgres(database.url!, CONCURRENCY);
  try {
    await insertSimulatedHosts(db, { prefix: 'bench', count: HOSTS, gpusPerHost: 8, region: 'us-east-1' });
    const allocator = new Allocator(db, systemClock);
    await allocator.sync();
    const ids = Array.from(
      { length: 3 * placements },
      (_, i) => `cluster_bench_${String(i).padStart(6, '0')}`,
    );
    await db.sql.query(
      `INSERT INTO clusters (id, account_id, owner_id, name, status, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb,
                             docker_image, command, gpu_indices, created_at, updated_at)
       SELECT id, 'acc_bench', 'usr_bench', id, 'pending', 'H100', 1, 1, 1, 1, 'busybox', '{}', '{}', now(), now()
         FROM unnest($1::text[]) AS id`,
      [ids],
    );
    // The clusters were bulk-inserted a moment ago; a live database has had autovacuum's statistics on
    // them, without which the planner may read a cluster by its status index instead of its id.
    await db.sql.query('ANALYZE clusters');
    const request = {
      gpuType: 'H100' as const,
      gpuCount: 1,
      cpuCores: 1,
      memoryGb: 1,
      storageGb: 1,
      region: null,
      hostId: null,
    };
    const phase = async (queue: string[], batch: number | 'joined') => {
      let next = 0;
      const outcomes = new Map<string, number>();
      const count = (kind: string) => outcomes.set(kind, (outcomes.get(kind) ?? 0) + 1);
      const cpu = cpuMeter();
      const started = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < queue.length) {
            const taken = queue.slice(next, next + (batch === 'joined' ? 1 : batch));
            next += taken.length;
            if (batch === 'joined') count((await allocator.allocateJoined(taken[0]!, request)).kind);
            else if (batch === 1) count((await allocator.allocate(taken[0]!, request)).kind);
            else {
              const items = taken.map((clusterId) => ({ clusterId, request }));
              for (const outcome of await allocator.allocateMany(items)) count(outcome.kind);
            }
          }
        }),
      );
      const seconds = (performance.now() - started) / 1000;
      const placed = outcomes.get('placed') ?? 0;
      const others = [...outcomes].filter(([kind]) => kind !== 'placed').map(([kind, n]) => `${kind} ${n}`);
      return { placed, seconds, perSecond: placed / seconds, others, cpu: cpu.perItem(queue.length) };
    };
    const single = await phase(ids.slice(0, placements), 1);
    const joined = await phase(ids.slice(placements, 2 * placements), 'joined');
    const batched = await phase(ids.slice(2 * placements), BATCH);
    const created = await createPhase(db, placements);
    const duplicates = await db.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT host_id, i FROM clusters, unnest(gpu_indices) AS i
        WHERE cardinality(gpu_indices) > 0 GROUP BY host_id, i HAVING count(*) > 1) AS d`,
    );
    const drifted = await driftedHosts(db);
    const peer = await commitsPerSecond(db, placements);
    const ceiling = peer.perSecond;
    const line = (label: string, r: Awaited<ReturnType<typeof phase>>) =>
      `${label}: ${r.placed}/${placements} in ${r.seconds.toFixed(2)} s, ${r.perSecond.toFixed(0)} placements/s, CPU each ${r.cpu}` +
      `${r.others.length > 0 ? ` (not placed: ${r.others.join(', ')})` : ''}`;
    print(
      `scheduler: placements committed to PostgreSQL with ${HOSTS} hosts, ${CONCURRENCY} workers (target: single creates >= 2000/s): ` +
        `${line('one statement and commit each', single)}; ${line('one at a time per worker, joined', joined)}; ` +
        `${line(`batches of ${BATCH} per statement and commit`, batched)}; ` +
        `${line('concurrent single creates, each registered, inserted and placed in one statement and commit (ClusterCreation)', created)}; ` +
        `GPUs held twice: ${duplicates[0]?.n}; hosts whose capacity rows disagree with the allocations: ${drifted.length}; ` +
        `same run, one-row UPDATE transactions: ${ceiling.toFixed(0)}/s, CPU each ${peer.cpu} (single creates ${(created.perSecond / ceiling).toFixed(2)} of it); ` +
        `load average ${loadavg()[0]!.toFixed(1)}`,
    );
    const perSecond = batched.perSecond;
    return { perSecond };
  } finally {
    await db.close();
    await database.drop();
  }
}

/**
 * Concurrent single creates as POST /v1/clusters commits them (ClusterService.create): CONCURRENCY workers,
 * each creating one 1-GPU cluster at a time through ClusterCreation, one statement and one commit each
 * (registered, inserted, placed, its workload in the host's desired set). Only creates that came back
 * placed count.
 */
async function createPhase(db: Database, creates: number) {
  await db.sql.query(
    `INSERT INTO accounts (id, name, created_at, updated_at) VALUES ('acc_bench', 'bench', now(), now())`,
  );
  const creation = new ClusterCreation(db);
  const request = {
    gpuType: 'H100' as const,
    gpuCount: 1,
    cpuCores: 1,
    memoryGb: 1,
    storageGb: 1,
    region: null,
    hostId: null,
  };
  let next = 0;
  const outcomes = new Map<string, number>();
  const cpu = cpuMeter();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < creates) {
        const id = `cluster_create_${String(next++).padStart(6, '0')}`;
        const cluster = {
          id,
          accountId: 'acc_bench',
          ownerId: 'usr_bench',
          name: id,
          description: null,
          projectId: null,
          templateId: null,
          dockerImage: 'busybox',
          command: [],
          env: {},
          ports: [],
          sshEnabled: false,
          expiresAt: null,
          createdAt: systemClock.now(),
        };
        const spec = validSpec(id, workloadSpecOf(clusterDraft(cluster, request), []));
        const outcome = await creation.create(cluster, {
          request,
          spec,
          pendingReason: 'waiting',
          region: null,
          placedOnly: false,
        });
        outcomes.set(outcome.kind, (outcomes.get(outcome.kind) ?? 0) + 1);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const placed = outcomes.get('placed') ?? 0;
  const others = [...outcomes].filter(([kind]) => kind !== 'placed').map(([kind, n]) => `${kind} ${n}`);
  return { placed, seconds, perSecond: placed / seconds, others, cpu: cpu.perItem(creates) };
}

/**
 * What this machine commits at all, measured right after the placements: the same workers each committing
 * one-row UPDATEs. A placement cannot beat it by much, so the ratio says how far the scheduler is from the
 * machine's own limit when the absolute figure is depressed by other load.
 */
async function commitsPerSecond(
  db: Database,
  transactions: number,
): Promise<{ perSecond: number; cpu: string }> {
  await db.sql.query('CREATE TABLE bench_commit_probe (id int PRIMARY KEY, n int NOT NULL)');
  await db.sql.query('INSERT INTO bench_commit_probe SELECT g, 0 FROM generate_series(0, 999) AS g');
  let next = 0;
  const cpu = cpuMeter();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < transactions) {
        const id = next++ % 1000;
        await db.sql.query(
          'UPDATE bench_commit_probe SET n = n + 1 WHERE id = $1',
          [id],
          'bench_commit_probe',
        );
      }
    }),
  );
  return { perSecond: transactions / ((performance.now() - started) / 1000), cpu: cpu.perItem(transactions) };
}

/**
 * Ticks of CPU (user + system) the local PostgreSQL backends serving database `database` have used, from
 * /proc (a backend's command line names its database); null where there is no /proc to read.
 */
function postgresTicks(database: string): number | null {
  try {
    let ticks = 0;
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const close = stat.lastIndexOf(')');
        if (stat.slice(stat.indexOf('(') + 1, close) !== 'postgres') continue;
        if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(` ${database} `)) continue;
        const fields = stat.slice(close + 2).split(' ');
        ticks += Number(fields[11]) + Number(fields[12]);
      } catch {
        // The process ended meanwhile.
      }
    }
    return ticks;
  } catch {
    return null;
  }
}

/**
 * CPU per item of a phase, in µs: the bench database's PostgreSQL backends' and this process's (not the
 * server's shared writers). Unlike throughput it hardly changes when other work shares the machine.
 */
function cpuMeter(): { perItem(items: number): string } {
  const db = postgresTicks(benchDatabase);
  const self = process.cpuUsage();
  return {
    perItem(items) {
      const own = process.cpuUsage(self);
      const ownUs = (own.user + own.system) / items;
      const after = postgresTicks(benchDatabase);
      // Linux reports process CPU in clock ticks of 10 ms (USER_HZ 100).
      // A backend the pool closed meanwhile takes its ticks along: then the figure is unknown.
      const dbUs = db === null || after === null || after < db ? null : ((after - db) * 10_000) / items;
      return `${dbUs === null ? '?' : dbUs.toFixed(0)} µs PostgreSQL + ${ownUs.toFixed(0)} µs bench`;
    },
  };
}

export async function runClusterCreateBench(): Promise<void> {
  const parts = (process.env['BENCH_CLUSTER_PARTS'] ?? 'all').split(',').map((p) => p.trim());
  const wants = (part: string) => parts.includes('all') || parts.includes(part);
  if (wants('create')) await runCreateToRunning();
  if (wants('placement')) await runPlacementBench();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runClusterCreateBench();
  process.exit(0);
}
