import { readFileSync } from 'node:fs';
import { generateApiKey } from '@anvil/shared';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.ts';

describe('configuration', () => {
  it('has the documented defaults', () => {
    const config = loadConfig({});
    expect(config.port).toBe(8080);
    expect(config.dataDir).toMatch(/\/data$/);
    expect(config.databaseUrl).toBeNull();
    expect(config.ownerEmail).toBe('admin@localhost');
    expect(config.bootstrapApiKey).toBeNull();
    expect(config.logLevel).toBe('info');
  });

  it('reads every variable', () => {
    const key = generateApiKey('live');
    const config = loadConfig({
      PORT: '9000',
      ANVIL_DATA_DIR: '/srv/anvil',
      DATABASE_URL: 'postgres://u:p@db:5432/anvil',
      ANVIL_OWNER_EMAIL: 'ops@example.com',
      ANVIL_BOOTSTRAP_API_KEY: key,
      LOG_LEVEL: 'debug',
    });
    expect(config).toMatchObject({
      port: 9000,
      dataDir: '/srv/anvil',
      databaseUrl: 'postgres://u:p@db:5432/anvil',
      ownerEmail: 'ops@example.com',
      bootstrapApiKey: key,
      logLevel: 'debug',
    });
  });

  it.each([
    ['PORT', 'abc', /PORT must be an integer/],
    ['PORT', '70000', /PORT must be between 0 and 65535/],
    ['DATABASE_URL', 'mysql://x/y', /DATABASE_URL must use postgres/],
    ['DATABASE_URL', 'not a url', /DATABASE_URL is not a URL/],
    ['ANVIL_OWNER_EMAIL', 'nobody', /ANVIL_OWNER_EMAIL is not an e-mail/],
    ['ANVIL_BOOTSTRAP_API_KEY', 'anv_live_short', /ANVIL_BOOTSTRAP_API_KEY is not a well-formed Anvil key/],
    ['LOG_LEVEL', 'loud', /LOG_LEVEL must be one of/],
  ])('refuses %s=%s naming the variable', (name, value, message) => {
    let thrown: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).variable).toBe(name);
    expect((thrown as Error).message).toMatch(message);
  });

  it('refuses a bootstrap key whose checksum is wrong', () => {
    const key = generateApiKey('live');
    const broken = key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A');
    expect(() => loadConfig({ ANVIL_BOOTSTRAP_API_KEY: broken })).toThrow(/ANVIL_BOOTSTRAP_API_KEY/);
  });

  it('reads the accounts variables (public URL, secret keys, SMTP, outbound policy)', () => {
    const key = 'ab'.repeat(32);
    const config = loadConfig({
      PORT: '9000',
      ANVIL_SECRET_KEY: key,
      ANVIL_SECRET_KEY_PREVIOUS: `${'cd'.repeat(32)},${Buffer.alloc(32, 7).toString('base64')}`,
      ANVIL_SMTP_URL: 'smtp://user:pass@mail.example.com:587',
      ANVIL_SMTP_FROM: 'Ops <ops@example.com>',
      ANVIL_OUTBOUND_ALLOW_PRIVATE: 'true',
      ANVIL_PUBLIC_URL: 'https://anvil.example.com/',
    });
    expect(config.secretKey).toEqual(Buffer.from(key, 'hex'));
    expect(config.previousSecretKeys).toHaveLength(2);
    expect(config).toMatchObject({
      smtpUrl: 'smtp://user:pass@mail.example.com:587',
      smtpFrom: 'Ops <ops@example.com>',
      outboundAllowPrivate: true,
      publicUrl: 'https://anvil.example.com',
    });
    const defaults = loadConfig({ PORT: '9000' });
    expect(defaults).toMatchObject({
      secretKey: null,
      previousSecretKeys: [],
      smtpUrl: null,
      outboundAllowPrivate: false,
      publicUrl: 'http://localhost:9000',
    });
  });

  it('reads the dataset variables, with the datasets folder under the data directory by default', () => {
    expect(loadConfig({ ANVIL_DATA_DIR: '/srv/anvil' })).toMatchObject({
      datasetsDir: '/srv/anvil/datasets',
      datasetMaxBytes: 53_687_091_200,
      datasetUploadTokenSeconds: 86_400,
    });
    expect(
      loadConfig({
        ANVIL_DATASETS_DIR: '/mnt/datasets',
        ANVIL_DATASET_MAX_BYTES: '1048576',
        ANVIL_DATASET_UPLOAD_TOKEN_SECONDS: '600',
      }),
    ).toMatchObject({
      datasetsDir: '/mnt/datasets',
      datasetMaxBytes: 1_048_576,
      datasetUploadTokenSeconds: 600,
    });
    expect(() => loadConfig({ ANVIL_DATASET_UPLOAD_TOKEN_SECONDS: '5' })).toThrow(
      /ANVIL_DATASET_UPLOAD_TOKEN_SECONDS must be between 60/,
    );
  });

  it.each([
    ['ANVIL_SECRET_KEY', 'too-short', /ANVIL_SECRET_KEY must be 32 bytes/],
    ['ANVIL_SECRET_KEY_PREVIOUS', 'nope', /ANVIL_SECRET_KEY_PREVIOUS must be a comma-separated list/],
    ['ANVIL_SMTP_URL', 'http://mail.example.com', /ANVIL_SMTP_URL must be smtp/],
    ['ANVIL_OUTBOUND_ALLOW_PRIVATE', 'sometimes', /ANVIL_OUTBOUND_ALLOW_PRIVATE must be true or false/],
    ['ANVIL_PUBLIC_URL', 'ftp://x', /ANVIL_PUBLIC_URL must be an http/],
  ])('refuses %s=%s naming the variable', (name, value, message) => {
    expect(() => loadConfig({ [name]: value })).toThrow(message);
  });
});

describe('README', () => {
  it('names every variable the configuration reads in its Configuration table', () => {
    const source = readFileSync(new URL('./config.ts', import.meta.url), 'utf8');
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const table = readme.slice(
      readme.indexOf('## Configuration'),
      readme.indexOf('### Trying Anvil without a GPU'),
    );
    const read = new Set(
      [...source.matchAll(/'((?:ANVIL_|PORT|DATABASE_URL|LOG_LEVEL)[A-Z0-9_]*)'/g)].map((m) => m[1]!),
    );
    expect(read.size).toBeGreaterThan(30);
    expect([...read].filter((name) => !table.includes(`\`${name}\``))).toEqual([]);
  });
});
