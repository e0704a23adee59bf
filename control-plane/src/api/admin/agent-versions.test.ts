import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactFileName } from '../../agent-artifacts/build.ts';
import { addAccount, addMember, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

const PUBLISHED = '9.9.9';
const BYTES = Buffer.from('not really a tarball, but served byte for byte');
const SHA = createHash('sha256').update(BYTES).digest('hex');

/**
 * Agent versions through the API: the public install script and artifacts, the fleet's version and
 * per-host pins (issue 20 point 2). An artifact of 9.9.9 is published by writing its files as
 * `npm run build:agent-artifact` does; nothing here builds the bundled version (the e2e test does).
 */
describe('agent artifacts and versions', () => {
  let t: TestApp;
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'anvil-artifacts-'));
    const file = artifactFileName(PUBLISHED, 'x64');
    await mkdir(join(dir, PUBLISHED));
    await writeFile(join(dir, PUBLISHED, file), BYTES);
    await writeFile(
      join(dir, PUBLISHED, `${file}.json`),
      JSON.stringify({
        version: PUBLISHED,
        arch: 'x64',
        file,
        sha256: SHA,
        sizeBytes: BYTES.length,
        nodeVersion: 'v20.20.2',
        builtAt: '2026-11-27T00:00:00.000Z',
      }),
    );
    t = await createTestApp({
      env: { ANVIL_AGENT_ARTIFACTS_DIR: dir, ANVIL_PUBLIC_URL: 'https://cp.example.com' },
    });
    await t.context.db.prisma.host.create({
      data: {
        id: 'host_av',
        name: 'gpu-01',
        hostname: 'gpu-01',
        credentialHash: 'e'.repeat(64),
        agentVersion: '0.1.0',
        inventory: { host: { os: { arch: 'x64' } } },
      },
    });
  });

  afterAll(async () => {
    await t.close();
  });

  it('serves install.sh with the URL it was reached at and the fleet version filled in', async () => {
    const res = await t.app.inject({ url: '/install.sh', headers: { host: 'cp.internal:8080' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/x-shellscript');
    expect(res.body).toContain("\nDEFAULT_CONTROL_PLANE='http://cp.internal:8080'\n");
    expect(res.body).toContain("\nDEFAULT_VERSION='0.1.0'\n");
    // A Host header that is no plain host[:port] never reaches the script: the public URL does.
    const hostile = await t.app.inject({ url: '/install.sh', headers: { host: "x';reboot;'" } });
    expect(hostile.body).toContain("\nDEFAULT_CONTROL_PLANE='https://cp.example.com'\n");
    expect(hostile.body).not.toContain('reboot');
  });

  it('prints the one-line install in the join-token answer', async () => {
    const res = await call(t, {
      method: 'POST',
      url: '/v2/admin/hosts/join-tokens',
      payload: {},
      headers: { host: 'cp.internal:8080' },
    });
    expect(res.statusCode).toBe(201);
    const { value, installCommand } = res.json();
    expect(installCommand).toBe(
      `curl -fsSL http://cp.internal:8080/install.sh | sudo sh -s -- --join-token ${value}`,
    );
  });

  it('serves a published artifact with its SHA-256, and 404s anything else', async () => {
    const base = `/agent/artifacts/${PUBLISHED}/${artifactFileName(PUBLISHED, 'x64')}`;
    const artifact = await t.app.inject({ url: base });
    expect(artifact.statusCode).toBe(200);
    expect(artifact.rawPayload.equals(BYTES)).toBe(true);
    expect(artifact.headers['x-content-sha256']).toBe(SHA);
    const sum = await t.app.inject({ url: `${base}.sha256` });
    expect(sum.body).toBe(`${SHA}  ${artifactFileName(PUBLISHED, 'x64')}\n`);
    const manifest = (await t.app.inject({ url: '/agent/artifacts/manifest.json' })).json();
    expect(manifest).toMatchObject({ desiredVersion: '0.1.0', bundledVersion: '0.1.0' });
    expect(manifest.versions).toEqual([
      { version: '0.1.0', artifacts: [], buildOnRequest: [process.arch] },
      {
        version: PUBLISHED,
        artifacts: [
          {
            arch: 'x64',
            os: 'linux',
            file: artifactFileName(PUBLISHED, 'x64'),
            url: base,
            sha256: SHA,
            sizeBytes: BYTES.length,
            nodeVersion: 'v20.20.2',
            builtAt: '2026-11-27T00:00:00.000Z',
          },
        ],
        buildOnRequest: [],
      },
    ]);
    for (const url of [
      `/agent/artifacts/${PUBLISHED}/${artifactFileName(PUBLISHED, 'arm64')}`,
      `/agent/artifacts/8.8.8/${artifactFileName('8.8.8', 'x64')}`,
      `/agent/artifacts/${PUBLISHED}/..%2F..%2Fsecret.key`,
      `/agent/artifacts/..%2F/${artifactFileName(PUBLISHED, 'x64')}`,
    ]) {
      const res = await t.app.inject({ url });
      expect(res.statusCode, url).toBe(404);
      expect(res.json().error).toBe('NOT_FOUND');
    }
  });

  it("sets the fleet's version to a published one only, audit-logged; null is manual", async () => {
    const initial = (await call(t, { url: '/v2/admin/agent-version' })).json();
    expect(initial).toMatchObject({ desiredVersion: '0.1.0', source: 'default', bundledVersion: '0.1.0' });
    expect(initial.availableVersions).toEqual(['0.1.0', PUBLISHED]);

    const unknown = await call(t, {
      method: 'PUT',
      url: '/v2/admin/agent-version',
      payload: { desiredVersion: '7.7.7' },
    });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().error).toBe('VALIDATION_ERROR');
    expect((await call(t, { url: '/v2/admin/agent-version' })).json().source).toBe('default');

    const set = await call(t, {
      method: 'PUT',
      url: '/v2/admin/agent-version',
      payload: { desiredVersion: PUBLISHED },
    });
    expect(set.statusCode, set.body).toBe(200);
    expect(set.json()).toMatchObject({ desiredVersion: PUBLISHED, source: 'admin', updatedById: t.userId });
    const manual = await call(t, {
      method: 'PUT',
      url: '/v2/admin/agent-version',
      payload: { desiredVersion: null },
    });
    expect(manual.json()).toMatchObject({ desiredVersion: null, source: 'admin' });

    const audit = (await call(t, { url: '/v2/accounts/permissions/audit?type=fleet_change' })).json();
    expect(
      audit.events.map((e: { action: string; details: { to: unknown } }) => [e.action, e.details.to]),
    ).toEqual([
      ['agent_version_set', null],
      ['agent_version_set', PUBLISHED],
    ]);
  });

  it('pins a host (upgraded when its agent next connects), unpins it, refuses unknown versions and hosts', async () => {
    const pinned = await call(t, {
      method: 'POST',
      url: '/v2/admin/hosts/host_av/upgrade',
      payload: { version: PUBLISHED },
    });
    expect(pinned.statusCode, pinned.body).toBe(200);
    expect(pinned.json().host).toMatchObject({
      current: '0.1.0',
      pinned: PUBLISHED,
      desired: PUBLISHED,
      arch: 'x64',
    });
    expect(pinned.json().upgrade.sent).toBe(false);
    expect(pinned.json().upgrade.reason).toContain('not connected');

    // Unpinned, the host follows the fleet: manual since the previous test, so nothing is desired.
    const unpinned = await call(t, {
      method: 'POST',
      url: '/v2/admin/hosts/host_av/upgrade',
      payload: { version: null },
    });
    expect(unpinned.json().host).toMatchObject({ pinned: null, desired: null });

    const missing = await call(t, {
      method: 'POST',
      url: '/v2/admin/hosts/host_av/upgrade',
      payload: { version: '7.7.7' },
    });
    expect(missing.statusCode).toBe(400);
    expect(missing.json().message).toContain('no agent artifact of version 7.7.7 for linux-x64');
    const row = await t.context.db.prisma.host.findUnique({ where: { id: 'host_av' } });
    expect(row?.agentVersionPin).toBeNull();

    const bad = await call(t, {
      method: 'POST',
      url: '/v2/admin/hosts/host_av/upgrade',
      payload: { version: '../x' },
    });
    expect(bad.statusCode).toBe(400);
    const noHost = await call(t, { method: 'POST', url: '/v2/admin/hosts/host_nope/upgrade', payload: {} });
    expect(noHost.statusCode).toBe(404);
    expect(noHost.json().error).toBe('HOST_NOT_FOUND');

    const audit = (await call(t, { url: '/v2/accounts/permissions/audit?type=fleet_change' })).json();
    const upgrades = audit.events.filter((e: { action: string }) => e.action === 'agent_upgrade');
    expect(
      upgrades.map((e: { resource: { id: string }; details: { pinned: unknown } }) => [
        e.resource.id,
        e.details.pinned,
      ]),
    ).toEqual([
      ['host_av', null],
      ['host_av', PUBLISHED],
    ]);
  });

  it("is for operators only: a tenant's owner and an operator-account developer get 403", async () => {
    const tenant = await addAccount(t, 'Tenant');
    const developer = await addMember(t, { role: 'developer' });
    for (const key of [tenant, developer]) {
      expect((await call(t, { url: '/v2/admin/agent-version', key })).statusCode).toBe(403);
      const upgrade = await call(t, {
        method: 'POST',
        url: '/v2/admin/hosts/host_av/upgrade',
        key,
        payload: {},
      });
      expect(upgrade.statusCode).toBe(403);
    }
    expect(
      (await t.context.db.prisma.host.findUnique({ where: { id: 'host_av' } }))?.agentVersionPin,
    ).toBeNull();
  });
});
