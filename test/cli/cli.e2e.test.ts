import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';
import { type ClusterFleet, startClusterFleet } from '../clusters/harness.ts';
import { workerCommand } from '../endpoints/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { freePort, type Keypair, keygen, runTool, waitFor } from '../ssh/fixtures.ts';
import { builtCli, type CliRun, cliProcess } from './run-cli.ts';

// biome-ignore lint/suspicious/noExplicitAny: the CLI's JSON answers are read field by field in these tests.
type Json = any;

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * The built CLI (cli/dist/anvil.mjs, run by node alone) as a user runs it, against the real control plane on
 * loopback, its SSH relay, and a real agent running containers in Docker (simulated 2xH100, the only fake).
 * One cluster and one endpoint worker, shared by the file.
 */
describe.skipIf(!dockerOrFail('test/cli/cli.e2e.test.ts'))('anvil CLI end to end', () => {
  let fleet: ClusterFleet;
  let t: TestApp;
  let dir: string;
  let bundle: string;
  let env: Record<string, string>;
  let key: Keypair;
  let sshOptions: string[];
  const children: ChildProcess[] = [];

  const anvil = (argv: string[], timeoutMs = 240_000): Promise<CliRun> =>
    cliProcess(bundle, argv, env, { timeoutMs });
  const ok = async (argv: string[]): Promise<CliRun> => {
    const run = await anvil(argv);
    expect(run.code, `anvil ${argv.join(' ')}: ${run.stderr}`).toBe(0);
    return run;
  };
  /** A long-running CLI command (port-forward, logs -f): its output so far, stopped in afterAll at the latest. */
  const background = (argv: string[]) => {
    const child = spawn(process.execPath, [bundle, ...argv], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    const stop = () => {
      child.kill('SIGTERM');
      return exited;
    };
    return { output: () => out, stop };
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'anvil-cli-e2e-'));
    ({ bundle } = await builtCli(dir));
    fleet = await startClusterFleet({ ANVIL_SSH_HOST: '127.0.0.1', ANVIL_DATA_DIR: join(dir, 'data') });
    t = fleet.t;
    await t.context.ssh.listen(0, '127.0.0.1');
    await t.context.clusters.prices.set({ H100: 3.6 });
    await call(t, {
      method: 'POST',
      url: '/v2/auth/temporary-boost',
      payload: { multiplier: 10, duration: '1h', reason: 'tests' },
    });
    key = keygen(dir, 'id_ed25519');
    const added = await call(t, {
      method: 'POST',
      url: '/v2/accounts/profile/ssh-keys',
      payload: { name: 'laptop', public_key: key.pub },
    });
    expect(added.statusCode, added.body).toBe(201);
    sshOptions = ['-i', key.path];
    for (const option of ['StrictHostKeyChecking=no', 'UserKnownHostsFile=/dev/null', 'BatchMode=yes']) {
      sshOptions.push('-o', option);
    }
    for (const option of ['IdentitiesOnly=yes', 'IdentityAgent=none', 'LogLevel=ERROR'])
      sshOptions.push('-o', option);
    env = { HOME: join(dir, 'home'), PATH: process.env['PATH'] ?? '' };
    const address = t.app.server.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    await ok(['login', '--url', url, '--key', t.ownerKey]);
  }, 400_000);

  afterAll(async () => {
    for (const child of children) child.kill('SIGKILL');
    await fleet?.close();
    rmSync(dir, { recursive: true, force: true });
  }, 240_000);

  it('creates a cluster, reaches it by name with ssh, ssh-config + scp and port-forward, and reads its logs', {
    timeout: 600_000,
  }, async () => {
    const command =
      'echo hello-from-cli-log; mkdir -p /www && echo served > /www/index.html && httpd -p 8080 -h /www; ' +
      "trap 'exit 0' TERM; while true; do sleep 1; done";
    const created = await ok([
      ...['clusters', 'create', '--name', 'cli-dev', '--image', BUSYBOX_IMAGE, '--gpu-type', 'H100'],
      ...['--cpu', '1', '--memory', '1', '--storage', '1', '--ssh', '--command', command, '--wait', '--json'],
    ]);
    const cluster: Json = JSON.parse(created.stdout);
    expect(cluster).toMatchObject({
      name: 'cli-dev',
      status: 'running',
      ssh_connection: { host: '127.0.0.1' },
    });
    // Completion offers the cluster's name where a command takes a cluster.
    expect((await ok(['__complete', 'ssh'])).stdout.split('\n')).toContain('cli-dev');
    const list = await ok(['clusters', 'list']);
    expect(list.stdout).toMatch(
      new RegExp(`\\n${cluster.id}\\s+cli-dev\\s+running\\s+1xH100\\s+\\S+\\s+yes\\s`),
    );

    // anvil ssh runs the system ssh against the relay: the remote command's output and exit status.
    const ssh = await anvil(['ssh', ...sshOptions, 'cli-dev', 'echo out; cat /www/index.html; exit 3']);
    expect(ssh.code, ssh.stderr).toBe(3);
    expect(ssh.stdout).toBe('out\nserved\n');

    // ssh-config: plain ssh and scp reach the cluster by its name.
    const config = await ok(['ssh-config', '-i', key.path]);
    expect(config.stdout).toContain(`Host cli-dev ${cluster.id}\n`);
    const configFile = join(dir, 'ssh_config');
    writeFileSync(configFile, config.stdout);
    const plain = ['-F', configFile, '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null'];
    const payload = randomBytes(64 * 1024);
    writeFileSync(join(dir, 'payload.bin'), payload);
    const scp = await runTool('scp', [
      ...plain,
      '-o',
      'BatchMode=yes',
      join(dir, 'payload.bin'),
      'cli-dev:/tmp/payload.bin',
    ]);
    expect(scp.code, scp.stderr).toBe(0);
    const back = await runTool('ssh', [
      ...plain,
      '-o',
      'BatchMode=yes',
      'cli-dev',
      'sha256sum /tmp/payload.bin',
    ]);
    expect(back.stdout.toString().split(' ')[0]).toBe(sha256(payload));

    // port-forward: a local listener whose connections reach the container's port 8080.
    const local = await freePort();
    const forward = background(['port-forward', ...sshOptions, 'cli-dev', `${local}:8080`]);
    const page = await waitFor(
      'forwarded page',
      async () => {
        const response = await fetch(`http://127.0.0.1:${local}/index.html`).catch(() => null);
        return response?.ok ? response.text() : null;
      },
      60_000,
    );
    expect(page).toBe('served\n');
    await forward.stop();

    // logs: the stored lines, then -f follows new ones over Server-Sent Events.
    await waitFor(
      'log line stored',
      async () => (await ok(['logs', 'cli-dev'])).stdout.includes('hello-from-cli-log') || null,
    );
    const follow = background(['logs', 'cli-dev', '-f', '--tail', '5']);
    await waitFor(
      'history streamed',
      async () => follow.output().includes('hello-from-cli-log') || null,
      60_000,
    );
    expect((await anvil(['ssh', ...sshOptions, 'cli-dev', 'echo followed-line > /proc/1/fd/1'])).code).toBe(
      0,
    );
    await waitFor('new line streamed', async () => follow.output().includes('followed-line') || null, 60_000);
    await follow.stop();
  });

  it('uploads datasets: one PUT, multipart, and a multipart upload resumed after an interruption', {
    timeout: 300_000,
  }, async () => {
    const line = (i: number) =>
      `${JSON.stringify({ prompt: `question ${i}`, completion: 'x'.repeat(200) })}\n`;
    const small = join(dir, 'small.jsonl');
    writeFileSync(small, Array.from({ length: 20 }, (_, i) => line(i)).join(''));
    const one: Json = JSON.parse((await ok(['datasets', 'upload', small, '--wait', '--json'])).stdout);
    expect(one).toMatchObject({
      name: 'small.jsonl',
      status: 'ready',
      checksum: sha256(readFileSync(small)),
    });

    // 6 MiB in 5 MiB parts: two parts.
    const big = join(dir, 'big.jsonl');
    writeFileSync(big, Array.from({ length: 26_000 }, (_, i) => line(i)).join(''));
    const bytes = readFileSync(big);
    const args = ['--multipart-above', '1MiB', '--part-size', '5MiB', '--wait', '--json'];
    const multi: Json = JSON.parse((await ok(['datasets', 'upload', big, '--name', 'big', ...args])).stdout);
    expect(multi).toMatchObject({ status: 'ready', checksum: sha256(bytes) });
    expect(multi.versions.at(-1)).toMatchObject({ source: 'multipart', size: bytes.length });

    // An upload interrupted after its first part: the CLI sends only the part the server lacks.
    const dataset = await call(t, {
      method: 'POST',
      url: '/v2/training/datasets',
      payload: { name: 'resumed', type: 'text', format: 'jsonl' },
    });
    const datasetId = dataset.json().id as string;
    const base = `/v2/training/uploads/datasets/${datasetId}/multipart`;
    const started = await call(t, {
      method: 'POST',
      url: base,
      payload: { filename: 'big.jsonl', size: bytes.length },
    });
    expect(started.statusCode, started.body).toBe(201);
    const uploadId = started.json().uploadId as string;
    const part = await t.app.inject({
      method: 'PUT',
      url: `${base}/${uploadId}/parts/1`,
      headers: { ...t.auth(), 'content-type': 'application/octet-stream' },
      payload: bytes.subarray(0, 5 * 1024 * 1024),
    });
    expect(part.statusCode, part.body).toBe(200);
    const resumed = await anvil([
      'datasets',
      'upload',
      big,
      '--dataset',
      datasetId,
      '--resume',
      uploadId,
      ...args,
    ]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toContain(`resuming upload ${uploadId}: 1 of 2 parts already uploaded`);
    expect(JSON.parse(resumed.stdout)).toMatchObject({
      id: datasetId,
      status: 'ready',
      checksum: sha256(bytes),
    });
  });

  it('creates an endpoint and runs jobs on it, synchronously and not; a failed job exits 9; worker logs; stop, start and delete', {
    timeout: 600_000,
  }, async () => {
    const body = JSON.stringify({ command: await workerCommand(), configuration: { timeoutSeconds: 60 } });
    const created: Json = JSON.parse(
      (
        await ok([
          ...['endpoints', 'create', '--name', 'echo', '--image', BUSYBOX_IMAGE, '--gpu-type', 'H100'],
          ...['--workers', '1', '--max-concurrency', '1', '--data', body, '--wait', '--json'],
        ])
      ).stdout,
    );
    expect(created).toMatchObject({ name: 'echo', status: 'active' });
    expect((await ok(['endpoints', 'list'])).stdout).toMatch(
      new RegExp(`\\n${created.id}\\s+echo\\s+active\\s+1xH100\\s+1/1\\s`),
    );

    const sync = await ok(['run', created.id, '{"prompt":"hi"}', '--sync', '--json']);
    const job: Json = JSON.parse(sync.stdout);
    expect(job).toMatchObject({ status: 'COMPLETED', output: { echo: { prompt: 'hi' } } });
    const plain = await ok(['run', created.id, '{"prompt":"hi"}', '--sync']);
    expect(JSON.parse(plain.stdout)).toMatchObject({ echo: { prompt: 'hi' } });
    const queued = await ok(['run', created.id, '{"prompt":"later"}']);
    expect(queued.stdout).toMatch(/^\S+ IN_QUEUE\n$/);
    const failed = await anvil(['run', created.id, '{"op":"fail"}', '--sync']);
    expect(failed.code).toBe(9);
    expect(failed.stdout).toMatch(/ FAILED: "boom"\n$/);

    // The worker wrote "job <id> on <worker>" to stderr: the worker's logs show it.
    const worker = job.output.worker as string;
    await waitFor(
      'worker log',
      async () => (await ok(['logs', worker])).stdout.includes(`job ${job.id} on ${worker}`) || null,
    );

    expect((await ok(['endpoints', 'delete', created.id, '--yes'])).stdout).toContain(
      `${created.id} deleted`,
    );
    // The cluster stops (its volume kept) and starts again.
    expect(JSON.parse((await ok(['clusters', 'stop', 'cli-dev', '--wait', '--json'])).stdout)).toMatchObject({
      status: 'stopped',
    });
    expect((await ok(['clusters', 'start', 'cli-dev', '--wait'])).stdout).toMatch(/^cluster_\w+ running\n$/);
    const gone = await anvil(['clusters', 'delete', 'cli-dev', '--yes', '--wait', '--force']);
    expect(gone.code, gone.stderr).toBe(0);
    const after = await anvil(['clusters', 'get', 'cli-dev']);
    expect(after.code).toBe(5);
  });
});
