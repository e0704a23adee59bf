import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { type RealEngine, realEngine, testReconciler } from '../../../test/agent/real-engine.ts';
import { dockerOrFail } from '../../../test/fixtures/images/docker.ts';
import { createContainerRuntime } from '../docker/runtime.ts';

/** The first bytes a TCP server on 127.0.0.1:port sends after a request, or the connection error. */
function fetchRaw(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.end('GET / HTTP/1.0\r\n\r\n'));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString()));
    socket.on('error', (err) => resolve(String(err)));
  });
}

describe.skipIf(!dockerOrFail('agent/src/reconcile/direct-ports.test.ts'))(
  'direct ports (ANVIL_DIRECT_PORTS_ADDRESS) on the real Docker engine',
  () => {
    const run = randomBytes(4).toString('hex');
    const hostId = `host_dp_${run}`;
    let engine: RealEngine;

    beforeAll(async () => {
      engine = await realEngine();
    });

    afterAll(async () => {
      await engine?.remove(`anvil.host=${hostId}`);
    });

    it('publishes on that address only, from the range, and reports the port Docker published', {
      timeout: 120_000,
    }, async () => {
      const first = 41_000 + (process.pid % 500) * 10;
      const { docker, volumeRoot } = engine;
      const reconciler = testReconciler({
        runtime: createContainerRuntime(docker),
        hostId,
        volumeRoot,
        directPorts: { address: '127.0.0.1', first, last: first + 9 },
      });
      const id = `dp-${run}`;
      reconciler.setDesired(1, [
        workloadSpec(id, {
          command: ['sh', '-c', 'mkdir -p /www && echo direct > /www/index.html && httpd -f -p 8080 -h /www'],
          // What a spec asks for is not honoured: the operator's address and range decide.
          ports: [{ containerPort: 8080, protocol: 'tcp', hostPort: 80, hostIp: '0.0.0.0' }],
        }),
      ]);
      await reconciler.idle();
      const status = reconciler.report().workloads[0]!;
      expect(status.phase).toBe('running');
      expect(status.ports).toHaveLength(1);
      const [port] = status.ports;
      expect(port?.hostIp).toBe('127.0.0.1');
      expect(port?.hostPort).toBeGreaterThanOrEqual(first);
      expect(port?.hostPort).toBeLessThanOrEqual(first + 9);
      const details = await docker.getContainer(status.containerId!).inspect();
      expect(details.NetworkSettings.Ports['8080/tcp']).toEqual([
        { HostIp: '127.0.0.1', HostPort: String(port?.hostPort) },
      ]);
      await vi.waitFor(async () => expect(await fetchRaw(port!.hostPort)).toContain('direct'), {
        timeout: 20_000,
        interval: 200,
      });
      reconciler.setDesired(2, []);
      await reconciler.idle();
      reconciler.stop();
    });
  },
);
