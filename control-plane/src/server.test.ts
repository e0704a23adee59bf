import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateApiKey } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ControlPlaneProcess,
  createPostgresDatabase,
  freePort,
  spawnControlPlane,
  testDatabaseKind,
} from './testing/index.ts';

/** The real entry point as an operator runs it: real process, real HTTP, real database on disk. */
describe('control plane process', () => {
  let dataDir: string;
  let databaseUrl: string | null = null;
  let dropDatabase: (() => Promise<void>) | null = null;
  const running: ControlPlaneProcess[] = [];

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'anvil-server-test-'));
    if (testDatabaseKind() === 'postgres') {
      const created = await createPostgresDatabase();
      databaseUrl = created.url;
      dropDatabase = created.drop;
    }
  });
  afterAll(async () => {
    for (const proc of running) proc.child.kill('SIGKILL');
    await dropDatabase?.();
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function start(env: Record<string, string> = {}, nodeFlags?: readonly string[]) {
    const port = await freePort();
    const proc = spawnControlPlane(
      {
        PORT: String(port),
        ANVIL_HOST: '127.0.0.1',
        ANVIL_DATA_DIR: dataDir,
        ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
        ...env,
      },
      nodeFlags ? { nodeFlags } : {},
    );
    running.push(proc);
    await proc.waitForOutput(/control plane listening/);
    return { proc, base: `http://127.0.0.1:${port}` };
  }

  let ownerKey = '';

  it('prints a generated owner key once on first start, serves it, and shuts down gracefully on SIGTERM', async () => {
    const { proc, base } = await start();
    const match = /Owner API key \(shown once, store it now\):\s+(anv_live_\w+)/.exec(proc.stdout());
    expect(match).not.toBeNull();
    ownerKey = match![1]!;

    const verify = await fetch(`${base}/v2/auth/verify`, {
      headers: { authorization: `Bearer ${ownerKey}`, 'x-request-id': 'trace-123' },
    });
    expect(verify.status).toBe(200);
    expect(verify.headers.get('x-request-id')).toBe('trace-123');
    expect(await verify.json()).toMatchObject({ valid: true, permissions: ['read', 'write'] });
    expect(proc.stdout()).toContain('"request_id":"trace-123"');
    // Started as npm start starts it: no warning about missing V8 flags.
    expect(proc.stdout()).not.toContain('missing_node_flags');
    expect((await fetch(`${base}/readyz`)).status).toBe(200);

    // An upload still arriving when SIGTERM lands must complete, then the process exits cleanly.
    const body = JSON.stringify({ name: 'in-flight', permissions: ['read'], scopes: ['accounts'] });
    const inFlight = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(`${base}/v2/auth/api-keys`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ownerKey}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });
      req.on('response', (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      });
      req.on('error', reject);
      req.write(body.slice(0, 10));
      setTimeout(() => {
        proc.child.kill('SIGTERM');
        setTimeout(() => req.end(body.slice(10)), 300);
      }, 200);
    });
    const response = await inFlight;
    expect(response.status).toBe(201);
    expect(await proc.exited).toBe(0);
    expect(proc.stdout()).toContain('"msg":"stopped"');
  });

  it('keeps every row across a restart and never creates a second owner key', async () => {
    // Restarted by a plain `node` (as a hand-written service unit might): it runs, and says what it lacks.
    const { proc, base } = await start({}, []);
    expect(proc.stdout()).not.toContain('Owner API key');
    expect(proc.stdout()).toMatch(/"missing_node_flags":\["--max-semi-space-size=64"\]/);
    const list = await fetch(`${base}/v2/auth/api-keys`, {
      headers: { authorization: `Bearer ${ownerKey}` },
    });
    expect(list.status).toBe(200);
    const keys = (await list.json()) as { api_keys: { name: string }[] };
    expect(keys.api_keys.map((k) => k.name).sort()).toEqual(['Owner bootstrap key', 'in-flight']);
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(0);
  });

  it('stops with one clear line on invalid configuration', async () => {
    const proc = spawnControlPlane({ PORT: 'eighty', ANVIL_DATA_DIR: dataDir });
    running.push(proc);
    expect(await proc.exited).toBe(78);
    expect(proc.stderr().trim()).toBe('anvil: invalid configuration: PORT must be an integer, got "eighty"');
  });
});

describe('bootstrap key from the environment', () => {
  it('uses ANVIL_BOOTSTRAP_API_KEY on an empty database and prints nothing', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'anvil-bootstrap-test-'));
    const created = testDatabaseKind() === 'postgres' ? await createPostgresDatabase() : null;
    const key = generateApiKey('live');
    const port = await freePort();
    const proc = spawnControlPlane({
      PORT: String(port),
      ANVIL_HOST: '127.0.0.1',
      ANVIL_DATA_DIR: dataDir,
      ANVIL_BOOTSTRAP_API_KEY: key,
      ...(created ? { DATABASE_URL: created.url } : {}),
    });
    try {
      await proc.waitForOutput(/control plane listening/);
      expect(proc.stdout()).not.toContain('Owner API key');
      expect(proc.stdout()).not.toContain(key);
      const verify = await fetch(`http://127.0.0.1:${port}/v2/auth/verify`, {
        headers: { authorization: `Bearer ${key}` },
      });
      expect(verify.status).toBe(200);
    } finally {
      proc.child.kill('SIGTERM');
      await proc.exited;
      await created?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
