// The real control plane (startServer, embedded PGlite, LOG_LEVEL=warn) with its HTTPS port proxy, a
// running cluster whose container (bench/fixtures/static-http: a keep-alive epoll server in C serving
// /small.bin, 1 KiB, and /large.bin, 1 MiB, from memory, so the backend is not what limits either path)
// is reached through the proxy with the owner's key. Prints BENCH_READY {proxy, api, direct, key, host,
// tunnels, agentPid}
// (and the PEM files of its certificate) once it serves; answers 'cpu' over IPC with its CPU usage; removes the container on SIGTERM.
// Tunnels (ANVIL_BENCH_PROXY_TUNNELS): `bridge` (default) is the named test double DockerBridgeTunnels
// (net.connect to the container on the Docker bridge), which measures the proxy alone; `agent` is the
// production path: a real agent in its own process runs the container as the cluster's workload and
// carries each tunnel (WebSocket to the control plane, TCP to the container).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, loadConfig, startServer } from '@anvil/control-plane';
import { generateApiKey, newId } from '@anvil/shared';
import Dockerode from 'dockerode';
import { tlsDir } from '../../control-plane/src/proxy/tls.ts';
import { workloadSpecInput } from '../../control-plane/src/testing/workload-spec.ts';
import { TEST_HOST_IMAGES } from '../../test/fixtures/images/busybox.ts';
import { removeTestContainers } from '../../test/fixtures/images/docker.ts';
import { type AgentProcess, spawnAgent } from '../../test/fleet/agent-process.ts';
import { DockerBridgeTunnels } from '../../test/proxy/docker-bridge-tunnels.ts';
import { ensureStaticHttpImage, STATIC_HTTP_PORT } from '../fixtures/static-http/image.ts';
import { answerUsageRequests } from './usage-reply.ts';

const tunnels = process.env['ANVIL_BENCH_PROXY_TUNNELS'] === 'agent' ? 'agent' : 'bridge';
const dataDir = mkdtempSync(join(tmpdir(), 'anvil-bench-proxy-'));
const key = generateApiKey('live');
const config = loadConfig({
  ANVIL_DATA_DIR: dataDir,
  PORT: '0',
  ANVIL_PROXY_PORT: '0',
  ANVIL_SSH_PORT: '0',
  ANVIL_HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  ANVIL_LOCAL_AGENT: '0',
  ANVIL_BOOTSTRAP_API_KEY: key,
});
const docker = new Dockerode();
const server = await startServer(
  config,
  createLogger('warn'),
  new Writable({ write: (_c, _e, done) => done() }),
  tunnels === 'bridge' ? { proxyTunnels: new DockerBridgeTunnels(docker) } : {},
);

async function until<T>(what: string, check: () => Promise<T | null | undefined | false>): Promise<T> {
  const deadline = Date.now() + 300_000;
  for (;;) {
    const value = await check().catch(() => null);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const image = await ensureStaticHttpImage(docker);
const prisma = server.context.db.prisma;
const owner = await prisma.user.findFirstOrThrow({ where: { role: 'owner' } });
const clusterId = newId('cluster');
let agent: AgentProcess | null = null;
let hostId: string | null = null;
if (tunnels === 'agent') {
  const { value } = await server.context.fleet.joinTokens.create({ userId: owner.id, keyId: null }, {});
  // ANVIL_BENCH_PROXY_PROFILE=<dir>: the agent writes its V8 CPU profile there too when it exits.
  const profile = process.env['ANVIL_BENCH_PROXY_PROFILE'];
  agent = await spawnAgent({
    controlPlaneUrl: server.url,
    joinToken: value,
    env: {
      ANVIL_LOG_LEVEL: 'warn',
      // The static-http image is the bench's own (the agent runs only images its operator allows).
      ANVIL_HOST_IMAGES: [...TEST_HOST_IMAGES, 'anvil-bench/*'].join(','),
    },
    nodeFlags: profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : [],
  });
  const registered = await agent.hostId();
  hostId = registered;
  await until('the agent to connect', async () => server.context.fleet.agents.isConnectedHere(registered));
}
await prisma.cluster.create({
  data: {
    id: clusterId,
    accountId: owner.accountId,
    ownerId: owner.id,
    name: 'bench',
    status: 'running',
    gpuType: 'H100',
    gpuCount: 1,
    cpuCores: 1,
    memoryGb: 1,
    storageGb: 1,
    dockerImage: image,
    command: [],
    ports: [{ internal_port: STATIC_HTTP_PORT, protocol: 'tcp', description: 'static-http' }],
    gpuIndices: [],
    hostId,
  },
});
let ip: string;
if (hostId) {
  await server.context.fleet.workloads.create({
    id: clusterId,
    hostId,
    kind: 'cluster',
    ownerAccountId: owner.accountId,
    spec: workloadSpecInput({ image, command: null, labels: { 'anvil.bench': '1' } }),
  });
  ip = await until('the workload to run', async () => {
    const view = await server.context.fleet.workloads.get(clusterId);
    return view.phase === 'running' && view.actualStatus?.ipAddress;
  }).catch(async (error: Error) => {
    const view = await server.context.fleet.workloads.get(clusterId).catch(() => null);
    throw new Error(`${error.message}: ${JSON.stringify(view)}\n${agent?.summary(30)}`);
  });
} else {
  const container = await docker.createContainer({
    Image: image,
    Labels: { 'anvil.bench': '1', 'anvil.workload': clusterId },
  });
  await container.start();
  ip = (await container.inspect()).NetworkSettings.IPAddress;
}
const direct = `http://${ip}:${STATIC_HTTP_PORT}`;
await until('the server in the container', async () => (await fetch(`${direct}/small.bin`)).ok);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await agent?.kill();
  await removeTestContainers(docker, `anvil.workload=${clusterId}`);
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
  process.exit(0);
}
process.on('SIGTERM', () => void stop());
answerUsageRequests();
const host = `${clusterId.replace('_', '-')}-${STATIC_HTTP_PORT}.${config.proxyDomain}`;
process.stdout.write(
  `BENCH_READY ${JSON.stringify({
    proxy: `https://127.0.0.1:${server.context.proxy.port}`,
    api: server.url,
    agentPid: agent?.child.pid ?? null,
    host,
    direct,
    key,
    tunnels,
    tls: { cert: join(tlsDir(dataDir), 'server.crt'), key: join(tlsDir(dataDir), 'server.key') },
  })}\n`,
);
