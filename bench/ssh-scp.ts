// scp throughput through the SSH relay (control plane → real agent tunnel → container, SFTP and the
// legacy SCP protocol served by the relay over exec'd cat/dd) against OpenSSH's sshd on loopback, in the
// same run: scp in its default SFTP mode and with -O (the SCP protocol). Printed, never asserted.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import ssh2 from 'ssh2';
import { createTestApp, type TestApp } from '../control-plane/src/testing/index.ts';
import { ensureBusyboxImage } from '../test/fixtures/images/busybox.ts';
import { removeTestContainers, testDocker } from '../test/fixtures/images/docker.ts';
import { spawnAgent } from '../test/fleet/agent-process.ts';
import {
  clientOptions,
  freePort,
  insertCluster,
  keygen,
  runTool,
  startSshWorld,
  waitFor,
} from '../test/ssh/fixtures.ts';
import { missingPrerequisites } from './prerequisites.ts';

const SSHD = '/usr/sbin/sshd';
const SIZE_MB = Number(process.env['ANVIL_BENCH_SCP_MB'] ?? 64);
const RUNS = Number(process.env['ANVIL_BENCH_SCP_RUNS'] ?? 3);
/**
 * Where the agent runs: `process` (default) in a Node process of its own, as in production, where it runs
 * on the GPU host and the control plane's event loop carries only the relay's work; `in-process` in this
 * process beside the relay (the test fixture's layout, as the figures before December 2026 were taken),
 * where one event loop does the relay's and the agent's work for every byte.
 */
const PROFILE_DIR = process.env['ANVIL_BENCH_SCP_PROFILE'];
const AGENT_LAYOUT = process.env['ANVIL_BENCH_SCP_AGENT'] === 'in-process' ? 'in-process' : 'process';
/**
 * Which transfers to measure (all by default): upload, download, upload-O, download-O, small (a
 * one-byte download: the fixed cost of a session, in ms), cat (`ssh cat` of the file through the relay's
 * exec path, no SFTP or scp, against sshd's), and transport (`ssh host cat` of the file
 * from sshd against an ssh2 server sending the same bytes from memory: the most any ssh2-based relay
 * can deliver here, with no container, tunnel or SFTP in the way). One alone, e.g. to profile it.
 */
const PARTS = new Set(
  (process.env['ANVIL_BENCH_SCP_PARTS'] ?? 'upload,download,upload-O,download-O,cat,small,transport')
    .split(',')
    .map((p) => p.trim()),
);

interface World {
  t: TestApp;
  hostId: string;
  /** The relay's port. */
  port: number;
  close(): Promise<void>;
}

/** The control plane and relay in this process, the real agent in a process of its own (`npm run agent`). */
async function startWorldWithAgentProcess(docker: Dockerode, dataDir: string): Promise<World> {
  await ensureBusyboxImage(docker);
  const t = await createTestApp({
    env: {
      ANVIL_DATA_DIR: dataDir,
      ANVIL_SSH_HOST: 'ssh.example.test',
      ANVIL_HEARTBEAT_SECONDS: '5',
      ANVIL_HOST_GRACE_SECONDS: '120',
    },
  });
  const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
  const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
  // Host metrics once an hour: its sampler's spawns would compete with the transfer for the CPU.
  const agent = await spawnAgent({
    controlPlaneUrl: url,
    joinToken: value,
    env: { ANVIL_METRICS_SECONDS: '3600', ANVIL_LOG_LEVEL: 'warn' },
    // ANVIL_BENCH_SCP_PROFILE=<dir>: a V8 CPU profile of the agent there (run the bench itself with
    // `node --cpu-prof --cpu-prof-dir=<dir>` for the relay's).
    ...(PROFILE_DIR ? { nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] } : {}),
  });
  const hostId = await agent.hostId();
  await waitFor('agent connected', async () => t.context.fleet.agents.isConnectedHere(hostId), 180_000);
  const port = (await t.context.ssh.listen(0, '127.0.0.1')).port;
  return {
    t,
    hostId,
    port,
    async close() {
      await agent.kill();
      await t.close();
      await removeTestContainers(docker, `anvil.host=${hostId}`);
    },
  };
}

async function timed(args: string[], tool = 'scp'): Promise<number> {
  const started = process.hrtime.bigint();
  const run = await runTool(tool, args, undefined, 600_000);
  if (run.code !== 0) throw new Error(`${tool} failed (${run.code}): ${run.stderr}`);
  return Number(process.hrtime.bigint() - started) / 1e9;
}

/**
 * An ssh2 server (the library the relay is built on) that answers any exec by sending `bytes` from
 * memory, with the same host key type and client as the other figures. Closed by the caller.
 */
async function memoryServer(hostKey: string, bytes: number): Promise<{ port: number; close(): void }> {
  const block = Buffer.alloc(256 * 1024, 0x5a);
  const server = new ssh2.Server({ hostKeys: [readFileSync(hostKey)] }, (client) => {
    client.on('authentication', (context) => context.accept());
    client.on('session', (acceptSession) => {
      acceptSession().on('exec', (acceptExec) => {
        const channel = acceptExec();
        let sent = 0;
        const pump = () => {
          while (sent < bytes) {
            const piece = block.subarray(0, Math.min(block.length, bytes - sent));
            sent += piece.length;
            if (!channel.write(piece)) return void channel.once('drain', pump);
          }
          channel.exit(0);
          channel.end();
        };
        pump();
      });
    });
    client.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as AddressInfo).port, close: () => server.close() };
}

/**
 * The fastest of RUNS through the relay and through sshd, in seconds, their runs interleaved so that
 * both meet the same machine (other work on it shifts both alike).
 */
async function fastestOfEach(relay: string[], direct: string[], tool = 'scp'): Promise<[number, number]> {
  let relayFastest = Number.POSITIVE_INFINITY;
  let directFastest = Number.POSITIVE_INFINITY;
  for (let i = 0; i < RUNS; i++) {
    relayFastest = Math.min(relayFastest, await timed(relay, tool));
    directFastest = Math.min(directFastest, await timed(direct, tool));
  }
  return [relayFastest, directFastest];
}

/** Best of RUNS through the relay and through sshd, in MB/s. */
async function bestOfEach(relay: string[], direct: string[]): Promise<[number, number]> {
  const [relaySeconds, directSeconds] = await fastestOfEach(relay, direct);
  return [SIZE_MB / relaySeconds, SIZE_MB / directSeconds];
}

export async function runSshScpBench(): Promise<void> {
  const missing = missingPrerequisites('ssh-scp', {
    docker: true,
    programs: [
      { command: SSHD, debianPackage: 'openssh-server' },
      ...['ssh', 'scp', 'ssh-keygen'].map((command) => ({ command, debianPackage: 'openssh-client' })),
    ],
  });
  if (missing) {
    process.stdout.write(missing);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'anvil-bench-scp-'));
  const docker = testDocker();
  // In process, the agent's host metrics sampler spawns processes synchronously (systeminformation),
  // which stalls this event loop — the relay's — for the length of each spawn. Sampling once an hour
  // keeps that out of the transfer figures.
  const world: World =
    AGENT_LAYOUT === 'process'
      ? await startWorldWithAgentProcess(docker, join(dir, 'data'))
      : await startSshWorld(docker, join(dir, 'data'), { ANVIL_METRICS_SECONDS: '3600' });
  const sshd = { child: null as ReturnType<typeof spawn> | null };
  try {
    const key = keygen(dir, 'bench');
    const added = await world.t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/ssh-keys',
      headers: world.t.auth(),
      payload: { name: 'bench', public_key: key.pub },
    });
    if (added.statusCode !== 201) throw new Error(`adding the key failed: ${added.body}`);
    const cluster = await insertCluster(world.t, {
      ownerId: world.t.userId,
      accountId: world.t.accountId,
      hostId: world.hostId,
    });

    // OpenSSH sshd on loopback: temp host key, the same client key authorised, internal-sftp.
    const sshdPort = await freePort();
    const hostKey = keygen(dir, 'sshd_host');
    writeFileSync(join(dir, 'authorized_keys'), `${key.pub}\n`, { mode: 0o600 });
    const config = join(dir, 'sshd_config');
    writeFileSync(
      config,
      [
        `ListenAddress 127.0.0.1`,
        `HostKey ${hostKey.path}`,
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        'StrictModes no',
        'UsePAM no',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'PermitRootLogin prohibit-password',
        'PidFile none',
        'Subsystem sftp internal-sftp',
      ].join('\n'),
    );
    mkdirSync('/run/sshd', { recursive: true });
    sshd.child = spawn(SSHD, ['-D', '-e', '-f', config, '-p', String(sshdPort)], {
      stdio: 'ignore',
    });
    const user = process.env['USER'] ?? 'root';
    await waitFor(
      'sshd',
      async () =>
        (await runTool('ssh', ['-p', String(sshdPort), ...clientOptions(key), `${user}@127.0.0.1`, 'true']))
          .code === 0,
    );

    const file = join(dir, 'payload.bin');
    writeFileSync(file, randomBytes(SIZE_MB * 1024 * 1024));
    const relayTarget = `${cluster.id}@127.0.0.1`;
    const sshdTarget = `${user}@127.0.0.1`;
    const relayArgs = ['-P', String(world.port), ...clientOptions(key)];
    const sshdArgs = ['-P', String(sshdPort), ...clientOptions(key)];

    const bench = async (relay: string[], direct: string[], what: string) =>
      PARTS.has(what) ? bestOfEach(relay, direct) : ([Number.NaN, Number.NaN] as const);
    const figures = async (flags: string[], suffix: string) => {
      const [up, directUp] = await bench(
        [...flags, ...relayArgs, file, `${relayTarget}:/tmp/payload.bin`],
        [...flags, ...sshdArgs, file, `${sshdTarget}:${join(dir, 'sshd-copy.bin')}`],
        `upload${suffix}`,
      );
      // A download needs the uploaded file: uploaded once, untimed, when the upload is not measured.
      if (!PARTS.has(`upload${suffix}`)) {
        await timed([...flags, ...relayArgs, file, `${relayTarget}:/tmp/payload.bin`]);
        await timed([...flags, ...sshdArgs, file, `${sshdTarget}:${join(dir, 'sshd-copy.bin')}`]);
      }
      const [down, directDown] = await bench(
        [...flags, ...relayArgs, `${relayTarget}:/tmp/payload.bin`, join(dir, 'relay-back.bin')],
        [...flags, ...sshdArgs, `${sshdTarget}:${join(dir, 'sshd-copy.bin')}`, join(dir, 'sshd-back.bin')],
        `download${suffix}`,
      );
      return { up, directUp, down, directDown };
    };
    const sftpMode = await figures([], '');
    // Both outputs go to /dev/null through the shell, so neither side pays for a pipe into this process.
    const sshCat = (port: number, target: string, command: string) => [
      '-c',
      `exec ssh -p ${port} ${clientOptions(key).join(' ')} ${target} ${command} >/dev/null`,
    ];
    // `ssh cat` of the uploaded file through the relay (an exec through the agent's tunnel, no SFTP or scp
    // in the way) against sshd's: what the relay's exec path carries on its own.
    let cat: [number, number] | null = null;
    if (PARTS.has('cat')) {
      if (!PARTS.has('upload') && !PARTS.has('download')) {
        await timed([...relayArgs, file, `${relayTarget}:/tmp/payload.bin`]);
      }
      const [relaySeconds, directSeconds] = await fastestOfEach(
        sshCat(world.port, relayTarget, 'cat /tmp/payload.bin'),
        sshCat(sshdPort, sshdTarget, `cat ${file}`),
        'sh',
      );
      cat = [SIZE_MB / relaySeconds, SIZE_MB / directSeconds];
    }
    let small: [number, number] | null = null;
    if (PARTS.has('small')) {
      writeFileSync(join(dir, 'small.bin'), 'x');
      await timed([...relayArgs, join(dir, 'small.bin'), `${relayTarget}:/tmp/small.bin`]);
      await timed([...sshdArgs, join(dir, 'small.bin'), `${sshdTarget}:${join(dir, 'sshd-small.bin')}`]);
      const [relay, direct] = await fastestOfEach(
        [...relayArgs, `${relayTarget}:/tmp/small.bin`, join(dir, 'relay-small.back')],
        [...sshdArgs, `${sshdTarget}:${join(dir, 'sshd-small.bin')}`, join(dir, 'sshd-small.back')],
      );
      small = [relay * 1000, direct * 1000];
    }
    let transport: [number, number] | null = null;
    if (PARTS.has('transport')) {
      const memory = await memoryServer(hostKey.path, SIZE_MB * 1024 * 1024);
      try {
        const [relaySeconds, directSeconds] = await fastestOfEach(
          sshCat(memory.port, 'bench@127.0.0.1', 'send'),
          sshCat(sshdPort, sshdTarget, `cat ${file}`),
          'sh',
        );
        transport = [SIZE_MB / relaySeconds, SIZE_MB / directSeconds];
      } finally {
        memory.close();
      }
    }
    const scpMode = PARTS.has('upload-O') || PARTS.has('download-O') ? await figures(['-O'], '-O') : null;

    const line = (what: string, relay: number, direct: number) =>
      PARTS.has(what.replace(' ', ''))
        ? `  ${what.padEnd(13)} relay ${relay.toFixed(1).padStart(7)} MB/s   sshd ${direct.toFixed(1).padStart(7)} MB/s   ratio ${(relay / direct).toFixed(2)}\n`
        : '';
    process.stdout.write(
      `ssh-scp: ${SIZE_MB} MB file, best of ${RUNS} (interleaved), scp through the relay (agent ${AGENT_LAYOUT === 'process' ? 'in its own process' : "in the relay's process"}) vs OpenSSH sshd (load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')})\n`,
    );
    process.stdout.write(line('upload', sftpMode.up, sftpMode.directUp));
    process.stdout.write(line('download', sftpMode.down, sftpMode.directDown));
    if (scpMode) {
      process.stdout.write(line('upload -O', scpMode.up, scpMode.directUp));
      process.stdout.write(line('download -O', scpMode.down, scpMode.directDown));
    }
    if (cat) process.stdout.write(line('cat', cat[0], cat[1]));
    if (transport) {
      process.stdout.write(
        `  ${'transport'.padEnd(13)} ssh2 ${transport[0].toFixed(1).padStart(8)} MB/s   sshd ${transport[1].toFixed(1).padStart(7)} MB/s   ratio ${(transport[0] / transport[1]).toFixed(2)}  (ssh cat: an ssh2 server sending from memory, the ceiling of an ssh2 relay)\n`,
      );
    }
    if (small) {
      process.stdout.write(
        `  ${'1-byte down'.padEnd(13)} relay ${small[0].toFixed(0).padStart(7)} ms     sshd ${small[1].toFixed(0).padStart(7)} ms     (a session's fixed cost)\n`,
      );
    }
  } finally {
    sshd.child?.kill();
    await world.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await runSshScpBench();
