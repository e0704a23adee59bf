import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.ts';
import { AGENT_VERSION } from './version.ts';

const files = (content: Record<string, string>) => async (path: string) => {
  const text = content[path];
  if (text === undefined) throw new Error(`ENOENT: no such file, open '${path}'`);
  return text;
};

async function config(
  argv: string[],
  env: Record<string, string> = {},
  fileContent: Record<string, string> = {},
) {
  const loaded = await loadConfig({ argv, env, readTextFile: files(fileContent) });
  if (loaded.help) throw new Error('unexpected help');
  return loaded.config;
}

describe('agent configuration', () => {
  it('uses defaults under everything', async () => {
    expect(await config(['--control-plane', 'https://cp'])).toEqual({
      controlPlane: 'https://cp',
      joinToken: null,
      stateDir: '/var/lib/anvil-agent',
      volumeRoot: '/var/lib/anvil-agent/volumes',
      simulateGpus: null,
      nvmlLibrary: null,
      logLevel: 'info',
      hostImages: [],
    });
  });

  it('reads the host images as a comma-separated list', async () => {
    const result = await config(['--control-plane', 'https://cp'], {
      ANVIL_HOST_IMAGES: 'anvil-test/*, registry.local/base:1 ,',
    });
    expect(result.hostImages).toEqual(['anvil-test/*', 'registry.local/base:1']);
  });

  it('ranks flags over env over file over defaults', async () => {
    const file = JSON.stringify({
      controlPlane: 'https://file',
      joinToken: 'file-token',
      stateDir: '/file',
      logLevel: 'debug',
    });
    const env = {
      ANVIL_CONTROL_PLANE: 'https://env',
      ANVIL_JOIN_TOKEN: 'env-token',
      ANVIL_AGENT_CONFIG: '/etc/anvil.json',
    };
    const result = await config(['--join-token', 'flag-token'], env, { '/etc/anvil.json': file });
    expect(result).toMatchObject({
      controlPlane: 'https://env',
      joinToken: 'flag-token',
      stateDir: '/file',
      volumeRoot: '/file/volumes',
      logLevel: 'debug',
    });
  });

  it('reads the file named by --config, and treats empty env values as unset', async () => {
    const result = await config(
      ['--config', '/c.json'],
      { ANVIL_CONTROL_PLANE: '', ANVIL_SIMULATE_GPUS: '2xH100' },
      { '/c.json': JSON.stringify({ controlPlane: 'https://file', volumeRoot: '/data' }) },
    );
    expect(result).toMatchObject({
      controlPlane: 'https://file',
      volumeRoot: '/data',
      simulateGpus: '2xH100',
    });
  });

  it.each([
    [[], {}, {}, 'no control plane given: pass --control-plane <url> or set ANVIL_CONTROL_PLANE'],
    [['--control-plane', 'x', '--nope'], {}, {}, "Unknown option '--nope'"],
    [['--control-plane', 'x', '--simulate-gpus', '2xV999'], {}, {}, 'expected <count>x<model>'],
    [['--control-plane', 'x', '--log-level', 'loud'], {}, {}, 'log level "loud"'],
    [['--config', '/missing.json'], {}, {}, 'config file /missing.json: ENOENT'],
    [['--config', '/bad.json'], {}, { '/bad.json': '{' }, 'config file /bad.json: not JSON'],
    [['--config', '/typo.json'], {}, { '/typo.json': '{"controlPlain":"x"}' }, 'config file /typo.json'],
  ])('refuses %j with a clear message', async (argv, env, content, message) => {
    await expect(config(argv, env, content)).rejects.toThrow(ConfigError);
    await expect(config(argv, env, content)).rejects.toThrow(message);
  });

  it('answers --help', async () => {
    expect(await loadConfig({ argv: ['--help'], env: {} })).toEqual({ help: true });
  });

  it('reports the version in package.json', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect(AGENT_VERSION).toBe(pkg.version);
  });
});
