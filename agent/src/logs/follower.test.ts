import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { LogEntry } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { ensureBusyboxImage } from '../../../test/fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../../../test/fixtures/images/docker.ts';
import { type ContainerRuntime, createContainerRuntime } from '../docker/runtime.ts';
import { LogBuffer } from './buffer.ts';
import { LogCursors } from './cursors.ts';
import { followContainer } from './follower.ts';
import { LogManager } from './manager.ts';

const run = randomBytes(4).toString('hex');
const hostId = `host_logs_${run}`;

/** Docker's multiplexed framing: stream byte (1 stdout, 2 stderr), three zeros, big-endian length. */
function frame(stream: 1 | 2, text: string): Buffer {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

describe('following a container that stops', () => {
  it('reads once more after the stream ends, for a last line Docker left out (moby/moby#43860)', async () => {
    const t = (n: number) => `2026-01-01T00:00:0${n}.000000000Z`;
    // The follow ended at exit without the partial last line; the stored log has it.
    const streams = [
      [frame(1, `${t(1)} one\n`), frame(2, `${t(2)} two\n`)],
      [frame(1, `${t(1)} one\n`), frame(2, `${t(2)} two\n`), frame(1, `${t(3)} no newline`)],
    ];
    const since: number[] = [];
    const runtime = {
      followLogs: async (_id: string, sinceSeconds: number) => {
        since.push(sinceSeconds);
        return Readable.from(streams.shift() ?? []);
      },
    } as unknown as ContainerRuntime;
    const entries: LogEntry[] = [];
    const last = await followContainer({
      runtime,
      containerId: 'c1',
      workloadId: 'w1',
      after: { stdout: null, stderr: null },
      onEntry: (e) => entries.push(e),
      now: Date.now,
      signal: new AbortController().signal,
    });
    expect(entries.map((e) => `${e.stream} ${e.line}`)).toEqual([
      'stdout one',
      'stderr two',
      'stdout no newline',
    ]);
    expect(last).toEqual({ stdout: t(3), stderr: t(2) });
    // The second read starts at the cursor's second, not from the beginning.
    expect(since).toEqual([0, Math.floor(Date.parse('2026-01-01T00:00:01Z') / 1000)]);
  });

  it('ends quietly when the container was removed before the second read', async () => {
    let calls = 0;
    const runtime = {
      followLogs: async () => {
        calls += 1;
        if (calls === 1) return Readable.from([]);
        throw new Error('follow logs of c1: no such container', { cause: { statusCode: 404 } });
      },
    } as unknown as ContainerRuntime;
    const last = await followContainer({
      runtime,
      containerId: 'c1',
      workloadId: 'w1',
      after: { stdout: null, stderr: null },
      onEntry: () => {},
      now: Date.now,
      signal: new AbortController().signal,
    });
    expect(last).toEqual({ stdout: null, stderr: null });
    expect(calls).toBe(2);
  });
});

describe.skipIf(!dockerOrFail('agent/src/logs/follower.test.ts'))(
  'following container logs from the real Docker engine',
  () => {
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
      // The follower ends with the container's log stream.
      const followed = () =>
        vi.waitFor(() => expect(manager.following).toHaveLength(0), { timeout: 15_000, interval: 50 });
      await docker.getContainer(id).wait();
      await followed();
      await runtime.start(id);
      manager.sync([{ containerId: id, workloadId }]);
      await docker.getContainer(id).wait();
      await followed();
      manager.stop();
      const lines = buffer.take(1_000_000, 100).map((e) => e.line);
      expect(lines).toHaveLength(2);
      expect(new Set(lines).size).toBe(2);
      expect(lines.every((l) => l.startsWith('start '))).toBe(true);
      // It stopped and its lines were taken: the buffer names it as read to the end.
      expect(buffer.takeEnded()).toEqual([{ workloadId, containerId: id }]);
    });
  },
);
