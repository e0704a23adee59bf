import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigStore, configPath, normaliseUrl, resolveCredentials } from './config.ts';
import { type CliError, EXIT } from './exit-codes.ts';

describe('profiles file', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'anvil-cli-config-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('lives in $XDG_CONFIG_HOME/anvil, else ~/.config/anvil', () => {
    expect(configPath({ HOME: '/home/a' })).toBe('/home/a/.config/anvil/config.json');
    expect(configPath({ HOME: '/home/a', XDG_CONFIG_HOME: '/xdg' })).toBe('/xdg/anvil/config.json');
    expect(configPath({ HOME: '/home/a', XDG_CONFIG_HOME: '' })).toBe('/home/a/.config/anvil/config.json');
  });

  it('is written with mode 0600 in a 0700 folder, whatever the umask', () => {
    const old = process.umask(0o000);
    try {
      const store = new ConfigStore(join(dir, 'anvil', 'config.json'), () => {});
      store.write({ current: 'default', profiles: { default: { url: 'http://x', key: 'anv_live_secret' } } });
      expect(statSync(store.path).mode & 0o777).toBe(0o600);
      expect(statSync(join(dir, 'anvil')).mode & 0o777).toBe(0o700);
      expect(store.read().profiles['default']?.key).toBe('anv_live_secret');
    } finally {
      process.umask(old);
    }
  });

  it('repairs a file others could read, and says so', () => {
    const path = join(dir, 'config.json');
    writeFileSync(path, JSON.stringify({ current: null, profiles: {} }));
    chmodSync(path, 0o644);
    const warnings: string[] = [];
    new ConfigStore(path, (line) => warnings.push(line)).read();
    expect(warnings.join()).toMatch(/readable by others \(mode 644\)/);
    expect(statSync(path).mode & 0o777).toBe(0o600);
  });

  it('refuses a file that is not JSON with exit code 1 and its path', () => {
    const path = join(dir, 'config.json');
    writeFileSync(path, '{nope', { mode: 0o600 });
    expect(() => new ConfigStore(path, () => {}).read()).toThrow(/config\.json is not valid JSON/);
    expect(readFileSync(path, 'utf8')).toBe('{nope');
  });
});

describe('which control plane and key a command uses', () => {
  const config = {
    current: 'a',
    profiles: {
      a: { url: 'https://a.example', key: 'key-a' },
      b: { url: 'https://b.example', key: 'key-b' },
    },
  };

  it('takes --profile, else ANVIL_PROFILE, else the current profile', () => {
    expect(resolveCredentials(config, {}, undefined)).toEqual({
      url: 'https://a.example',
      key: 'key-a',
      profile: 'a',
    });
    expect(resolveCredentials(config, { ANVIL_PROFILE: 'b' }, undefined).key).toBe('key-b');
    expect(resolveCredentials(config, { ANVIL_PROFILE: 'b' }, 'a').key).toBe('key-a');
  });

  it('lets ANVIL_URL and ANVIL_API_KEY override the profile, or stand alone', () => {
    expect(resolveCredentials(config, { ANVIL_API_KEY: 'env-key' }, 'b')).toEqual({
      url: 'https://b.example',
      key: 'env-key',
      profile: 'b',
    });
    expect(
      resolveCredentials(
        { current: null, profiles: {} },
        { ANVIL_URL: 'http://127.0.0.1:8080/', ANVIL_API_KEY: 'k' },
        undefined,
      ),
    ).toEqual({ url: 'http://127.0.0.1:8080', key: 'k', profile: null });
  });

  it('answers "not logged in" (exit 3) without credentials, and names an unknown profile', () => {
    const none = () => resolveCredentials({ current: null, profiles: {} }, {}, undefined);
    expect(none).toThrow(/not logged in/);
    try {
      none();
    } catch (error) {
      expect((error as CliError).exitCode).toBe(EXIT.unauthenticated);
    }
    expect(() => resolveCredentials(config, {}, 'nope')).toThrow(/no profile "nope"/);
  });

  it('accepts http and https URLs only', () => {
    expect(normaliseUrl('https://anvil.example.com/')).toBe('https://anvil.example.com');
    expect(() => normaliseUrl('ftp://x')).toThrow(/starts with https/);
    expect(() => normaliseUrl('anvil.example.com')).toThrow(/is not a URL/);
  });
});
