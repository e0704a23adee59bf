import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import { type AgentProcess, anvilContainers, spawnAgent } from './agent-process.ts';
import { FleetControlPlane } from './control-plane.ts';
import { busyboxSpec, createWorkload, removeRunContainers, runLabel } from './fixtures.ts';
import { waitFor } from './wait.ts';

const METRICS_TOKEN = 'fleet-test-metrics-token-0123456789';

// Real processes on a shared 2-core machine: minutes, not the default 60 s, before a wait is a failure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 400_000 });
/**
 * Issue 3, points 1, 2, 11 and 12 against the real control plane: join tokens, registration of real
 * agent processes, the operators' hosts API and the Prometheus exposition.
 */
describe.skipIf(!dockerOrFail('fleet registration tests'))('registration and the operators API', () => {
  const run = runLabel();
  let docker: Dockerode;
  let cp: FleetControlPlane;
  const agents: AgentProcess[] = [];

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
    cp = await FleetControlPlane.start({ env: { ANVIL_METRICS_TOKEN: METRICS_TOKEN } });
  }, 400_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.kill('SIGKILL')));
    await cp?.close();
    await removeRunContainers(docker, run.filter);
  });

  async function agent(joinToken: string | null, stateDir?: string): Promise<AgentProcess> {
    const started = await spawnAgent({
      controlPlaneUrl: cp.url,
      joinToken,
      ...(stateDir ? { stateDir } : {}),
    });
    agents.push(started);
    return started;
  }

  let hostId = '';
  let registered: AgentProcess;

  it('creates, lists and revokes join tokens', async () => {
    const before = Date.now();
    const single = await cp.call<{ token: Record<string, unknown>; value: string; installCommand: string }>(
      'POST',
      '/v2/admin/hosts/join-tokens',
      { body: { description: 'one machine', expiresIn: 600 } },
    );
    expect(single.status).toBe(201);
    expect(single.body.value).toMatch(/^anvjt_/);
    expect(single.body.installCommand).toContain(single.body.value);
    expect(single.body.token).toMatchObject({ maxUses: 1, useCount: 0, remainingUses: 1, status: 'active' });
    const expires = Date.parse(single.body.token['expiresAt'] as string);
    expect(expires - before).toBeGreaterThanOrEqual(599_000);
    expect(expires - Date.now()).toBeLessThanOrEqual(600_000);

    const multi = await cp.call<{ token: Record<string, unknown> }>('POST', '/v2/admin/hosts/join-tokens', {
      body: { maxUses: null, expiresAt: new Date(Date.now() + 86_400_000).toISOString() },
    });
    expect(multi.status).toBe(201);
    expect(multi.body.token).toMatchObject({ maxUses: null, remainingUses: null, status: 'active' });

    const bad = await cp.call('POST', '/v2/admin/hosts/join-tokens', { body: { expiresIn: 0 } });
    expect(bad.status).toBe(400);
    const past = await cp.call('POST', '/v2/admin/hosts/join-tokens', {
      body: { expiresAt: new Date(Date.now() - 1000).toISOString() },
    });
    expect(past.status).toBe(400);

    const list = await cp.call<{ join_tokens: { id: string; status: string }[]; total: number }>(
      'GET',
      '/v2/admin/hosts/join-tokens',
    );
    expect(list.status).toBe(200);
    const ids = list.body.join_tokens.map((t) => t.id);
    expect(ids).toEqual(expect.arrayContaining([single.body.token['id'], multi.body.token['id']]));
    // Values are shown once, never listed.
    expect(list.text).not.toContain(single.body.value);

    const revoked = await cp.call<{ token: { status: string; revokedAt: string } }>(
      'DELETE',
      `/v2/admin/hosts/join-tokens/${multi.body.token['id']}`,
    );
    expect(revoked.status).toBe(200);
    expect(revoked.body.token.status).toBe('revoked');
    expect(Date.parse(revoked.body.token.revokedAt)).toBeGreaterThan(before - 1000);
    expect((await cp.call('DELETE', '/v2/admin/hosts/join-tokens/jt_nosuchtoken')).status).toBe(404);
  });

  it('registers an agent with a token and keeps its credential private; refused tokens end the agent with one line', async () => {
    const created = await cp.call<{ token: { id: string }; value: string }>(
      'POST',
      '/v2/admin/hosts/join-tokens',
      {
        body: { maxUses: 1, expiresIn: 600 },
      },
    );
    registered = await agent(created.body.value);
    hostId = await registered.hostId();
    const mode = (await stat(join(registered.stateDir, 'credential.json'))).mode & 0o777;
    expect(mode).toBe(0o600);
    await cp.readyHost(hostId, undefined, registered);

    const tokens = await cp.call<{ join_tokens: { id: string; status: string; useCount: number }[] }>(
      'GET',
      '/v2/admin/hosts/join-tokens',
    );
    expect(tokens.body.join_tokens.find((t) => t.id === created.body.token.id)).toMatchObject({
      status: 'used_up',
      useCount: 1,
    });

    // Used up, revoked and expired tokens: each agent exits 1 with one line saying which.
    const revokedToken = await cp.call<{ token: { id: string }; value: string }>(
      'POST',
      '/v2/admin/hosts/join-tokens',
      { body: {} },
    );
    await cp.call('DELETE', `/v2/admin/hosts/join-tokens/${revokedToken.body.token.id}`);
    const expiring = await cp.call<{ token: { id: string }; value: string }>(
      'POST',
      '/v2/admin/hosts/join-tokens',
      {
        body: { expiresIn: 1 },
      },
    );
    await waitFor('the token to expire', async () => {
      const all = await cp.call<{ join_tokens: { id: string; status: string }[] }>(
        'GET',
        '/v2/admin/hosts/join-tokens',
      );
      return all.body.join_tokens.find((t) => t.id === expiring.body.token.id)?.status === 'expired';
    });
    const refused = await Promise.all([
      agent(created.body.value),
      agent(revokedToken.body.value),
      agent(expiring.body.value),
    ]);
    const codes = await Promise.all(refused.map((a) => a.exited));
    expect(codes).toEqual([1, 1, 1]);
    const lines = refused.map((a) => a.stderr());
    for (const line of lines) {
      expect(line.endsWith('\n')).toBe(true);
      expect(line.trimEnd().split('\n')).toHaveLength(1);
      expect(line).toMatch(/^anvil-agent: join token refused by the control plane: /);
    }
    expect(lines[0]).toContain(`join token ${created.body.token.id} has been used 1 of 1 times`);
    expect(lines[1]).toContain(`join token ${revokedToken.body.token.id} has been revoked`);
    expect(lines[2]).toContain(`join token ${expiring.body.token.id} expired at`);
    // No host was created by the refused agents.
    const hosts = await cp.call<{ total: number }>('GET', '/v2/admin/hosts');
    expect(hosts.body.total).toBe(1);
  });

  it('answers operators only: a member key gets 403, an admin key 200, no key 401', async () => {
    const member = await cp.member('member');
    const admin = await cp.member('admin');
    for (const [method, path] of [
      ['GET', '/v2/admin/hosts'],
      ['GET', `/v2/admin/hosts/${hostId}`],
      ['POST', `/v2/admin/hosts/${hostId}/cordon`],
      ['POST', `/v2/admin/hosts/${hostId}/drain`],
      ['DELETE', `/v2/admin/hosts/${hostId}`],
      ['GET', '/v2/admin/hosts/join-tokens'],
      ['POST', '/v2/admin/hosts/join-tokens'],
    ] as const) {
      const answer = await cp.call(method, path, { key: member, ...(method === 'POST' ? { body: {} } : {}) });
      expect(answer.status, `${method} ${path}`).toBe(403);
    }
    expect((await cp.call('GET', '/v2/admin/hosts', { key: admin })).status).toBe(200);
    const anonymous = await fetch(`${cp.url}/v2/admin/hosts`);
    expect(anonymous.status).toBe(401);
    // The member's attempts changed nothing.
    expect((await cp.host(hostId)).cordoned).toBe(false);
  });

  it('lists hosts with status, simulated inventory, allocations, heartbeat and agent version', async () => {
    const host = await cp.host(hostId);
    const gpu = host.inventory!.gpus.devices[0]!;
    const workloadId = await createWorkload(
      cp,
      hostId,
      busyboxSpec(run, { gpus: [{ index: 0, uuid: gpu.uuid }] }),
    );
    await waitFor('the workload running', async () => (await cp.workload(workloadId)).phase === 'running');

    const list = await cp.call<{ hosts: Record<string, unknown>[]; total: number }>('GET', '/v2/admin/hosts');
    expect(list.body.total).toBe(1);
    const listed = list.body.hosts[0]!;
    expect(listed).toMatchObject({
      id: hostId,
      status: 'ready',
      state: 'ready',
      connected: true,
      simulated: true,
      agentVersion: expect.any(String),
      gpus: { count: 2, simulated: true, source: 'simulated', models: [expect.stringContaining('H100')] },
      workloads: { total: 1, running: 1, gpusAllocated: 1 },
    });
    expect(Date.now() - Date.parse(listed['lastHeartbeatAt'] as string)).toBeLessThan(10_000);
    expect(listed['heartbeatAgeSeconds']).toBeLessThan(10);
    // The detail has the full inventory, flagged simulated, and the workload with its GPU.
    const detail = await cp.host(hostId);
    expect(detail.inventory!.gpus.simulated).toBe(true);
    expect(detail.inventory!.docker.version).toEqual(expect.any(String));
    expect(detail.workloadList).toEqual([
      expect.objectContaining({ id: workloadId, desired: 'running', phase: 'running', gpus: [0] }),
    ]);
    expect((await cp.call('GET', '/v2/admin/hosts/host_nosuchhost')).status).toBe(404);
  });

  it('cordons, uncordons and drains without moving anything; delete needs force while workloads exist', async () => {
    const cordoned = await cp.call<{ host: { status: string; cordoned: boolean; cordonReason: string } }>(
      'POST',
      `/v2/admin/hosts/${hostId}/cordon`,
      { body: { reason: 'disk replacement' } },
    );
    expect(cordoned.status).toBe(200);
    expect(cordoned.body.host).toMatchObject({
      status: 'cordoned',
      cordoned: true,
      cordonReason: 'disk replacement',
    });
    const uncordoned = await cp.call<{ host: { status: string; cordoned: boolean } }>(
      'POST',
      `/v2/admin/hosts/${hostId}/uncordon`,
    );
    expect(uncordoned.body.host).toMatchObject({ status: 'ready', cordoned: false });

    const before = await anvilContainers(docker, hostId);
    expect(before).toHaveLength(1);
    const drained = await cp.call<{
      host: { status: string };
      remaining: { id: string; desired: string }[];
      drained: boolean;
    }>('POST', `/v2/admin/hosts/${hostId}/drain`);
    expect(drained.status).toBe(200);
    expect(drained.body.drained).toBe(false);
    expect(drained.body.host.status).toBe('cordoned');
    expect(drained.body.remaining).toEqual([expect.objectContaining({ desired: 'running' })]);
    const workloadId = drained.body.remaining[0]!.id;
    // Nothing moved or stopped: the same container still runs, and the workload still wants to run.
    const after = await anvilContainers(docker, hostId);
    expect(after).toEqual(before);
    expect(after[0]!.state).toBe('running');
    expect((await cp.workload(workloadId)).desired).toBe('running');

    const refused = await cp.call<{ error: { code: string } } & Record<string, unknown>>(
      'DELETE',
      `/v2/admin/hosts/${hostId}`,
    );
    expect(refused.status).toBe(409);
    expect(refused.text).toContain('HOST_HAS_WORKLOADS');
    expect((await cp.host(hostId)).status).toBe('cordoned');

    const deleted = await cp.call('DELETE', `/v2/admin/hosts/${hostId}?force=true`);
    expect(deleted.status).toBe(200);
    expect((await cp.call('GET', `/v2/admin/hosts/${hostId}`)).status).toBe(404);
    expect((await cp.workload(workloadId)).desired).toBe('deleted');
    // The credential is revoked: the agent is refused and stops with one line.
    expect(await registered.exited).toBe(1);
    expect(registered.stderr()).toMatch(
      /^anvil-agent: (host credential|connection) refused by the control plane: .*was deleted.*\n$/,
    );
    // Restarting it with the saved credential does not bring the host back.
    const again = await agent(null, registered.stateDir);
    expect(await again.exited).toBe(1);
    expect(again.stderr()).toContain('was deleted');
  });

  it('serves Prometheus metrics with real values behind ANVIL_METRICS_TOKEN', async () => {
    expect((await fetch(`${cp.url}/metrics`)).status).toBe(401);
    expect((await fetch(`${cp.url}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(
      401,
    );
    // An API key is not the metrics token.
    expect((await cp.call('GET', '/metrics')).status).toBe(401);

    const token = await cp.joinToken();
    const second = await agent(token);
    const secondId = await second.hostId();
    await cp.readyHost(secondId, undefined, second);
    await createWorkload(cp, secondId, busyboxSpec(run));
    await waitFor(
      'a running workload',
      async () => (await anvilContainers(docker, secondId))[0]?.state === 'running',
    );
    for (let i = 0; i < 3; i += 1) await cp.call('GET', '/v2/admin/hosts');

    const text = await waitFor('metrics showing the running workload', async () => {
      const response = await fetch(`${cp.url}/metrics`, {
        headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      });
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toContain('text/plain');
      const body = await response.text();
      return /anvil_workloads\{phase="running",desired="running"\} 1/.test(body) ? body : null;
    });
    expect(text).toMatch(/anvil_hosts\{state="ready",cordoned="false"\} 1/);
    expect(text).toMatch(/anvil_hosts\{state="unreachable",cordoned="false"\} 0/);
    expect(text).toMatch(/anvil_hosts_connected 1/);
    expect(text).toMatch(/anvil_agents_connected 1/);
    expect(text).toMatch(/anvil_gpus\{model="[^"]*H100[^"]*",simulated="true"\} 2/);
    const age = new RegExp(
      `anvil_host_heartbeat_age_seconds\\{host_id="${secondId}",host="[^"]*"\\} ([0-9.e-]+)`,
    ).exec(text);
    expect(Number(age?.[1])).toBeLessThan(5);
    const requests =
      /anvil_http_requests_total\{method="GET",route="\/v2\/admin\/hosts",status="200"\} (\d+)/.exec(text);
    expect(Number(requests?.[1])).toBeGreaterThanOrEqual(3);
    expect(text).toMatch(/anvil_http_requests_total\{method="GET",route="\/metrics",status="401"\} 3/);
    expect(text).toMatch(/anvil_agent_refusals_total\{code="join_token_invalid"\} 3/);
    expect(text).toMatch(/anvil_workloads\{phase="removed",desired="deleted"\} 1/);
  });

  it('has no /metrics without ANVIL_METRICS_TOKEN', async () => {
    // The same route, read with the variable unset (a second control plane costs a minute here).
    const config = cp.context.config as { metricsToken: string | null };
    config.metricsToken = null;
    try {
      expect((await fetch(`${cp.url}/metrics`)).status).toBe(404);
      expect(
        (await fetch(`${cp.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status,
      ).toBe(404);
    } finally {
      config.metricsToken = METRICS_TOKEN;
    }
  });
});
