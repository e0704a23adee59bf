import { readdir, readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { TSchema } from '@sinclair/typebox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENFORCED_SETTINGS, enforcedEntry } from '../../accounts/settings-enforcement.ts';
import { REFUSED_SETTINGS, refusedEntry } from '../../accounts/settings-refused.ts';
import { defaultSettings, SECTION_NAMES, SECTION_SCHEMAS } from '../../accounts/settings-schema.ts';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';

type Schema = TSchema & {
  type?: string;
  properties?: Record<string, Schema>;
  anyOf?: Schema[];
  enum?: unknown[];
  items?: Schema;
  minimum?: number;
  maximum?: number;
};

/** Every field of the settings schema, as dotted paths with their schemas (objects are walked into). */
function leaves(schema: Schema, path: string[], out: [string, Schema][]): [string, Schema][] {
  if (schema.type === 'object' && schema.properties) {
    for (const [key, child] of Object.entries(schema.properties)) leaves(child, [...path, key], out);
  } else {
    out.push([path.join('.'), schema]);
  }
  return out;
}

const FIELDS = SECTION_NAMES.flatMap((section) => leaves(SECTION_SCHEMAS[section] as Schema, [section], []));

/** Values the schema accepts for fields a generic rule cannot make up (patterns, formats, shapes). */
const SAMPLES: Record<string, unknown> = {
  'billing.timezone': 'Europe/Berlin',
  'billing.payment_method': { type: 'card', last_four: '4242' },
  'billing.billing_address.country': 'DE',
  'integrations.github.repositories': ['acme/models'],
  'integrations.github.username': 'octo-cat',
  'integrations.docker.registries': [{ url: 'registry.example.com' }],
  'integrations.monitoring.grafana.url': 'https://grafana.example.com',
  'preferences.timezone': 'Europe/Berlin',
};

function get(doc: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)?.[key], doc);
}

/** A schema-valid value that differs from what the field reads as. */
function otherValue(path: string, schema: Schema, shown: unknown): unknown {
  if (path in SAMPLES) return SAMPLES[path];
  const branch = schema.anyOf?.find((s) => s.type !== 'null') ?? schema;
  if (branch.enum) return branch.enum.find((value) => value !== shown);
  switch (branch.type) {
    case 'boolean':
      return shown !== true;
    case 'integer':
    case 'number': {
      const low = branch.minimum ?? 1;
      return shown === low ? low + 1 : low;
    }
    case 'string':
      return 'x-value';
    default:
      throw new Error(`no sample value for ${path}: add one to SAMPLES`);
  }
}

function nest(path: string[], value: unknown): Record<string, unknown> {
  return path.reduceRight<Record<string, unknown>>(
    (inner, key) => ({ [key]: inner }),
    value as Record<string, unknown>,
  );
}

async function testFiles(dir: string, out: string[] = []): Promise<string[]> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    const full = join(dir, entry.name);
    if (entry.isDirectory()) await testFiles(full, out);
    else if (entry.name.endsWith('.test.ts')) out.push(full);
  }
  return out;
}

describe('account settings: every field acts or is refused', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await createTestApp();
    // PUT /accounts/* is limited to 50 an hour (spec); the table walk sends more.
    const boost = await call(t, {
      method: 'POST',
      url: '/v2/auth/temporary-boost',
      payload: { multiplier: 10, duration: '1h', reason: 'tests' },
    });
    expect(boost.statusCode, boost.body).toBe(201);
  });
  afterAll(async () => t?.close());

  it('lists every schema field exactly once: enforced (with its test) or refused', async () => {
    expect(FIELDS.length).toBeGreaterThan(40);
    const unlisted = FIELDS.filter(([path]) => !enforcedEntry(path) && !refusedEntry(path)).map(([p]) => p);
    expect(unlisted, 'fields neither enforced nor refused').toEqual([]);
    const both = FIELDS.filter(([path]) => enforcedEntry(path) && refusedEntry(path)).map(([p]) => p);
    expect(both, 'fields both enforced and refused').toEqual([]);
    // No entry names a field the schema does not have.
    const paths = FIELDS.map(([path]) => path);
    for (const entry of [...Object.keys(ENFORCED_SETTINGS), ...Object.keys(REFUSED_SETTINGS)]) {
      expect(
        paths.some((path) => path === entry || path.startsWith(`${entry}.`)),
        entry,
      ).toBe(true);
    }
    // Every enforced field names a test that exists.
    const root = resolve(import.meta.dirname, '../../../..');
    const sources = await Promise.all(
      [...(await testFiles(join(root, 'control-plane/src'))), ...(await testFiles(join(root, 'test')))].map(
        (file) => readFile(file, 'utf8'),
      ),
    );
    const missing = [...new Set(Object.values(ENFORCED_SETTINGS))].filter(
      (name) => !sources.some((source) => source.includes(name)),
    );
    expect(missing, 'enforced fields whose named test is missing').toEqual([]);
  });

  it('refuses each refused field with 400 NOT_SUPPORTED naming it, changing nothing, and reads it as its default', async () => {
    const defaults = defaultSettings('admin@localhost') as Record<string, unknown>;
    const refused = FIELDS.filter(([path]) => refusedEntry(path));
    expect(refused.length).toBeGreaterThan(20);
    for (const [path, schema] of refused) {
      const [section, ...rest] = path.split('.');
      const shown = get(defaults, path);
      const row = () => t.context.db.prisma.accountSettings.findUnique({ where: { accountId: t.accountId } });
      const before = await row();
      const res = await call(t, {
        method: 'PUT',
        url: `/v2/accounts/settings/${section}`,
        payload: nest(rest, otherValue(path, schema, shown)),
      });
      expect(res.statusCode, `${path}: ${res.body}`).toBe(400);
      expect(res.json(), path).toMatchObject({
        error: 'NOT_SUPPORTED',
        details: {
          // Relative to the section, as validation errors are; an object down to the member that differs.
          field: expect.stringMatching(new RegExp(`^${rest.join('\\.')}(\\.|$)`)),
          setting: refusedEntry(path),
          reason: expect.any(String),
        },
      });
      expect(await row(), `${path}: nothing written`).toEqual(before);
      // Sending the value it reads as is accepted (an unchanged export imports).
      const same = await call(t, {
        method: 'PUT',
        url: `/v2/accounts/settings/${section}`,
        payload: nest(rest, shown),
      });
      expect(same.statusCode, `${path} sent back as shown: ${same.body}`).toBe(200);
    }
    const read = (await call(t, { url: '/v2/accounts/settings' })).json().settings;
    for (const [path] of refused) expect(get(read, path), path).toEqual(get(defaults, path));
  });

  it('refuses through the short form and the import too, naming the field as sent', async () => {
    const short = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings',
      payload: { security: { sessionTimeout: 12 } },
    });
    expect(short.statusCode).toBe(400);
    expect(short.json()).toMatchObject({
      error: 'NOT_SUPPORTED',
      details: { field: 'security.session.timeout' },
    });
    const before = await t.context.db.prisma.accountSettings.findUnique({
      where: { accountId: t.accountId },
    });
    const imported = await call(t, {
      method: 'POST',
      url: '/v2/accounts/settings/import',
      payload: {
        settings: {
          preferences: { default_region: 'eu-west-1' },
          integrations: { monitoring: { datadog: { enabled: true, api_key: 'dd_key' } } },
        },
      },
    });
    expect(imported.statusCode).toBe(400);
    expect(imported.json()).toMatchObject({
      error: 'NOT_SUPPORTED',
      message: expect.stringContaining('/metrics'),
      details: { field: 'settings.integrations.monitoring.datadog.enabled' },
    });
    // Nothing of the import was written, the valid section included.
    expect(
      await t.context.db.prisma.accountSettings.findUnique({ where: { accountId: t.accountId } }),
    ).toEqual(before);
    const billing = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/billing',
      payload: { currency: 'EUR' },
    });
    expect(billing.json()).toMatchObject({
      error: 'NOT_SUPPORTED',
      message: expect.stringContaining('USD'),
      details: { field: 'currency', setting: 'billing.currency', supported_value: 'USD' },
    });
  });

  it('billing-timezone: usage periods start at midnight in billing.timezone', async () => {
    const utc = (await call(t, { url: '/v2/accounts/usage?period=day' })).json();
    expect(utc.timezone).toBe('UTC');
    expect(utc.periodStart).toMatch(/T00:00:00\.000Z$/);
    const set = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/billing',
      payload: { timezone: 'Asia/Tokyo' },
    });
    expect(set.statusCode, set.body).toBe(200);
    const tokyo = (await call(t, { url: '/v2/accounts/usage?period=day' })).json();
    expect(tokyo.timezone).toBe('Asia/Tokyo');
    // Midnight in Tokyo (UTC+9, no daylight saving) is 15:00 UTC.
    expect(tokyo.periodStart).toMatch(/T15:00:00\.000Z$/);
  });

  it('default-region-gpu: a cluster create that omits gpu_type or region, and a training job that omits its GPU type, use the preferences', async () => {
    await insertSimulatedHosts(t.context.db, { prefix: 'h', count: 1, gpusPerHost: 2, region: 'us-east-1' });
    const [a100Host] = await insertSimulatedHosts(t.context.db, {
      prefix: 'a',
      count: 1,
      gpusPerHost: 1,
      region: 'eu-west-1',
      gpuName: 'NVIDIA A100-SXM4-80GB',
    });
    const create = (payload: Record<string, unknown>) =>
      call(t, { method: 'POST', url: '/v1/clusters', payload: { docker_image: 'busybox', ...payload } });
    const without = await create({ name: 'no-defaults' });
    expect(without.statusCode).toBe(400);
    expect(without.json().error).toMatchObject({ code: 'VALIDATION_ERROR', details: { field: 'gpu_type' } });
    const unknownType = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/preferences',
      payload: { default_gpu_type: 'A100-80GB' },
    });
    expect(unknownType.statusCode).toBe(400);
    expect(unknownType.json().details.field).toBe('default_gpu_type');
    const set = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings',
      payload: { defaults: { defaultGpuType: 'A100', defaultRegion: 'eu-west-1' } },
    });
    expect(set.statusCode, set.body).toBe(200);
    const defaulted = await create({ name: 'defaulted' });
    expect(defaulted.statusCode, defaulted.body).toBe(201);
    const row = await t.context.db.prisma.cluster.findUniqueOrThrow({
      where: { id: defaulted.json().data.id },
    });
    expect(row).toMatchObject({ gpuType: 'A100', region: 'eu-west-1', hostId: a100Host });
    // What the request gives wins.
    const explicit = await create({ name: 'explicit', gpu_type: 'H100', region: 'us-east-1' });
    expect(explicit.statusCode, explicit.body).toBe(201);
    const explicitRow = await t.context.db.prisma.cluster.findUniqueOrThrow({
      where: { id: explicit.json().data.id },
    });
    expect(explicitRow).toMatchObject({ gpuType: 'H100', region: 'us-east-1' });

    // A training job that names no GPU type takes the default too; one that names its type keeps it.
    const dataset = await call(t, {
      method: 'POST',
      url: '/v2/training/datasets',
      payload: { name: 'defaults', type: 'text', format: 'jsonl' },
    });
    expect(dataset.statusCode, dataset.body).toBe(201);
    const { id: datasetId, uploadToken } = dataset.json();
    const upload = await t.app.inject({
      method: 'PUT',
      url: `/v2/training/uploads/datasets/${datasetId}`,
      headers: { authorization: `Bearer ${uploadToken}`, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('{"text":"a"}\n'.repeat(20)),
    });
    expect(upload.statusCode, upload.body).toBe(202);
    await t.context.datasets.processor.idle();
    const job = (infrastructure?: Record<string, unknown>) =>
      call(t, {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: {
          name: `job-${infrastructure ? 'explicit' : 'defaulted'}`,
          datasetConfig: { datasetId },
          ...(infrastructure ? { infrastructure } : {}),
        },
      });
    const gpuTypeOf = async (res: Awaited<ReturnType<typeof job>>) => {
      expect(res.statusCode, res.body).toBeLessThan(300);
      const body = res.json();
      const jobId = (body.jobId ?? body.id ?? body.data?.id) as string;
      return (await t.context.db.prisma.trainingJob.findUniqueOrThrow({ where: { id: jobId } })).gpuType;
    };
    expect(await gpuTypeOf(await job())).toBe('A100');
    expect(await gpuTypeOf(await job({ gpuType: 'H100' }))).toBe('H100');
  });
});
