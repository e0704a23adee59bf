import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_TUNNEL_PATH, type CommandBody, TUNNEL_HEADERS, TUNNEL_UPGRADE } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TunnelService } from '../fleet/tunnels/service.ts';
import { createTestApp, type TestApp, testLogger } from '../testing/index.ts';
import { workloadSpecInput } from '../testing/workload-spec.ts';
import { TransferMeter } from './transfer-meter.ts';

type OpenTunnel = Extract<CommandBody, { name: 'open_tunnel' }>;

/**
 * Data transfer becomes usage records: bytes through a real raw tunnel (the agent's side scripted by the
 * test over a real socket, as in tunnels/service.test.ts) and through a dataset download over real HTTP.
 */
describe('data transfer metering', () => {
  let t: TestApp;
  let dataDir: string;
  let server: Server;
  let meter: TransferMeter;
  let service: TunnelService;
  let host: { hostId: string; credential: string };
  let clusterWorkload: string;
  let scriptedAgent: (command: OpenTunnel) => Promise<unknown>;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-transfer-'));
    t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir, ANVIL_TRANSFER_PRICE_PER_GB: '0.5' } });
    const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
    const registered = await t.context.fleet.hosts.register({
      joinToken: value,
      hostname: 'h',
      agentVersion: 't',
    });
    if (!registered.ok) throw new Error(registered.reason);
    host = { hostId: registered.hostId, credential: registered.credential };
    const workload = await t.context.fleet.workloads.create({
      hostId: host.hostId,
      kind: 'cluster',
      ownerAccountId: t.accountId,
      spec: workloadSpecInput({
        image: 'x',
        command: null,
        labels: { 'anvil.cluster': 'clu_metered', 'anvil.account': t.accountId },
      }),
    });
    clusterWorkload = workload.id;
    // A long interval: the test flushes when it wants the records, so nothing depends on timing.
    meter = new TransferMeter({
      db: t.database.db,
      clock: t.context.clock,
      logger: testLogger(),
      pricePerGb: 0.5,
      flushIntervalMs: 3_600_000,
    });
    service = new TunnelService({
      agents: { sendCommand: async (_hostId, command) => scriptedAgent(command as OpenTunnel) },
      workloads: t.context.fleet.workloads,
      hosts: t.context.fleet.hosts,
      meter,
      openTimeoutMs: 5_000,
    });
    server = createServer((_req, res) => res.end());
    server.on('upgrade', (req, socket, head) => service.handleUpgrade(req, socket, head));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });

  afterAll(async () => {
    service?.closeAll();
    await meter?.stop();
    await new Promise((resolve) => server?.close(resolve));
    await t?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  /** The agent's raw tunnel connection, after the 101. */
  function dialRaw(command: OpenTunnel): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port });
      socket.on('error', reject);
      socket.write(
        `GET ${AGENT_TUNNEL_PATH} HTTP/1.1\r\nHost: cp\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_UPGRADE}\r\n` +
          `Authorization: Bearer ${host.credential}\r\n${TUNNEL_HEADERS.hostId}: ${host.hostId}\r\n` +
          `${TUNNEL_HEADERS.tunnelId}: ${command.tunnelId}\r\n${TUNNEL_HEADERS.token}: ${command.token}\r\n\r\n`,
      );
      let head = Buffer.alloc(0);
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk]);
        if (head.indexOf('\r\n\r\n') < 0) return;
        socket.off('data', onData);
        socket.pause();
        socket.allowHalfOpen = true;
        resolve(socket);
      };
      socket.on('data', onData);
    });
  }

  const transferRecords = (resourceId: string) =>
    t.database.db.prisma.usageRecord.findMany({ where: { kind: 'transfer', resourceId } });

  it('meters both directions of a tunnel, while it is open and when it closes, against the workload’s cluster', async () => {
    let agentSide!: Socket;
    scriptedAgent = async (command) => {
      agentSide = await dialRaw(command);
      return { tunnelId: command.tunnelId };
    };
    const stream = await service.openStream(clusterWorkload, 8080);
    const upload = Buffer.alloc(300_000, 1);
    const received: Buffer[] = [];
    agentSide.on('data', (chunk: Buffer) => received.push(chunk));
    agentSide.resume();
    stream.write(upload);
    await expect.poll(() => Buffer.concat(received).length).toBe(upload.length);

    // Still open: a flush bills what passed so far.
    await meter.flush();
    const during = await transferRecords('clu_metered');
    expect(during).toHaveLength(1);
    expect(during[0]).toMatchObject({
      accountId: t.accountId,
      resourceType: 'cluster',
      unit: 'GB',
      metadata: { bytes: upload.length, channel: 'stream' },
    });
    expect(during[0]!.quantity).toBeCloseTo(upload.length / 1e9, 12);
    expect(during[0]!.cost).toBeCloseTo((upload.length / 1e9) * 0.5, 12);

    const reply = Buffer.alloc(200_000, 2);
    agentSide.end(reply);
    stream.resume();
    stream.end();
    await new Promise((resolve) => stream.once('close', resolve));
    await meter.flush();
    const after = await transferRecords('clu_metered');
    const bytes = after.reduce((sum, r) => sum + Number((r.metadata as { bytes: number }).bytes), 0);
    // Nothing counted twice, nothing of the upgrade's own head counted.
    expect(bytes).toBe(upload.length + reply.length);
    // An idle flush writes nothing more.
    await meter.flush();
    expect(await transferRecords('clu_metered')).toHaveLength(after.length);
  });

  it('meters a dataset download against the dataset', async () => {
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
    const auth = { authorization: `Bearer ${t.ownerKey}` };
    const created = await fetch(`${base}/v2/training/datasets`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'metered', type: 'text', format: 'jsonl' }),
    });
    expect(created.status).toBe(201);
    const dataset = (await created.json()) as { id: string; uploadToken: string };
    const content = Array.from({ length: 2000 }, (_, i) => `{"text":"line ${i}"}\n`).join('');
    const put = await fetch(`${base}/v2/training/uploads/datasets/${dataset.id}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${dataset.uploadToken}`, 'content-type': 'application/octet-stream' },
      body: content,
    });
    expect(put.status).toBe(202);
    await t.context.datasets.processor.idle();

    const download = await fetch(`${base}/v2/training/datasets/${dataset.id}/download`, { headers: auth });
    expect(download.status).toBe(200);
    expect((await download.text()).length).toBe(content.length);
    await expect
      .poll(async () => {
        await t.context.transfer.flush();
        return (await transferRecords(dataset.id)).length;
      })
      .toBe(1);
    const [record] = await transferRecords(dataset.id);
    expect(record).toMatchObject({
      resourceType: 'dataset',
      metadata: { bytes: Buffer.byteLength(content), channel: 'dataset_download' },
    });
  });
});
