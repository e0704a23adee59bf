import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UPLOAD_BASE_PATH } from '../datasets/index.ts';
import { call } from '../testing/accounts.ts';
import { createTestApp, type TestApp } from '../testing/index.ts';

describe('OpenAPI document and docs UI', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => t.close());

  it('serves an OpenAPI 3.1 document without authentication', async () => {
    const res = await t.app.inject({ url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.info.description).toContain('required_permission');
  });

  it('states how serverless workers are billed, the RunPod worker contract and cold starts', async () => {
    const doc = (await t.app.inject({ url: '/openapi.json' })).json();
    const create = doc.paths['/v2/endpoints'].post.description as string;
    expect(create).toContain('workers bill their uptime, as RunPod bills active workers');
    expect(create).toContain('workerProtocol runpod');
    expect(create).toContain('delayTime (queued to started) therefore includes the cold start');
    expect(doc.paths['/v2/{endpoint_id}/run'].post.description).toContain('RUNPOD_AI_API_KEY');
  });

  it('documents every API route with its success and error responses', async () => {
    const doc = (await t.app.inject({ url: '/openapi.json' })).json();
    const expected = [
      ['post', '/v2/auth/api-keys'],
      ['get', '/v2/auth/api-keys'],
      ['delete', '/v2/auth/api-keys/{key_id}'],
      ['post', '/v2/auth/api-keys/{key_id}/rotate'],
      ['get', '/v2/auth/verify'],
      ['get', '/healthz'],
      ['get', '/readyz'],
    ] as const;
    for (const [method, path] of expected) {
      const operation = doc.paths[path]?.[method];
      expect(operation, `${method.toUpperCase()} ${path}`).toBeDefined();
      const statuses = Object.keys(operation.responses);
      expect(
        statuses.some((s) => s.startsWith('2')),
        `${path} has a 2xx response`,
      ).toBe(true);
    }
    for (const [path, item] of Object.entries<Record<string, { responses: Record<string, unknown> }>>(
      doc.paths,
    )) {
      if (!path.startsWith('/v')) continue;
      for (const [method, operation] of Object.entries(item)) {
        expect(Object.keys(operation.responses), `${method} ${path} documents 401`).toContain('401');
      }
    }
  });

  it("covers every operation of the specification outside the roadmap's later sections", async () => {
    const doc = (await t.app.inject({ url: '/openapi.json' })).json();
    const documented = new Set<string>();
    for (const [path, item] of Object.entries<Record<string, unknown>>(doc.paths)) {
      for (const method of Object.keys(item)) documented.add(`${method.toUpperCase()} ${path}`);
    }
    const operations = readFileSync(new URL('./spec-operations.tsv', import.meta.url), 'utf8')
      .split('\n')
      .filter((line) => line && !line.startsWith('#') && !line.startsWith('method\t'))
      .map((line) => {
        const [method, path, section] = line.split('\t');
        // The spec's {upload_url} is the dataset upload base Anvil hands out (datasets/view.ts).
        const served = path!.replace('{upload_url}', UPLOAD_BASE_PATH);
        return { operation: `${method} ${served}`, section: section! };
      });
    expect(operations.length).toBeGreaterThan(100);
    // Every operation of the spec, in every section, is served.
    const missing = operations
      .filter((o) => !documented.has(o.operation))
      .map((o) => `${o.operation} (${o.section})`);
    expect(missing).toEqual([]);
  });

  it('bounds every numeric path and query parameter to what the database can take', async () => {
    // A query such as ?offset=1e308 passed an unbounded integer schema and reached Prisma, which
    // refused it with a 500; a bound in the schema answers 400 VALIDATION_ERROR before the handler.
    const doc = (await t.app.inject({ url: '/openapi.json' })).json();
    type Schema = { type?: string | string[]; maximum?: number; minimum?: number; anyOf?: Schema[] };
    const numeric = (s: Schema): Schema[] =>
      s.anyOf
        ? s.anyOf.flatMap(numeric)
        : [s.type].flat().some((x) => x === 'integer' || x === 'number')
          ? [s]
          : [];
    const unbounded: string[] = [];
    const probes: string[] = [];
    for (const [path, item] of Object.entries<
      Record<string, { parameters?: { name: string; in: string; schema?: Schema }[] }>
    >(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        for (const parameter of operation.parameters ?? []) {
          for (const s of numeric(parameter.schema ?? {})) {
            // Page offsets and sizes reach Prisma's skip/take and SQL OFFSET/LIMIT: 32-bit there.
            const ceiling = ['offset', 'limit'].includes(parameter.name)
              ? 2_147_483_647
              : Number.MAX_SAFE_INTEGER;
            if (
              s.maximum === undefined ||
              s.minimum === undefined ||
              s.maximum > ceiling ||
              s.minimum < -ceiling
            )
              unbounded.push(`${method.toUpperCase()} ${path} ${parameter.in} ${parameter.name}`);
            else if (method === 'get' && parameter.in === 'query' && !path.includes('{'))
              probes.push(`${path}?${parameter.name}=`);
          }
        }
      }
    }
    expect(unbounded, unbounded.join('\n')).toEqual([]);
    // And the lists reachable without an id answer such values with 400 in the spec's shape.
    expect(probes.length).toBeGreaterThan(5);
    const answers: string[] = [];
    for (const probe of probes) {
      for (const value of ['1e308', '99999999999999999999999', '2147483648', '-1e308']) {
        const res = await call(t, { url: `${probe}${value}` });
        const code = probe.startsWith('/v1/') ? res.json().error?.code : res.json().error;
        if (res.statusCode !== 400 || !['VALIDATION_ERROR', 'INVALID_PARAMETERS'].includes(code))
          answers.push(`${probe}${value} -> ${res.statusCode} ${res.body.slice(0, 120)}`);
      }
    }
    expect(answers, answers.join('\n')).toEqual([]);
  });

  it('serves the docs UI', async () => {
    const res = await t.app.inject({ url: '/docs/' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/html');
  });
});
