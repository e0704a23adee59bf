import { ApiError, newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { OFFICIAL_TEMPLATES } from '../../templates/seed.ts';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { clusterRow, createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';
import { documentedOperations } from '../../testing/openapi.ts';

const BASE = '/v1/clusters/templates';

/** A cluster row as the clusters area writes it, created from a template. */
async function addCluster(
  t: TestApp,
  accountId: string,
  templateId: string,
  status: string,
  extra: { sessionStartedAt?: Date; deletedAt?: Date } = {},
): Promise<string> {
  const id = newId('cluster');
  await t.context.db.prisma.cluster.create({
    data: clusterRow({
      id,
      accountId,
      ownerId: t.userId,
      name: `c-${id.slice(-6)}`,
      status,
      cpuCores: 4,
      memoryGb: 16,
      storageGb: 50,
      templateId,
      ...extra,
    }),
  });
  return id;
}

const minimal = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  description: 'Fine-tuning image',
  category: 'ml',
  docker_image: 'ghcr.io/acme/trainer:1.4.2',
  default_configuration: { gpu_type: 'H100', gpu_count: 2, cpu_cores: 16, memory_gb: 64, storage_gb: 200 },
  ...extra,
});

describe('cluster templates API', () => {
  let t: TestApp;
  let clock: ManualClock;
  let viewer: TestMember;
  let stranger: TestMember;
  let noClusterScope: TestMember;

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-11-24T10:00:00Z'));
    t = await createTestApp({ clock });
    await t.context.db.prisma.gpuPrice.create({ data: { gpuType: 'H100', hourlyRate: 2.5 } });
    viewer = await addMember(t, { role: 'viewer' });
    stranger = await addAccount(t, 'Stranger');
    noClusterScope = await addMember(t, { role: 'admin', keyScopes: ['accounts'] });
  });
  afterAll(async () => t.close());

  const create = (payload: unknown, key?: TestMember) =>
    call(t, { method: 'POST', url: BASE, payload, ...(key ? { key } : {}) });

  it('seeds the official templates once, read-only and visible to every account', async () => {
    await t.context.templates.start();
    await t.context.templates.start();
    const official = await t.context.db.prisma.clusterTemplate.findMany({ where: { official: true } });
    expect(official.map((o) => o.id).sort()).toEqual(OFFICIAL_TEMPLATES.map((o) => o.id).sort());
    expect(official.every((o) => o.accountId === null)).toBe(true);
    expect(await t.context.db.prisma.clusterTemplateVersion.count()).toBe(OFFICIAL_TEMPLATES.length);

    const res = await call(t, { url: `${BASE}?official=true`, key: stranger });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.success).toBe(true);
    expect(body.meta.request_id).toBeTruthy();
    expect(body.data.templates).toHaveLength(OFFICIAL_TEMPLATES.length);
    const pytorch = body.data.templates.find((x: { id: string }) => x.id === 'tmpl_official_pytorch');
    expect(pytorch.docker_image).toBe('pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime');
    expect(pytorch.created_by).toBeNull();
    expect(pytorch.usage_statistics).toEqual({
      total_deployments: 0,
      active_clusters: 0,
      success_rate: null,
    });

    const put = await call(t, {
      method: 'PUT',
      url: `${BASE}/tmpl_official_pytorch`,
      payload: { description: 'mine now' },
    });
    expect(put.statusCode).toBe(403);
    expect(put.json().error.code).toBe('INSUFFICIENT_PERMISSIONS');
    const del = await call(t, { method: 'DELETE', url: `${BASE}/tmpl_official_pytorch` });
    expect(del.statusCode).toBe(403);
    const still = await t.context.db.prisma.clusterTemplate.findUniqueOrThrow({
      where: { id: 'tmpl_official_pytorch' },
    });
    expect(still.deletedAt).toBeNull();
    expect(still.description).not.toBe('mine now');
  });

  it('creates a template with its first version, creator and estimated cost', async () => {
    const res = await create(
      minimal('Trainer', {
        framework: 'pytorch',
        environment_variables: { HF_HOME: '/data/hf' },
        port_mappings: [{ internal_port: 8888, description: 'Jupyter', required: true }],
        min_resources: { gpu_count: 1 },
        max_resources: { gpu_count: 8 },
        tags: ['llm'],
        version_notes: 'first cut',
      }),
    );
    expect(res.statusCode).toBe(201);
    const data = res.json().data;
    expect(data.id).toMatch(/^tmpl_/);
    expect(data.version).toBe('1.0.0');
    expect(data.official).toBe(false);
    expect(data.default_configuration.estimated_hourly_cost).toBe(5);
    expect(data.port_mappings).toEqual([
      { internal_port: 8888, protocol: 'tcp', description: 'Jupyter', required: true },
    ]);
    expect(data.resource_limits).toEqual({
      min_resources: { gpu_count: 1 },
      max_resources: { gpu_count: 8 },
    });
    expect(data.created_by).toEqual({
      user_id: t.userId,
      username: expect.anything(),
      organization: expect.any(String),
    });
    const versions = await call(t, { url: `${BASE}/${data.id}/versions` });
    expect(versions.json().data.versions.map((v: { version: string }) => v.version)).toEqual(['1.0.0']);
  });

  it('keeps names unique per account and project', async () => {
    const first = await create(minimal('Unique name'));
    expect(first.statusCode).toBe(201);
    const again = await create(minimal('Unique name'));
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ success: false, error: { code: 'TEMPLATE_NAME_EXISTS' } });
    const otherProject = await create(minimal('Unique name', { project_id: 'proj_vision' }));
    expect(otherProject.statusCode).toBe(201);
    const otherAccount = await create(minimal('Unique name'), stranger);
    expect(otherAccount.statusCode).toBe(201);
    // Deleting frees the name.
    const del = await call(t, { method: 'DELETE', url: `${BASE}/${first.json().data.id}` });
    expect(del.statusCode).toBe(200);
    expect(del.json().data).toMatchObject({ deleted: true, active_clusters: 0 });
    expect((await create(minimal('Unique name'))).statusCode).toBe(201);
    // Renaming onto a taken name is refused too.
    const second = await create(minimal('Another name'));
    const rename = await call(t, {
      method: 'PUT',
      url: `${BASE}/${second.json().data.id}`,
      payload: { name: 'Unique name' },
    });
    expect(rename.statusCode).toBe(409);
    expect(rename.json().error.code).toBe('TEMPLATE_NAME_EXISTS');
  });

  it('versions every update and refuses a version that does not increase', async () => {
    const id = (await create(minimal('Versioned'))).json().data.id;
    const patch = await call(t, { method: 'PUT', url: `${BASE}/${id}`, payload: { description: 'v2 text' } });
    expect(patch.statusCode).toBe(200);
    expect(patch.json().data).toMatchObject({
      version: '1.0.1',
      description: 'v2 text',
      version_notes: null,
    });
    const minor = await call(t, {
      method: 'PUT',
      url: `${BASE}/${id}`,
      payload: { docker_image: 'ghcr.io/acme/trainer:1.5.0', version: '1.1.0', version_notes: 'new image' },
    });
    expect(minor.json().data).toMatchObject({ version: '1.1.0', version_notes: 'new image' });
    for (const version of ['1.1.0', '1.0.9', '0.9.0']) {
      const res = await call(t, { method: 'PUT', url: `${BASE}/${id}`, payload: { version } });
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatchObject({ code: 'VALIDATION_ERROR', details: { field: 'version' } });
    }
    const history = (await call(t, { url: `${BASE}/${id}/versions` })).json().data;
    expect(history.current_version).toBe('1.1.0');
    expect(history.versions.map((v: { version: string }) => v.version)).toEqual(['1.1.0', '1.0.1', '1.0.0']);
    expect(history.versions[0].snapshot.docker_image).toBe('ghcr.io/acme/trainer:1.5.0');
    expect(history.versions[2].snapshot.docker_image).toBe('ghcr.io/acme/trainer:1.4.2');
    // Deprecation hides it from lists unless asked for.
    await call(t, { method: 'PUT', url: `${BASE}/${id}`, payload: { is_deprecated: true } });
    const hidden = (await call(t, { url: `${BASE}?search=Versioned` })).json().data.templates;
    expect(hidden).toHaveLength(0);
    const shown = (await call(t, { url: `${BASE}?search=versioned&include_deprecated=true` })).json().data;
    expect(shown.templates.map((x: { id: string }) => x.id)).toEqual([id]);
    expect(shown.templates[0].is_deprecated).toBe(true);
  });

  it('lets only one of two concurrent updates publish the next version', async () => {
    const id = (await create(minimal('Raced'))).json().data.id;
    const results = await Promise.all(
      ['first', 'second'].map((description) =>
        call(t, { method: 'PUT', url: `${BASE}/${id}`, payload: { description, version: '2.0.0' } }),
      ),
    );
    const statuses = results.map((r) => r.statusCode).sort();
    expect(statuses[0]).toBe(200);
    expect([400, 409]).toContain(statuses[1]);
    const versions = await t.context.db.prisma.clusterTemplateVersion.findMany({ where: { templateId: id } });
    expect(versions.map((v) => v.version).sort()).toEqual(['1.0.0', '2.0.0']);
  });

  it('filters, sorts and serves the /v2 short form', async () => {
    const a = (
      await create(minimal('Filter A', { category: 'dev', framework: 'tensorflow', tags: ['needle'] }))
    ).json().data.id;
    const b = (
      await create(minimal('Filter B', { category: 'dev', gpu_compatible: false, project_id: 'proj_f' }))
    ).json().data.id;
    const ids = async (query: string) =>
      (await call(t, { url: `${BASE}?${query}` })).json().data.templates.map((x: { id: string }) => x.id);
    expect(await ids('category=dev&official=false')).toEqual([a, b]);
    expect(await ids('category=dev&official=false&sort_by=name&sort_order=desc')).toEqual([b, a]);
    expect(await ids('framework=tensorflow&official=false')).toEqual([a]);
    expect(await ids('framework=tensorflow&official=true')).toEqual(['tmpl_official_tensorflow']);
    expect(await ids('gpu_compatible=false')).toEqual([b]);
    expect(await ids('project_id=proj_f')).toEqual([b]);
    expect(await ids('search=needle')).toEqual([a]);
    expect(await ids('search=FILTER%20B')).toEqual([b]);

    // usage_count follows real deployments: three clusters from b, one from a.
    await addCluster(t, t.accountId, b, 'running');
    await addCluster(t, t.accountId, b, 'stopped');
    await addCluster(t, t.accountId, b, 'pending');
    await addCluster(t, t.accountId, a, 'error');
    expect(await ids('category=dev&official=false&sort_by=usage_count')).toEqual([b, a]);
    expect(await ids('category=dev&official=false&sort_by=usage_count&sort_order=asc')).toEqual([a, b]);

    const short = await call(t, { url: '/v2/clusters/templates?category=dev&official=false' });
    expect(short.statusCode).toBe(200);
    const first = short.json().templates[0];
    expect(first).toEqual({
      id: a,
      name: 'Filter A',
      description: 'Fine-tuning image',
      imageName: 'ghcr.io/acme/trainer:1.4.2',
      category: 'dev',
      official: false,
      gpuRequired: true,
    });
    const badV2 = await call(t, { url: '/v2/clusters/templates?sort_by=stars' });
    expect(badV2.statusCode).toBe(400);
    expect(badV2.json()).toMatchObject({ error: 'VALIDATION_ERROR', code: 400 });
  });

  it('computes usage_statistics from the account’s clusters', async () => {
    const id = (await create(minimal('Stats'))).json().data.id;
    await addCluster(t, t.accountId, id, 'running', { sessionStartedAt: clock.now() });
    await addCluster(t, t.accountId, id, 'stopped');
    await addCluster(t, t.accountId, id, 'starting');
    await addCluster(t, t.accountId, id, 'error');
    // Deleted after running: only its closed session in usage_records shows it ever ran.
    const ran = await addCluster(t, t.accountId, id, 'deleted', { deletedAt: clock.now() });
    await t.context.db.prisma.usageRecord.create({
      data: {
        id: newId('use'),
        accountId: t.accountId,
        resourceType: 'cluster',
        resourceId: ran,
        kind: 'gpu_compute',
        gpuType: 'H100',
        gpuCount: 1,
        quantity: 1,
        unit: 'hours',
        gpuHours: 1,
        cost: 2.5,
        startedAt: new Date('2026-11-24T08:00:00Z'),
        endedAt: new Date('2026-11-24T09:00:00Z'),
      },
    });
    // Another account's cluster from the same id never counts.
    await addCluster(t, stranger.accountId, id, 'running');
    const stats = (await call(t, { url: `${BASE}/${id}` })).json().data.usage_statistics;
    // 5 deployments; decided = running, stopped, error, deleted (4); reached = running, stopped, deleted (3).
    expect(stats).toEqual({
      total_deployments: 5,
      active_clusters: 1,
      success_rate: 75,
    });
  });

  it('hides other accounts’ templates and refuses changes to them', async () => {
    const theirs = (await create(minimal('Theirs'), stranger)).json().data.id;
    for (const [method, url, payload] of [
      ['GET', `${BASE}/${theirs}`, undefined],
      ['GET', `${BASE}/${theirs}/versions`, undefined],
      ['PUT', `${BASE}/${theirs}`, { description: 'hijacked' }],
      ['DELETE', `${BASE}/${theirs}`, undefined],
      ['GET', `${BASE}/tmpl_doesnotexist`, undefined],
    ] as const) {
      const res = await call(t, { method, url, payload });
      expect(res.statusCode, `${method} ${url}`).toBe(400);
      expect(res.json()).toMatchObject({ success: false, error: { code: 'TEMPLATE_NOT_FOUND' } });
    }
    const list = (await call(t, { url: `${BASE}?search=Theirs` })).json().data.templates;
    expect(list).toHaveLength(0);
    const row = await t.context.db.prisma.clusterTemplate.findUniqueOrThrow({ where: { id: theirs } });
    expect(row.description).toBe('Fine-tuning image');
    expect(row.deletedAt).toBeNull();
  });

  it('resolves templates for cluster creation (contract 2)', async () => {
    const own = (
      await create(
        minimal('Resolvable', {
          environment_variables: { A: '1' },
          port_mappings: [{ internal_port: 8080, protocol: 'udp', description: 'x' }],
          startup_script: 'echo ready',
        }),
      )
    ).json().data.id;
    expect(await t.context.templates.resolveForCluster(t.accountId, own)).toEqual({
      templateId: own,
      dockerImage: 'ghcr.io/acme/trainer:1.4.2',
      env: { A: '1' },
      ports: [{ internal_port: 8080, protocol: 'udp', description: 'x' }],
      startupScript: 'echo ready',
      defaults: { gpu_type: 'H100', gpu_count: 2, cpu_cores: 16, memory_gb: 64, storage_gb: 200 },
      limits: { min: {}, max: {} },
      gpuTypes: [],
    });
    const official = await t.context.templates.resolveForCluster(stranger.accountId, 'tmpl_official_tgi');
    expect(official.env).toEqual({ MODEL_ID: 'HuggingFaceH4/zephyr-7b-beta' });
    expect(official.ports).toEqual([{ internal_port: 80, protocol: 'tcp', description: 'TGI HTTP API' }]);
    const refused = t.context.templates.resolveForCluster(stranger.accountId, own);
    await expect(refused).rejects.toBeInstanceOf(ApiError);
    await expect(refused).rejects.toMatchObject({ code: 'TEMPLATE_NOT_FOUND' });
    await call(t, { method: 'DELETE', url: `${BASE}/${own}` });
    await expect(t.context.templates.resolveForCluster(t.accountId, own)).rejects.toMatchObject({
      code: 'TEMPLATE_NOT_FOUND',
    });
  });

  it('enforces key scopes and member roles', async () => {
    const read = await call(t, { url: BASE, key: viewer });
    expect(read.statusCode).toBe(200);
    const write = await create(minimal('Viewer made'), viewer);
    expect(write.statusCode).toBe(403);
    expect(write.json().error.code).toBe('INSUFFICIENT_PERMISSIONS');
    const scoped = await call(t, { url: BASE, key: noClusterScope });
    expect(scoped.statusCode).toBe(403);
    expect(scoped.json().error).toMatchObject({ code: 'FORBIDDEN', required_permission: 'clusters:read' });
    const anonymous = await t.app.inject({ method: 'GET', url: BASE });
    expect(anonymous.statusCode).toBe(401);
  });

  it('routes the static templates path before /v1/clusters/:cluster_id', async () => {
    const templates = await call(t, { url: BASE });
    expect(templates.json().success).toBe(true);
    // The clusters area's GET /v1/clusters/:cluster_id answers other ids.
    const cluster = await call(t, { url: '/v1/clusters/cluster_abc' });
    expect(cluster.statusCode).toBe(404);
    expect(cluster.json().error.code).toBe('CLUSTER_NOT_FOUND');
  });

  it('answers each bad input with VALIDATION_ERROR and changes nothing', async () => {
    const before = await t.context.db.prisma.clusterTemplate.count();
    const cases: [string, unknown, string][] = [
      ['missing name', { ...minimal('x'), name: undefined }, 'name'],
      ['empty name', minimal(''), 'name'],
      ['long name', minimal('n'.repeat(101)), 'name'],
      ['bad category', minimal('x', { category: 'gaming' }), 'category'],
      ['bad framework', minimal('x', { framework: 'jax' }), 'framework'],
      ['bad image', minimal('x', { docker_image: 'UPPER/Case Image' }), 'docker_image'],
      [
        'missing default_configuration',
        { ...minimal('x'), default_configuration: undefined },
        'default_configuration',
      ],
      [
        'bad gpu type',
        minimal('x', { default_configuration: { gpu_type: 'B200' } }),
        'default_configuration.gpu_type',
      ],
      [
        'too many gpus',
        minimal('x', { default_configuration: { gpu_count: 9 } }),
        'default_configuration.gpu_count',
      ],
      ['bad env name', minimal('x', { environment_variables: { '1BAD': 'x' } }), 'environment_variables'],
      [
        'bad port',
        minimal('x', { port_mappings: [{ internal_port: 70000 }] }),
        'port_mappings.0.internal_port',
      ],
      [
        'bad protocol',
        minimal('x', { port_mappings: [{ internal_port: 80, protocol: 'sctp' }] }),
        'port_mappings.0.protocol',
      ],
      ['bad version', minimal('x', { version: 'v1' }), 'version'],
      ['unknown field', minimal('x', { rating: 5 }), 'rating'],
      [
        'min above max',
        minimal('x', { min_resources: { gpu_count: 4 }, max_resources: { gpu_count: 2 } }),
        'min_resources.gpu_count',
      ],
      [
        'default above max',
        minimal('x', { max_resources: { gpu_count: 1 } }),
        'default_configuration.gpu_count',
      ],
      ['tags not array', minimal('x', { tags: 'llm' }), 'tags'],
    ];
    for (const [label, payload, field] of cases) {
      const res = await create(payload);
      expect(res.statusCode, label).toBe(400);
      const body = res.json();
      expect(body.success, label).toBe(false);
      expect(body.error.code, label).toBe('VALIDATION_ERROR');
      expect(body.error.details.field, label).toBe(field);
    }
    for (const query of ['category=x', 'sort_by=stars', 'official=maybe', 'include_deprecated=2', 'nope=1']) {
      const res = await call(t, { url: `${BASE}?${query}` });
      expect(res.statusCode, query).toBe(400);
      expect(res.json().error.code, query).toBe('VALIDATION_ERROR');
    }
    const badId = await call(t, { url: `${BASE}/not-a-template` });
    expect(badId.statusCode).toBe(400);
    const emptyPut = await call(t, { method: 'PUT', url: `${BASE}/tmpl_official_jupyter`, payload: {} });
    expect(emptyPut.statusCode).toBe(403);
    expect(await t.context.db.prisma.clusterTemplate.count()).toBe(before);
  });

  it('documents its routes in the OpenAPI document', async () => {
    const operations = await documentedOperations(t, ['/v1/clusters/templates', '/v2/clusters/templates']);
    expect(operations.length).toBeGreaterThan(1);
    expect(operations.filter((o) => o.lacking.length > 0)).toEqual([]);
  });
});

describe('creating clusters from templates', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await createTestApp();
    // Simulated hosts in the database (no agent: placed clusters stay `starting`).
    await insertSimulatedHosts(t.context.db, { prefix: 'tp', count: 2, gpusPerHost: 2, region: 'us-east-1' });
  });
  afterAll(async () => t.close());

  it('applies the template to POST /v1/clusters, request fields overriding, and counts the deployments', async () => {
    const template = await call(t, {
      method: 'POST',
      url: BASE,
      payload: minimal('Served', {
        environment_variables: { MODEL: 'small', MODE: 'serve' },
        port_mappings: [{ internal_port: 8000, description: 'API', required: true }],
      }),
    });
    const id = template.json().data.id;
    const fromTemplate = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name: 'from-template', template_id: id, gpu_count: 1, env: { MODEL: 'large' } },
    });
    expect(fromTemplate.statusCode, fromTemplate.body).toBe(201);
    const clusterId = fromTemplate.json().data.id;
    const row = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: clusterId } });
    expect(row).toMatchObject({
      templateId: id,
      dockerImage: 'ghcr.io/acme/trainer:1.4.2',
      gpuType: 'H100',
      gpuCount: 1,
      cpuCores: 16,
      memoryGb: 64,
      storageGb: 200,
    });
    expect(row.env).toMatchObject({ MODEL: 'large', MODE: 'serve' });
    expect(row.ports).toEqual([expect.objectContaining({ internal_port: 8000, protocol: 'tcp' })]);
    const stats = (await call(t, { url: `${BASE}/${id}` })).json().data.usage_statistics;
    expect(stats).toMatchObject({ total_deployments: 1, active_clusters: 0 });
    expect(stats).not.toHaveProperty('average_rating');
    const sorted = (await call(t, { url: `${BASE}?sort_by=usage_count` })).json().data.templates;
    expect(sorted[0].id).toBe(id);
  });

  it('keeps clusters made from a template within its resource_limits and compatibility.gpu_types', async () => {
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const post = async (path: string, body: unknown) => {
      const res = await fetch(`${base}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as { data?: { id: string }; error?: unknown } };
    };
    const template = await post(
      BASE,
      minimal('Bounded', {
        min_resources: { gpu_count: 1, memory_gb: 32 },
        max_resources: { gpu_count: 2, memory_gb: 128 },
        compatibility: { gpu_types: ['H100', 'A100'] },
      }),
    );
    expect(template.status, JSON.stringify(template.body)).toBe(201);
    const id = template.body.data!.id;
    const cases: [Record<string, unknown>, string, string][] = [
      [{ gpu_count: 4 }, 'gpu_count', 'must be at most 2'],
      [{ memory_gb: 16 }, 'memory_gb', 'must be at least 32'],
      [{ gpu_type: 'T4' }, 'gpu_type', 'H100, A100'],
    ];
    for (const [extra, field, reason] of cases) {
      const refused = await post('/v1/clusters', { name: `bounded-${field}`, template_id: id, ...extra });
      expect(refused.status, field).toBe(400);
      expect(refused.body.error).toMatchObject({
        code: 'VALIDATION_ERROR',
        details: { field, reason: expect.stringContaining(reason) },
      });
    }
    expect(await t.context.db.prisma.cluster.count({ where: { name: { startsWith: 'bounded-' } } })).toBe(0);
    const fits = await post('/v1/clusters', { name: 'bounded-ok', template_id: id, gpu_count: 1 });
    expect(fits.status, JSON.stringify(fits.body)).toBe(201);
  });

  it('refuses template fields it cannot act on (is_public, required_packages) and has no rating sort', async () => {
    const base = t.app.server.listening
      ? `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`
      : await t.app.listen({ host: '127.0.0.1', port: 0 });
    const send = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${t.ownerKey}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return {
        status: res.status,
        body: (await res.json()) as { error?: { code: string; details: unknown } },
      };
    };
    const before = await t.context.db.prisma.clusterTemplate.count();
    for (const [extra, field] of [
      [{ is_public: true }, 'is_public'],
      [{ required_packages: ['numpy'] }, 'required_packages'],
    ] as const) {
      const res = await send('POST', BASE, minimal(`inert-${field}`, extra));
      expect(res.status, field).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'NOT_SUPPORTED', details: { field } });
    }
    expect(await t.context.db.prisma.clusterTemplate.count()).toBe(before);
    const own = await send('POST', BASE, minimal('inert-ok', { is_public: false, required_packages: [] }));
    expect(own.status).toBe(201);
    const id = (own.body as unknown as { data: { id: string } }).data.id;
    const put = await send('PUT', `${BASE}/${id}`, { is_public: true });
    expect(put.status).toBe(400);
    expect(put.body.error).toMatchObject({ code: 'NOT_SUPPORTED' });
    expect((await send('GET', `${BASE}?sort_by=rating`)).status).toBe(400);
  });
});
