// The real control plane for the fleet benches (startServer as `npm start` runs it, local agent off),
// over embedded PGlite in a temporary directory, or PostgreSQL when DATABASE_URL is set. Prints
// BENCH_READY {url, joinToken, agentVersion} (a token for any number of hosts, one hour; the agent
// version it ships) and answers over IPC:
// 'usage' -> its CPU time and RSS; {t: 'workloads', hostId, count} -> creates that many busybox
// workloads on the host (the agent-idle bench) and answers their ids.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, loadConfig, startServer } from '@anvil/control-plane';
import { workloadSpecInput } from '../../test/agent/fixtures.ts';

// BENCH_FLEET_DATA_DIR: the caller's directory (kept, so a restarted process finds the same embedded
// database); BENCH_FLEET_PORT: listen there (a restart keeps the agents' address).
const ownDataDir = !process.env['BENCH_FLEET_DATA_DIR'];
const dataDir = process.env['BENCH_FLEET_DATA_DIR'] || mkdtempSync(join(tmpdir(), 'anvil-bench-fleet-'));
const config = loadConfig({
  ...process.env,
  ANVIL_DATA_DIR: dataDir,
  PORT: process.env['BENCH_FLEET_PORT'] ?? '0',
  ANVIL_HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  ANVIL_LOCAL_AGENT: '0',
  // Fleet benches need neither the HTTPS proxy's nor the SSH relay's fixed port (two may run at once).
  ANVIL_PROXY_PORT: process.env['ANVIL_PROXY_PORT'] ?? '0',
  ANVIL_SSH_PORT: process.env['ANVIL_SSH_PORT'] ?? '0',
});
const server = await startServer(
  config,
  createLogger('warn'),
  new Writable({ write: (_c, _e, done) => done() }),
);
const fleet = server.context.fleet;
const { value: joinToken } = await fleet.joinTokens.create(
  { userId: null, keyId: null },
  { description: 'bench', maxUses: null, expiresIn: 3600 },
);
const owner = await server.context.db.prisma.account.findFirstOrThrow({ orderBy: { createdAt: 'asc' } });

const agentVersion = fleet.artifacts.bundledVersion;
process.stdout.write(`BENCH_READY ${JSON.stringify({ url: server.url, joinToken, agentVersion })}\n`);

process.on('message', (message: unknown) => {
  if (message === 'usage') {
    process.send?.({ cpu: process.cpuUsage(), rss: process.memoryUsage().rss });
    return;
  }
  const m = message as { t?: string; hostId?: string; count?: number };
  if (m.t === 'workloads' && m.hostId && m.count) {
    void (async () => {
      const ids: string[] = [];
      for (let i = 0; i < m.count!; i++) {
        const workload = await fleet.workloads.create({
          hostId: m.hostId!,
          kind: 'cluster',
          ownerAccountId: owner.id,
          spec: workloadSpecInput({
            command: ['sleep', '86400'],
            labels: { 'anvil.test': '1', 'anvil.bench': '1' },
          }),
        });
        ids.push(workload.id);
      }
      process.send?.({ t: 'workloads', ids });
    })();
  }
});
process.once('SIGTERM', () => {
  server
    .close()
    .finally(() => {
      if (ownDataDir) rmSync(dataDir, { recursive: true, force: true });
    })
    .then(() => process.exit(0));
});
