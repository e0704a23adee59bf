import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readFile, readlink, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { artifactFileName } from '../../control-plane/src/agent-artifacts/build.ts';
import { tempDir } from '../agent/harness.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { type AgentProcess, spawnAgent } from './agent-process.ts';
import { FleetControlPlane } from './control-plane.ts';
import { waitFor } from './wait.ts';

const NEXT = '9.9.9-fleet';

vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * The fleet's desired version reaches an agent at its hello: the control plane sends upgrade_agent, the
 * agent (installed: ANVIL_INSTALL_DIR) downloads the artifact, checks it, switches `current` and exits 0
 * for systemd to start the new version. The artifact here is a small stand-in (VERSION and a file): what
 * is tested is the path from the setting to the switched link and the exit, not the artifact's contents
 * (test/installer/self-install.e2e.test.ts runs real ones).
 */
describe.skipIf(!dockerOrFail('agent upgrade test'))('fleet-wide agent version', () => {
  let cp: FleetControlPlane;
  let agent: AgentProcess | undefined;

  beforeAll(async () => {
    const artifacts = await tempDir('anvil-upgrade-artifacts-');
    const arch = process.arch === 'arm64' ? 'arm64' : 'x64';
    const src = await tempDir('anvil-upgrade-src-');
    await writeFile(join(src, 'VERSION'), `${NEXT}\n`);
    await writeFile(join(src, 'marker'), 'new version\n');
    const body = execFileSync('tar', ['-czf', '-', '-C', src, '.']);
    const file = artifactFileName(NEXT, arch);
    await mkdir(join(artifacts, NEXT));
    await writeFile(join(artifacts, NEXT, file), body);
    await writeFile(
      join(artifacts, NEXT, `${file}.json`),
      JSON.stringify({
        version: NEXT,
        arch,
        file,
        sha256: createHash('sha256').update(body).digest('hex'),
        sizeBytes: body.length,
        nodeVersion: null,
        builtAt: new Date().toISOString(),
      }),
    );
    cp = await FleetControlPlane.start({ env: { ANVIL_AGENT_ARTIFACTS_DIR: artifacts } });
  });

  afterAll(async () => {
    await agent?.kill('SIGKILL');
    await cp?.close();
  });

  it('upgrades an agent that says hello with another version, which exits to run it', async () => {
    const set = await cp.call('PUT', '/v2/admin/agent-version', { body: { desiredVersion: NEXT } });
    expect(set.status, set.text).toBe(200);

    const install = await tempDir('anvil-upgrade-install-');
    await mkdir(join(install, 'versions/0.1.0'), { recursive: true });
    await symlink('versions/0.1.0', join(install, 'current'));
    agent = await spawnAgent({
      controlPlaneUrl: cp.url,
      joinToken: await cp.joinToken(),
      env: { ANVIL_INSTALL_DIR: install },
    });
    const code = await waitFor(
      'the agent to exit after staging the upgrade',
      async () => (agent!.child.exitCode === null ? null : agent!.child.exitCode),
      240_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${agent!.summary()}`);
    });
    expect(code, agent.summary()).toBe(0);
    expect(await readlink(join(install, 'current'))).toBe(`versions/${NEXT}`);
    expect(await readFile(join(install, 'current/marker'), 'utf8')).toBe('new version\n');
    expect(agent.stdout()).toContain('stopping to run the new version');
    const { hostId } = JSON.parse(await readFile(join(agent.stateDir, 'credential.json'), 'utf8')) as {
      hostId: string;
    };
    expect((await cp.host(hostId)).agentVersion).toBe('0.1.0');
  });
});
