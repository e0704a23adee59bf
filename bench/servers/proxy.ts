// The real control plane (startServer, embedded PGlite, LOG_LEVEL=warn) with its HTTPS port proxy, a
// running cluster whose container (busybox httpd, files of 1 KiB and 1 MiB) is reached through the
// proxy with the owner's key. Prints BENCH_READY {proxy, direct, key, host} once it serves; answers
// 'cpu' over IPC with its CPU usage; removes the container on SIGTERM.
// Tunnels: the agents' TunnelService when BENCH_PROXY_TUNNELS=agent is wired; by default the named
// test double DockerBridgeTunnels (net.connect to the container on the Docker bridge).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, loadConfig, startServer } from '@anvil/control-plane';
import { generateApiKey, newId } from '@anvil/shared';
import Dockerode from 'dockerode';
import { ensureBusyboxImage } from '../../test/fixtures/images/busybox.ts';
import { DockerBridgeTunnels } from '../../test/proxy/docker-bridge-tunnels.ts';

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
const server = await startServer(
  config,
  createLogger('warn'),
  new Writable({ write: (_c, _e, done) => done() }),
);
const docker = new Dockerode();
server.context.proxy.useTunnels(new DockerBridgeTunnels(docker));

const prisma = server.context.db.prisma;
const owner = await prisma.user.findFirstOrThrow({ where: { role: 'owner' } });
const clusterId = newId('cluster');
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
    dockerImage: 'anvil-test/busybox:latest',
    command: [],
    ports: [{ internal_port: 8080, protocol: 'tcp', description: 'httpd' }],
    gpuIndices: [],
  },
});
await ensureBusyboxImage(docker);
const container = await docker.createContainer({
  Image: 'anvil-test/busybox:latest',
  Labels: { 'anvil.bench': '1', 'anvil.workload': clusterId },
  Cmd: [
    'sh',
    '-c',
    'mkdir -p /www && head -c 1024 /dev/urandom > /www/small.bin && head -c 1048576 /dev/urandom > /www/large.bin && exec httpd -f -p 8080 -h /www',
  ],
});
await container.start();
const ip = (await container.inspect()).NetworkSettings.IPAddress;
const direct = `http://${ip}:8080`;
// Wait until httpd answers.
for (let i = 0; i < 100; i++) {
  try {
    if ((await fetch(`${direct}/small.bin`)).ok) break;
  } catch {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await container.remove({ force: true }).catch(() => {});
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
  process.exit(0);
}
process.on('SIGTERM', () => void stop());
process.on('message', (message) => {
  if (message === 'cpu') process.send?.(process.cpuUsage());
});
const host = `${clusterId.replace('_', '-')}-8080.${config.proxyDomain}`;
process.stdout.write(
  `BENCH_READY ${JSON.stringify({ proxy: `https://127.0.0.1:${server.context.proxy.port}`, host, direct, key })}\n`,
);
