import type { LogEntry } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentOptions } from '../../agent/src/agent.ts';
import { LogBuffer } from '../../agent/src/logs/buffer.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';
import { FakeControlPlane } from './fake-control-plane.ts';
import { workloadSpec } from './fixtures.ts';
import { type RunningAgent, startAgent } from './harness.ts';

describe.skipIf(!dockerOrFail('test/agent/faults.e2e.test.ts'))('agent under faults', () => {
  let docker: Dockerode;
  let cp: FakeControlPlane;
  const agents: RunningAgent[] = [];
  const hostIds: string[] = [];

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
  });

  afterAll(async () => {
    for (const agent of agents) await agent.stop().catch(() => {});
    for (const hostId of hostIds) await removeTestContainers(docker, `anvil.host=${hostId}`);
  });

  async function connectedAgent(options: Partial<AgentOptions> = {}) {
    cp = await FakeControlPlane.start({ heartbeatSeconds: 1, metricsSeconds: 1 });
    const agent = await startAgent(docker, {
      controlPlaneUrl: cp.url,
      joinToken: cp.createJoinToken(),
      ...options,
    });
    agents.push(agent);
    const hostId = await cp.waitFor('registration', () => cp.hostIds()[0]);
    hostIds.push(hostId);
    await cp.waitFor('hello', () => cp.host(hostId).connected);
    return { agent, hostId };
  }

  it('ignores garbage and unknown frames from the control plane, staying connected', async () => {
    const { hostId } = await connectedAgent();
    cp.sendRaw(hostId, 'garbage');
    cp.sendRaw(hostId, '{"v":1,"type":"format_disk","id":"x"}');
    cp.sendRaw(hostId, '{"v":1,"type":"desired_state","id":"y","generation":"one"}');
    expect(await cp.command(hostId, { name: 'ping' })).toMatchObject({ ok: true });
    expect(cp.host(hostId).connections).toBe(1);
    await cp.close();
  });

  it('redials when heartbeats stop being acknowledged', async () => {
    const { hostId } = await connectedAgent();
    cp.ackHeartbeats = false;
    await cp.waitFor('redial', () => cp.host(hostId).connections === 1 && !cp.host(hostId).connected, 15_000);
    cp.ackHeartbeats = true;
    await cp.waitFor(
      'reconnect',
      () => cp.host(hostId).connections === 2 && cp.host(hostId).connected,
      15_000,
    );
    await cp.close();
  });

  it('applies intervals the control plane sets', async () => {
    const { hostId } = await connectedAgent();
    expect(
      await cp.command(hostId, { name: 'set_intervals', heartbeatSeconds: 2, metricsSeconds: 3 }),
    ).toMatchObject({
      ok: true,
      result: { heartbeatSeconds: 2, metricsSeconds: 3 },
    });
    expect(await cp.command(hostId, { name: 'resync' })).toMatchObject({ ok: true });
    await cp.waitFor('inventory update', () => cp.messages('inventory', hostId).length === 1);
    await cp.close();
  });

  it('buffers logs while disconnected, within its bound, and reports what it dropped', async () => {
    // The agent's log buffer, watched: the container's last line in it means every line was read.
    let lastLineRead = false;
    const logBuffer = new (class extends LogBuffer {
      override push(entry: LogEntry): void {
        super.push(entry);
        if (entry.line === 'line-499') lastLineRead = true;
      }
    })(16 * 1024);
    const { hostId } = await connectedAgent({ logBuffer });
    const spec = workloadSpec(`drop-${hostId.slice(-8)}`, {
      command: [
        'sh',
        '-c',
        'sleep 3; i=0; while [ $i -lt 500 ]; do echo line-$i; i=$((i+1)); done; sleep 3600',
      ],
    });
    await cp.setDesired(hostId, [spec]);
    await cp.waitFor('running', () =>
      cp
        .messages('actual_state', hostId)
        .flatMap((m) => m.workloads)
        .some((w) => w.phase === 'running'),
    );
    // The control plane goes away before the container speaks.
    cp.refuseConnections = true;
    cp.dropConnection(hostId);
    await cp.waitFor('every line read while disconnected', () => lastLineRead, 30_000);
    cp.refuseConnections = false;

    const lines = () =>
      cp
        .messages('log_batch', hostId)
        .flatMap((b) => b.entries)
        .filter((e) => e.line.startsWith('line-'));
    const dropped = () =>
      cp
        .messages('logs_dropped', hostId)
        .flatMap((m) => m.losses)
        .reduce((n, l) => n + l.lines, 0);
    await cp.waitFor('every line accounted for', () => lines().length + dropped() === 500, 20_000);
    expect(dropped()).toBeGreaterThan(0);
    // The oldest lines went first; the newest arrived.
    expect(lines().at(-1)?.line).toBe('line-499');
    const loss = cp.messages('logs_dropped', hostId)[0]?.losses[0];
    expect(loss).toMatchObject({
      workloadId: spec.workloadId,
      firstTs: expect.any(String),
      lastTs: expect.any(String),
    });
    await cp.close();
  });
});
