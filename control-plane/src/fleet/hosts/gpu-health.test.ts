import { newId } from '@anvil/shared';
import { createMessage, type GpuMetrics, type Inventory } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { addMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import {
  connectGpuAgent,
  type GpuTestAgent,
  gpuHealth,
  gpuSample,
  healthReason,
  realGpuInventory,
} from '../../testing/gpu-agent.ts';
import { waitFor } from '../../testing/wait.ts';

/**
 * GPU health, the NVIDIA runtime gate and the board catalogue on the control plane's side, driven the way
 * real agents drive it: hand-written agents register and say hello over the real WebSocket with an
 * inventory of real (not simulated) GPUs, send metric samples carrying NVML health, and the API is called
 * over real HTTP. No container runs (no agent acts on what is placed): clusters stay `starting`.
 */

// The first test app of a process boots PGlite and compiles the schema: on a shared machine, minutes.
vi.setConfig({ testTimeout: 240_000 });

// biome-ignore lint/suspicious/noExplicitAny: JSON answers of many shapes, read field by field.
type Body = Record<string, any>;

const METRICS_TOKEN = 'metrics-token-for-gpu-health-tests';

describe('GPU health, NVIDIA runtime gate and board catalogue over the agent protocol and HTTP', () => {
  let t: TestApp;
  let url: string;
  const agents: GpuTestAgent[] = [];

  beforeAll(async () => {
    t = await createTestApp({
      env: { ANVIL_METRICS_TOKEN: METRICS_TOKEN, ANVIL_HOST_GRACE_SECONDS: '3600' },
    });
    url = await t.app.listen({ host: '127.0.0.1', port: 0 });
  });

  afterAll(async () => {
    for (const a of agents) a.close();
    await t?.close();
  });

  async function http(
    method: string,
    path: string,
    body?: unknown,
    key = t.ownerKey,
  ): Promise<{ status: number; json: Body }> {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: text.startsWith('{') ? JSON.parse(text) : { text } };
  }

  async function connect(inv: Inventory): Promise<GpuTestAgent> {
    const agent = await connectGpuAgent(t, url, inv);
    agents.push(agent);
    return agent;
  }

  const sendMetrics = (agent: GpuTestAgent, gpus: GpuMetrics[]) => agent.sendGpus(gpus);

  async function hostDetail(hostId: string): Promise<Body> {
    const res = await http('GET', `/v2/admin/hosts/${hostId}`);
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    return res.json['host'];
  }

  const createCluster = (gpuType: string, gpuCount = 1) =>
    http('POST', '/v1/clusters', {
      name: `c-${newId('wl').slice(-8)}`,
      docker_image: 'busybox',
      gpu_type: gpuType,
      gpu_count: gpuCount,
      cpu_cores: 2,
      memory_gb: 4,
      storage_gb: 10,
    });

  async function clusterRow(id: string) {
    return t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
  }

  it('a host with real GPUs but no NVIDIA runtime is offered no GPU work, and says how to fix it', async () => {
    const inv = realGpuInventory([{ name: 'NVIDIA L40S' }], false);
    const agent = await connect(inv);

    const refused = await createCluster('L40S');
    expect(refused.status, JSON.stringify(refused.json)).toBe(422);
    expect(refused.json['error']?.code ?? refused.json['code']).toBe('INSUFFICIENT_RESOURCES');

    const host = await hostDetail(agent.hostId);
    expect(host['gpuWork']).toMatchObject({ offered: false });
    expect(host['gpuWork'].reason).toContain('no NVIDIA container runtime');
    expect(host['gpuWork'].reason).toContain('nvidia-container-toolkit');
    expect(host['gpuWork'].reason).toContain('nvidia-ctk runtime configure --runtime=docker');
    expect(host['gpuWork'].reason).toContain('restart docker');
    expect(host['gpuDevices'][0]).toMatchObject({ boardType: 'L40S', gpuType: 'L40S', schedulable: false });

    // The operator installs the toolkit; the agent reports the runtime: the host takes GPU work.
    agent.send(createMessage('inventory', { inventory: realGpuInventory([{ name: 'NVIDIA L40S' }], true) }));
    await waitFor(
      'the runtime reported',
      async () => (await hostDetail(agent.hostId))['gpuWork'].offered === true,
    );
    const placed = await createCluster('L40S');
    expect(placed.status, JSON.stringify(placed.json)).toBe(201);
    expect((await clusterRow(placed.json['data'].id)).hostId).toBe(agent.hostId);
  });

  it('new boards are schedulable types by their NVML names; MIG-enabled GPUs are not offered whole', async () => {
    const agent = await connect(
      realGpuInventory(
        [
          { name: 'NVIDIA A100-SXM4-40GB', migEnabled: true },
          { name: 'NVIDIA A100-SXM4-40GB', migEnabled: false },
        ],
        true,
      ),
    );
    const host = await hostDetail(agent.hostId);
    expect(
      host['gpuDevices'].map((d: Record<string, unknown>) => [
        d['boardType'],
        d['gpuType'],
        d['migEnabled'],
        d['schedulable'],
      ]),
    ).toEqual([
      ['A100 40GB', 'A100_40GB', true, false],
      ['A100 40GB', 'A100_40GB', false, true],
    ]);
    // The MIG GPU is not a whole GPU: two can never fit, one goes to index 1.
    const two = await createCluster('A100_40GB', 2);
    expect(two.status, JSON.stringify(two.json)).toBe(422);
    expect(two.json['error']?.code ?? two.json['code']).toBe('INSUFFICIENT_RESOURCES');
    const one = await createCluster('A100_40GB', 1);
    expect(one.status, JSON.stringify(one.json)).toBe(201);
    const row = await clusterRow(one.json['data'].id);
    expect([row.hostId, row.gpuIndices]).toEqual([agent.hostId, [1]]);

    const pcie = await connect(realGpuInventory([{ name: 'NVIDIA H100 PCIe' }], true));
    const h100Pcie = await createCluster('H100_PCIE');
    expect(h100Pcie.status, JSON.stringify(h100Pcie.json)).toBe(201);
    expect((await clusterRow(h100Pcie.json['data'].id)).hostId).toBe(pcie.hostId);
  });

  it('a failed GPU is cordoned (sticky until reset), its clusters are told, the rest of the host works', async () => {
    const inv = realGpuInventory([{ name: 'NVIDIA H200' }, { name: 'NVIDIA H200' }], true);
    const agent = await connect(inv);
    const hasState = (index: number, state: string) => async () => {
      const host = await hostDetail(agent.hostId);
      return host['gpuDevices'][index].health?.state === state ? host : undefined;
    };

    // GPU 1 falls off the bus (XID 79); GPU 0 is healthy.
    const xid79 = healthReason('xid_79', 'failed', 'nvmlEventSetWait_v2');
    sendMetrics(agent, [
      gpuSample(inv, 0, gpuHealth('healthy')),
      gpuSample(inv, 1, gpuHealth('failed', [xid79], [79])),
    ]);
    const failed = await waitFor('GPU 1 failed', hasState(1, 'failed'));
    expect(failed['gpuDevices'][1]).toMatchObject({
      schedulable: false,
      health: { state: 'failed', reasons: [{ code: 'xid_79', source: 'nvmlEventSetWait_v2' }] },
    });
    expect(failed['gpuDevices'][0]).toMatchObject({
      schedulable: true,
      health: { state: 'healthy', reasons: [] },
    });
    // Only the GPU is cordoned, not the host.
    expect([failed['status'], failed['cordoned']]).toEqual(['ready', false]);

    // Placement skips GPU 1: the first H200 gets GPU 0, the second waits.
    const first = await createCluster('H200');
    expect(first.status, JSON.stringify(first.json)).toBe(201);
    const firstId = first.json['data'].id as string;
    expect(await clusterRow(firstId)).toMatchObject({ hostId: agent.hostId, gpuIndices: [0] });
    const second = await createCluster('H200');
    expect(second.status, JSON.stringify(second.json)).toBe(201);
    const secondId = second.json['data'].id as string;
    expect((await clusterRow(secondId)).status).toBe('pending');

    // Sticky: the next sample looks fine, GPU 1 stays failed. (Messages are handled in order: once GPU 0's
    // degraded state of the sample after shows, the healthy one was handled.)
    sendMetrics(agent, [gpuSample(inv, 0, gpuHealth('healthy')), gpuSample(inv, 1, gpuHealth('healthy'))]);
    const thermal = healthReason('throttle_thermal', 'degraded', 'nvmlDeviceGetCurrentClocksEventReasons');
    sendMetrics(agent, [gpuSample(inv, 0, gpuHealth('degraded', [thermal]))]);
    const later = await waitFor('GPU 0 degraded', hasState(0, 'degraded'));
    expect(later['gpuDevices'][1].health.state).toBe('failed');
    // Degraded is reported, not cordoned.
    expect(later['gpuDevices'][0]).toMatchObject({
      schedulable: true,
      health: { reasons: [{ code: 'throttle_thermal' }] },
    });

    // GPU 0 fails under the first cluster: it keeps running (policy keep) and says why it is at risk.
    const ecc = healthReason('ecc_uncorrected_volatile', 'failed', 'nvmlDeviceGetTotalEccErrors');
    sendMetrics(agent, [gpuSample(inv, 0, gpuHealth('failed', [ecc]))]);
    const reported = await waitFor('the reason on the cluster', async () => {
      const res = await http('GET', `/v1/clusters/${firstId}`);
      return res.json['data']?.status_reason ? res.json['data'] : undefined;
    });
    expect(reported['status_reason']).toMatch(/^GPU 0 \(GPU-[^)]+\) failed: ecc_uncorrected_volatile/);
    expect(reported['status_reason']).toContain('ANVIL_FAILED_GPU_POLICY=keep');
    expect(reported['status']).not.toBe('error');

    // Prometheus: DCGM-named per-GPU gauges and the kept state. The gauges read the stored samples, which
    // the telemetry writer flushes in batches: wait for the last sample's figures to be there.
    let text = '';
    const line = (name: string, index: number) =>
      text
        .split('\n')
        .find((l) => l.startsWith(`${name}{`) && l.includes(`UUID="${inv.gpus.devices[index]!.uuid}"`));
    await waitFor('the last sample in the gauges', async () => {
      const metrics = await fetch(`${url}/metrics`, {
        headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      });
      text = await metrics.text();
      return / 2$/.test(line('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', 0) ?? '');
    });
    expect(line('anvil_gpu_health_state', 1)).toMatch(/ 2$/);
    expect(line('anvil_gpu_health_state', 1)).toContain('modelName="NVIDIA H200"');
    expect(line('anvil_gpu_health_state', 1)).toContain('gpu="1"');
    expect(line('DCGM_FI_DEV_GPU_UTIL', 0)).toMatch(/ 42$/);
    expect(line('DCGM_FI_DEV_FB_USED', 0)).toMatch(/ 2$/);
    expect(line('DCGM_FI_DEV_POWER_USAGE', 0)).toMatch(/ 305$/);
    expect(line('DCGM_FI_DEV_GPU_TEMP', 0)).toMatch(/ 61$/);
    expect(line('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL', 0)).toMatch(/ 3$/);
    expect(line('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', 0)).toMatch(/ 2$/);

    // Only operators reset; bad input is refused; the reset is audited and frees the GPU.
    const member = await addMember(t, { role: 'member' });
    const path = `/v2/admin/hosts/${agent.hostId}/gpus`;
    expect((await http('POST', `${path}/1/reset-health`, undefined, member.key)).status).toBe(403);
    expect((await http('POST', `${path}/7/reset-health`)).status).toBe(404);
    expect((await http('POST', `${path}/x/reset-health`)).status).toBe(400);
    expect((await http('POST', '/v2/admin/hosts/host_nope/gpus/0/reset-health')).status).toBe(404);
    expect((await hostDetail(agent.hostId))['gpuDevices'][1].health.state).toBe('failed');
    const reset = await http('POST', `${path}/1/reset-health`);
    expect(reset.status, JSON.stringify(reset.json)).toBe(200);
    expect(reset.json).toMatchObject({ changed: true, previous: { state: 'failed' } });
    expect(reset.json['host'].gpuDevices[1]).toMatchObject({
      schedulable: true,
      health: { state: 'healthy' },
    });
    // The waiting cluster takes the GPU that came back.
    await waitFor('the pending cluster placed on GPU 1', async () => {
      const row = await clusterRow(secondId);
      return row.status === 'starting' && row.gpuIndices[0] === 1;
    });
    // Resetting GPU 0 takes the report back from the cluster on it.
    expect((await http('POST', `${path}/0/reset-health`)).status).toBe(200);
    expect((await clusterRow(firstId)).statusReason).toBeNull();

    const audit = await http('GET', '/v2/accounts/permissions/audit?type=fleet_change&period=1d');
    expect(audit.status, JSON.stringify(audit.json)).toBe(200);
    const events = JSON.stringify(audit.json);
    expect(events).toContain('gpu_health_changed');
    expect(events).toContain('gpu_health_reset');
    expect(events).toContain(agent.hostId);
  });
});

describe('ANVIL_FAILED_GPU_POLICY=stop', () => {
  it('fails the clusters on a GPU that failed, with the reason, and releases the GPU', async () => {
    const t = await createTestApp({
      env: { ANVIL_FAILED_GPU_POLICY: 'stop', ANVIL_HOST_GRACE_SECONDS: '3600' },
    });
    const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
    let agent: GpuTestAgent | null = null;
    try {
      const inv = realGpuInventory([{ name: 'NVIDIA GeForce RTX 4090' }], true);
      agent = await connectGpuAgent(t, url, inv);
      const res = await fetch(`${url}/v1/clusters`, {
        method: 'POST',
        headers: { ...t.auth(), 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'on-4090', docker_image: 'busybox', gpu_type: 'RTX4090', gpu_count: 1 }),
      });
      expect(res.status).toBe(201);
      const id = ((await res.json()) as { data: { id: string } }).data.id;

      const ecc = healthReason('ecc_uncorrected_volatile', 'failed', 'nvmlDeviceGetTotalEccErrors');
      agent.sendGpus([gpuSample(inv, 0, gpuHealth('failed', [ecc]))]);
      const row = await waitFor('the cluster failed', async () => {
        const r = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
        return r.status === 'error' ? r : undefined;
      });
      expect(row.statusReason).toMatch(/^GPU 0 \(GPU-[^)]+\) failed: ecc_uncorrected_volatile/);
      expect(row.statusReason).toContain('ecc_uncorrected_volatile');
      expect(row.statusReason).toContain('ANVIL_FAILED_GPU_POLICY=stop');
      expect(row.gpuIndices).toEqual([]);
    } finally {
      agent?.close();
      await t.close();
    }
  });
});
