import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { generateApiKey } from '@anvil/shared';
import {
  type ControlPlaneProcess,
  freePort,
  spawnControlPlane,
} from '../../control-plane/src/testing/process.ts';
import { waitFor } from '../fleet/wait.ts';

/** One control-plane process of the pair: its own ports, the same database and keys as the other. */
export interface Replica {
  name: string;
  apiPort: number;
  sshPort: number;
  proxyPort: number;
  process: ControlPlaneProcess;
}

/** The production layout of README "High availability", on loopback: N replicas, one HAProxy. */
export interface BalancedControlPlanes {
  replicas: Replica[];
  /** The balancer's addresses: what agents, API clients, ssh and browsers use. */
  apiUrl: string;
  sshPort: number;
  proxyPort: number;
  ownerKey: string;
  caPath: string;
  /** Kills (SIGKILL) or stops (SIGTERM) one replica and waits for it to exit. */
  kill(replica: Replica, signal: NodeJS.Signals): Promise<void>;
  /** Starts a replica again on its ports (after kill). */
  restart(replica: Replica): Promise<void>;
  haproxyLog(): string;
  close(): Promise<void>;
}

/** The HAProxy configuration README "High availability" shows, with this run's ports. */
export function haproxyConfig(o: {
  /** The admin socket the test reads server states from (`show stat`). */
  statsSocket: string;
  api: number;
  ssh: number;
  proxy: number;
  replicas: { name: string; apiPort: number; sshPort: number; proxyPort: number }[];
}): string {
  const servers = (port: (r: (typeof o.replicas)[number]) => number, check: string) =>
    o.replicas.map((r) => `  server ${r.name} 127.0.0.1:${port(r)} ${check}`).join('\n');
  return `global
  maxconn 4096
  stats socket ${o.statsSocket} mode 600 level admin

defaults
  timeout connect 2s
  timeout check 5s
  timeout client 1h
  timeout server 1h
  timeout tunnel 1h
  # A replica that refuses the connection (killed) is retried on another one.
  retries 3
  option redispatch

frontend api
  mode http
  bind 127.0.0.1:${o.api}
  default_backend api

backend api
  mode http
  balance roundrobin
  option httpchk
  http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
  http-check expect status 200
  # A replica that stops answering is out within about 2 s; one shutting down says 503 first.
  default-server inter 1s fall 2 rise 2
${servers((r) => r.apiPort, 'check')}

frontend ssh
  mode tcp
  bind 127.0.0.1:${o.ssh}
  default_backend ssh

backend ssh
  mode tcp
  balance leastconn
  option tcp-check
  default-server inter 1s fall 2 rise 2
${o.replicas.map((r) => `  server ${r.name} 127.0.0.1:${r.sshPort} check port ${r.apiPort}`).join('\n')}

frontend proxy
  mode tcp
  bind 127.0.0.1:${o.proxy}
  default_backend proxy

backend proxy
  mode tcp
  balance roundrobin
  default-server inter 1s fall 2 rise 2
${o.replicas.map((r) => `  server ${r.name} 127.0.0.1:${r.proxyPort} check port ${r.apiPort}`).join('\n')}
`;
}

/** The api backend's servers and their states (UP, DOWN, …) from HAProxy's admin socket. */
function apiServerStates(socketPath: string): Promise<Map<string, string>> {
  return new Promise((resolve, reject) => {
    const socket = connect(socketPath);
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d.toString();
    });
    socket.on('error', reject);
    socket.on('end', () => {
      const states = new Map<string, string>();
      for (const line of text.split('\n')) {
        const [proxy, server, ...rest] = line.split(',');
        // Column 18 (status) of `show stat`; rest starts at column 3.
        if (proxy === 'api' && server && server !== 'BACKEND' && server !== 'FRONTEND') {
          states.set(server, rest[15] ?? '');
        }
      }
      resolve(states);
    });
    socket.write('show stat\n');
  });
}

async function ready(port: number): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/readyz`);
    return res.status === 200;
  } catch {
    return false;
  }
}

/**
 * Starts `count` control-plane processes (`npm start`'s entry point) on one PostgreSQL database, each
 * with ANVIL_REPLICA_URL naming its own address, and HAProxy in front of their API (with the agents'
 * WebSocket), SSH relay and HTTPS proxy ports.
 */
export async function startBalanced(o: {
  databaseUrl: string;
  dir: string;
  count: number;
  env?: Record<string, string>;
}): Promise<BalancedControlPlanes> {
  const ownerKey = generateApiKey('live');
  const secretKey = randomBytes(32).toString('hex');
  const [lbApi, lbSsh, lbProxy] = [await freePort(), await freePort(), await freePort()];
  // One certificate for the proxy domain on every replica, as an operator would install.
  const certPath = join(o.dir, 'proxy.crt');
  const keyPath = join(o.dir, 'proxy.key');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      keyPath,
      '-out',
      certPath,
      '-days',
      '2',
      '-subj',
      '/CN=*.proxy.localhost',
      '-addext',
      'subjectAltName=DNS:*.proxy.localhost',
    ],
    { stdio: 'ignore' },
  );
  const common: Record<string, string> = {
    DATABASE_URL: o.databaseUrl,
    ANVIL_BOOTSTRAP_API_KEY: ownerKey,
    ANVIL_SECRET_KEY: secretKey,
    ANVIL_PUBLIC_URL: `http://127.0.0.1:${lbApi}`,
    ANVIL_SSH_HOST: '127.0.0.1',
    ANVIL_PROXY_DOMAIN: 'proxy.localhost',
    ANVIL_PROXY_TLS_CERT: certPath,
    ANVIL_PROXY_TLS_KEY: keyPath,
    ...o.env,
  };
  const replicas: Replica[] = [];
  const envOf = (r: Omit<Replica, 'process'>) => ({
    ...common,
    PORT: String(r.apiPort),
    ANVIL_HOST: '127.0.0.1',
    ANVIL_SSH_PORT: String(r.sshPort),
    ANVIL_PROXY_PORT: String(r.proxyPort),
    ANVIL_REPLICA_URL: `http://127.0.0.1:${r.apiPort}`,
    ANVIL_DATA_DIR: join(o.dir, r.name),
  });
  const start = async (r: Omit<Replica, 'process'>): Promise<ControlPlaneProcess> => {
    const child = spawnControlPlane(envOf(r));
    await waitFor(
      `replica ${r.name} ready`,
      async () => {
        if (child.child.exitCode !== null) throw new Error(`replica ${r.name} exited: ${child.stderr()}`);
        return ready(r.apiPort);
      },
      180_000,
      250,
    );
    return child;
  };
  for (let i = 0; i < o.count; i += 1) {
    const r = {
      name: `cp${i + 1}`,
      apiPort: await freePort(),
      sshPort: await freePort(),
      proxyPort: await freePort(),
    };
    // One at a time: the first migrates the empty database and bootstraps the owner.
    replicas.push({ ...r, process: await start(r) });
  }
  const configPath = join(o.dir, 'haproxy.cfg');
  const statsSocket = join(o.dir, 'haproxy.sock');
  writeFileSync(configPath, haproxyConfig({ statsSocket, api: lbApi, ssh: lbSsh, proxy: lbProxy, replicas }));
  const haproxy = spawn('haproxy', ['-f', configPath, '-db'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let haLog = '';
  haproxy.stdout.on('data', (d: Buffer) => {
    haLog += d.toString();
  });
  haproxy.stderr.on('data', (d: Buffer) => {
    haLog += d.toString();
  });
  process.once('exit', () => haproxy.kill('SIGKILL'));
  await waitFor('the balancer ready', () => ready(lbApi), 60_000, 250);
  const exited = (child: ControlPlaneProcess) =>
    child.child.exitCode !== null || child.child.signalCode !== null;
  return {
    replicas,
    apiUrl: `http://127.0.0.1:${lbApi}`,
    sshPort: lbSsh,
    proxyPort: lbProxy,
    ownerKey,
    caPath: certPath,
    async kill(replica, signal) {
      if (!exited(replica.process)) replica.process.child.kill(signal);
      await replica.process.exited;
    },
    async restart(replica) {
      replica.process = await start(replica);
      // Back in rotation only once the balancer's own checks say so (rise 2 × inter 1 s).
      await waitFor(
        `the balancer to take ${replica.name} back`,
        async () => (await apiServerStates(statsSocket)).get(replica.name) === 'UP',
        60_000,
        250,
      );
    },
    haproxyLog: () => haLog,
    async close() {
      for (const r of replicas) {
        if (!exited(r.process)) r.process.child.kill('SIGTERM');
      }
      await Promise.all(
        replicas.map((r) =>
          Promise.race([r.process.exited, new Promise((resolve) => setTimeout(resolve, 15_000))]),
        ),
      );
      for (const r of replicas) if (!exited(r.process)) r.process.child.kill('SIGKILL');
      haproxy.kill('SIGKILL');
    },
  };
}
