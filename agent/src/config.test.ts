import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, directPortsOf, loadConfig } from './config.ts';
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
  if (!('config' in loaded)) throw new Error('unexpected help or probe');
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
      allowInsecureControlPlane: false,
      directPortsAddress: null,
      directPortsRange: null,
      rendezvousAddress: null,
      hostImages: [],
      installDir: null,
      workerApiPort: 7071,
    });
  });

  it('reads the install directory install.sh writes, absolute only', async () => {
    expect(
      (await config(['--control-plane', 'https://cp', '--install-dir', '/opt/anvil-agent/'])).installDir,
    ).toBe('/opt/anvil-agent');
    await expect(config(['--control-plane', 'https://cp', '--install-dir', 'opt'])).rejects.toThrow(
      'install dir "opt": expected an absolute path',
    );
  });

  it('takes one IPv4 rendezvous address, never every address', async () => {
    const env = (value: string) => ({ ANVIL_CONTROL_PLANE: 'https://cp', ANVIL_RENDEZVOUS_ADDRESS: value });
    expect((await config([], env('10.0.0.5'))).rendezvousAddress).toBe('10.0.0.5');
    await expect(config([], env('0.0.0.0'))).rejects.toThrow(/one IPv4 address/);
    await expect(config([], env('cp.example.com'))).rejects.toThrow(/one IPv4 address/);
  });

  it('reads the worker API port (0 turns it off) and refuses a bad one', async () => {
    expect((await config(['--control-plane', 'https://cp', '--worker-api-port', '0'])).workerApiPort).toBe(0);
    expect((await config(['--control-plane', 'https://cp', '--worker-api-port', '9001'])).workerApiPort).toBe(
      9001,
    );
    await expect(config(['--control-plane', 'https://cp', '--worker-api-port', '70000'])).rejects.toThrow(
      /worker API port "70000"/,
    );
  });

  it.each([
    ['https://cp.example.com', {}, true],
    ['wss://cp.example.com', {}, true],
    ['http://127.0.0.1:8080', {}, true],
    ['ws://127.0.0.2:8080', {}, true],
    ['http://localhost:8080', {}, true],
    ['ws://[::1]:8080', {}, true],
    ['http://cp.example.com', {}, false],
    ['ws://10.0.0.5:8080', {}, false],
    ['ws://[::ffff:10.0.0.5]:8080', {}, false],
    ['http://localhost.example.com', {}, false],
    ['ws://10.0.0.5:8080', { ANVIL_ALLOW_INSECURE_CONTROL_PLANE: 'true' }, true],
    ['http://cp.example.com', { ANVIL_ALLOW_INSECURE_CONTROL_PLANE: '1' }, true],
    ['http://cp.example.com', { ANVIL_ALLOW_INSECURE_CONTROL_PLANE: 'false' }, false],
  ])(
    'control plane %s with %j: accepted %s (plain text only to loopback or by opt-in)',
    async (url, env, ok) => {
      const load = config(['--control-plane', url], env);
      if (ok) await expect(load).resolves.toMatchObject({ controlPlane: url });
      else await expect(load).rejects.toThrow(/not encrypted.*--allow-insecure-control-plane/);
    },
  );

  it('takes the opt-in from the flag and the config file too', async () => {
    expect(
      await config(['--control-plane', 'ws://10.0.0.5', '--allow-insecure-control-plane', 'true']),
    ).toMatchObject({ allowInsecureControlPlane: true });
    expect(
      await config(
        ['--config', '/c.json'],
        {},
        {
          '/c.json': JSON.stringify({ controlPlane: 'ws://10.0.0.5', allowInsecureControlPlane: 'true' }),
        },
      ),
    ).toMatchObject({ allowInsecureControlPlane: true });
  });

  it('publishes no port unless the operator names one address for direct ports', async () => {
    expect(directPortsOf(await config(['--control-plane', 'https://cp']))).toBeNull();
    const on = await config(['--control-plane', 'https://cp'], { ANVIL_DIRECT_PORTS_ADDRESS: '10.0.0.5' });
    expect(directPortsOf(on)).toEqual({ address: '10.0.0.5', first: 30000, last: 32767 });
    const ranged = await config(['--control-plane', 'x', '--direct-ports-range', '40000-40009'], {
      ANVIL_DIRECT_PORTS_ADDRESS: '127.0.0.1',
    });
    expect(directPortsOf(ranged)).toEqual({ address: '127.0.0.1', first: 40000, last: 40009 });
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
    [['--control-plane', 'x', '--direct-ports-address', '0.0.0.0'], {}, {}, 'not every address'],
    [['--control-plane', 'x', '--direct-ports-address', 'eth0'], {}, {}, 'expected an IP address'],
    [['--control-plane', 'x', '--direct-ports-range', '9-1'], {}, {}, 'direct ports range "9-1"'],
    [['--config', '/bad.json'], {}, { '/bad.json': '{' }, 'config file /bad.json: not JSON'],
    [['--config', '/typo.json'], {}, { '/typo.json': '{"controlPlain":"x"}' }, 'config file /typo.json'],
  ])('refuses %j with a clear message', async (argv, env, content, message) => {
    await expect(config(argv, env, content)).rejects.toThrow(ConfigError);
    await expect(config(argv, env, content)).rejects.toThrow(message);
  });

  it('answers --help', async () => {
    expect(await loadConfig({ argv: ['--help'], env: {} })).toEqual({ help: true });
  });

  it('--probe needs no control plane and takes the GPU settings', async () => {
    expect(
      await loadConfig({
        argv: ['--probe', '--nvml-library', '/x/libnvidia-ml.so.1'],
        env: { ANVIL_STATE_DIR: '/s' },
      }),
    ).toEqual({
      help: false,
      probe: { simulateGpus: null, nvmlLibrary: '/x/libnvidia-ml.so.1', stateDir: '/s', logLevel: 'warn' },
    });
    await expect(loadConfig({ argv: ['--probe', '--simulate-gpus', 'lots'], env: {} })).rejects.toThrow(
      ConfigError,
    );
  });

  it('reports the version in package.json', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect(AGENT_VERSION).toBe(pkg.version);
  });
});
