import { randomBytes } from 'node:crypto';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { ensureBusyboxImage } from '../../../test/fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../../../test/fixtures/images/docker.ts';
import { buildCreateOptions } from './container-config.ts';
import { specHash } from './labels.ts';
import { createContainerRuntime } from './runtime.ts';

/** Contract 5 on the agent side: secret env and files reach the container, and stay out of the spec hash. */
describe('secret env and files', () => {
  const context = { hostId: 'host_s', volumeRoot: '/v', gpuMode: 'env-only' as const };

  it('merges secretEnv into the env (secrets win, the GPU variable stays last and ours)', () => {
    const spec = workloadSpec('w1', {
      env: { A: '1', TOKEN: 'plain' },
      secretEnv: { TOKEN: 'secret', NVIDIA_VISIBLE_DEVICES: 'all' },
    });
    expect(buildCreateOptions(spec, { ...context, specHash: 'h' }).Env).toEqual([
      'A=1',
      'TOKEN=secret',
      'NVIDIA_VISIBLE_DEVICES=void',
    ]);
  });

  it('leaves secretEnv and files out of the spec hash', () => {
    const plain = workloadSpec('w1');
    const withSecrets = workloadSpec('w1', {
      secretEnv: { TOKEN: 'v1' },
      files: [{ path: '/run/secrets/t', mode: 0o400, contentBase64: 'djE=' }],
    });
    const rotated = workloadSpec('w1', {
      secretEnv: { TOKEN: 'v2' },
      files: [{ path: '/run/secrets/t', mode: 0o400, contentBase64: 'djI=' }],
    });
    expect(specHash(withSecrets, context)).toBe(specHash(plain, context));
    expect(specHash(rotated, context)).toBe(specHash(plain, context));
    expect(specHash(workloadSpec('w1', { env: { X: '1' } }), context)).not.toBe(specHash(plain, context));
  });
});

describe.skipIf(!dockerOrFail('agent/src/docker/secrets.test.ts'))('secret files in a real container', () => {
  const run = randomBytes(4).toString('hex');
  const hostId = `host_sec_${run}`;
  let docker: Dockerode;

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
  });
  afterAll(async () => removeTestContainers(docker, `anvil.host=${hostId}`));

  async function exec(id: string, cmd: string[]): Promise<string> {
    const e = await docker.getContainer(id).exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
    const stream = await e.start({ hijack: true, stdin: false });
    const chunks: Buffer[] = [];
    const out = new (await import('node:stream')).PassThrough();
    out.on('data', (c: Buffer) => chunks.push(c));
    docker.modem.demuxStream(stream, out, out);
    await new Promise((resolve) => stream.on('end', resolve));
    return Buffer.concat(chunks).toString('utf8');
  }

  it('writes files (nested, new parents, their modes) before start and rewrites them on writeFiles', async () => {
    const rt = createContainerRuntime(docker);
    const spec = workloadSpec(`sec-${run}`, {
      secretEnv: { API_TOKEN: 'tok-123' },
      files: [
        {
          path: '/run/secrets/deep/db/password',
          mode: 0o400,
          contentBase64: Buffer.from('pw-1').toString('base64'),
        },
        { path: '/tmp/cert.pem', mode: 0o644, contentBase64: Buffer.from('CERT\n').toString('base64') },
      ],
    });
    const id = await rt.create(spec, { hostId, volumeRoot: '/tmp', gpuMode: 'env-only' });
    await rt.start(id);
    expect(await exec(id, ['cat', '/run/secrets/deep/db/password'])).toBe('pw-1');
    expect(await exec(id, ['stat', '-c', '%a %u', '/run/secrets/deep/db/password'])).toBe('400 0\n');
    expect(await exec(id, ['stat', '-c', '%a', '/tmp/cert.pem'])).toBe('644\n');
    // Directories Docker created for the files: 0755, owned by root.
    expect(await exec(id, ['stat', '-c', '%a %u', '/run/secrets/deep/db'])).toBe('755 0\n');
    expect(await exec(id, ['sh', '-c', 'echo $API_TOKEN'])).toBe('tok-123\n');

    await rt.stop(id, 0);
    await rt.writeFiles(id, [
      {
        path: '/run/secrets/deep/db/password',
        mode: 0o400,
        contentBase64: Buffer.from('pw-2').toString('base64'),
      },
    ]);
    await rt.start(id);
    expect(await exec(id, ['cat', '/run/secrets/deep/db/password'])).toBe('pw-2');
  });
});
