import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LogEntry } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { ensureBusyboxImage } from '../../../test/fixtures/images/busybox.ts';
import { dockerAvailable, removeTestContainers, testDocker } from '../../../test/fixtures/images/docker.ts';
import { createContainerRuntime } from '../docker/runtime.ts';
import { LogBuffer } from './buffer.ts';
import { LogCursors } from './cursors.ts';
import { followContainer } from './follower.ts';
import { LogManager } from './manager.ts';

const run = randomBytes(4).toString('hex');
const hostId = `host_logs_${run}`;

describe.skipIf(!dockerAvailable())('following container logs from the real Docker engine', () => {
  let docker: Dockerode;
  let dir: string;

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
    dir = await mkdtemp(join(tmpdir(), 'anvil-logs-'));
  });

  afterAll(async () => {
    await removeTestContainers(docker, `anvil.host=${hostId}`);
    await rm(dir, { recursive: true, force: true });
  });

  async function startContainer(name: string, script: string) {
    const runtime = createContainerRuntime(docker);
    const spec = workloadSpec(`logs-${run}-${name}`, { command: ['sh', '-c', script] });
    const id = await runtime.create(spec, { hostId, volumeRoot: dir, gpuMode: 'env-only' });
    await runtime.start(id);
    return { runtime, id, workloadId: spec.workloadId };
  }

  it('reads stdout and stderr, demultiplexed, timestamped, in order, until the container stops', async () => {
    const { runtime, id, workloadId } = await startContainer(
      'order',
      'echo one; echo two >&2; echo three; printf "no newline"',
    );
    const entries: LogEntry[] = [];
    const last = await followContainer({
      runtime,
      containerId: id,
      workloadId,
      after: { stdout: null, stderr: null },
      onEntry: (e) => entries.push(e),
      now: Date.now,
      signal: new AbortController().signal,
    });
    // Each stream in order; Docker copies the two concurrently, so their interleaving may vary.
    const stdout = entries.filter((e) => e.stream === 'stdout');
    expect(stdout.map((e) => e.line)).toEqual(['one', 'three', 'no newline']);
    expect(entries.filter((e) => e.stream === 'stderr').map((e) => e.line)).toEqual(['two']);
    expect(entries.every((e) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$/.test(e.ts))).toBe(true);
    expect([...stdout.map((e) => e.ts)].sort()).toEqual(stdout.map((e) => e.ts));
    expect(last).toEqual({
      stdout: stdout.at(-1)?.ts,
      stderr: entries.find((e) => e.stream === 'stderr')?.ts,
    });
    expect(entries[0]).toMatchObject({ workloadId, containerId: id });

    // Resuming after the first stdout line (and all of stderr) yields only what came after it.
    const resumed: LogEntry[] = [];
    await followContainer({
      runtime,
      containerId: id,
      workloadId,
      after: { stdout: stdout[0]!.ts, stderr: last.stderr },
      onEntry: (e) => resumed.push(e),
      now: Date.now,
      signal: new AbortController().signal,
    });
    expect(resumed.map((e) => e.line)).toEqual(['three', 'no newline']);
  });

  it('keeps following across a container restart without repeating a line', async () => {
    const { runtime, id, workloadId } = await startContainer(
      'restart',
      'echo "start $(cat /proc/sys/kernel/random/uuid)"; sleep 0.5',
    );
    const buffer = new LogBuffer(1_000_000);
    const cursors = await LogCursors.open(dir, pino({ level: 'silent' }));
    const manager = new LogManager({
      runtime,
      buffer,
      cursors,
      logger: pino({ level: 'silent' }),
      now: Date.now,
    });
    manager.sync([{ containerId: id, workloadId }]);
    await docker.getContainer(id).wait();
    for (let i = 0; i < 50 && manager.following.length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    await runtime.start(id);
    manager.sync([{ containerId: id, workloadId }]);
    await docker.getContainer(id).wait();
    for (let i = 0; i < 50 && manager.following.length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    manager.stop();
    const lines = buffer.take(1_000_000, 100).map((e) => e.line);
    expect(lines).toHaveLength(2);
    expect(new Set(lines).size).toBe(2);
    expect(lines.every((l) => l.startsWith('start '))).toBe(true);
  });
});
