import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseProxyHost, readCookie } from './gateway.ts';
import { IpRules, invalidCidrs } from './ip-rules.ts';
import { TokenBuckets } from './rate-limiter.ts';
import { certificateInfo, loadProxyTls } from './tls.ts';

describe('proxy host names', () => {
  it('reads <cluster>-<port>.<domain> with the id written either way, and nothing else', () => {
    expect(parseProxyHost('cluster-abc123-8888.proxy.localhost:8443', 'proxy.localhost')).toEqual({
      clusterId: 'cluster_abc123',
      port: 8888,
    });
    expect(parseProxyHost('CLUSTER_abc123-80.Proxy.Localhost', 'proxy.localhost')).toEqual({
      clusterId: 'cluster_abc123',
      port: 80,
    });
    expect(parseProxyHost('cluster-abc-70000.proxy.localhost', 'proxy.localhost')).toBeNull();
    expect(parseProxyHost('cluster-abc-80.evil.example', 'proxy.localhost')).toBeNull();
    expect(parseProxyHost('x.cluster-abc-80.proxy.localhost', 'proxy.localhost')).toBeNull();
    expect(parseProxyHost(undefined, 'proxy.localhost')).toBeNull();
  });

  it('finds one cookie among several', () => {
    expect(readCookie('a=1; anvil_proxy_session=xyz; b=2', 'anvil_proxy_session')).toBe('xyz');
    expect(readCookie('a=1', 'anvil_proxy_session')).toBeNull();
  });
});

describe('address rules', () => {
  it('matches IPv4 and IPv6 addresses and CIDRs, IPv4-mapped clients included', () => {
    const rules = new IpRules(['10.0.0.0/8', '192.168.1.7', '2001:db8::/32']);
    expect(rules.matches('10.20.30.40')).toBe(true);
    expect(rules.matches('::ffff:10.1.1.1')).toBe(true);
    expect(rules.matches('192.168.1.7')).toBe(true);
    expect(rules.matches('192.168.1.8')).toBe(false);
    expect(rules.matches('2001:db8:1::5')).toBe(true);
    expect(rules.matches('2001:db9::1')).toBe(false);
    expect(rules.matches('not an ip')).toBe(false);
  });

  it('names entries that are not addresses or CIDRs', () => {
    expect(
      invalidCidrs(['10.0.0.0/8', '10.0.0.0/33', 'fe80::/129', 'example.com', '1.2.3.4/8/9', '::1']),
    ).toEqual(['10.0.0.0/33', 'fe80::/129', 'example.com', '1.2.3.4/8/9']);
  });
});

describe('token buckets', () => {
  it('allows a burst, then refuses with the seconds until the next token, and refills', () => {
    const buckets = new TokenBuckets();
    const limit = { requests_per_minute: 60, burst_size: 2 };
    expect(buckets.take('k', limit, 0)).toBe(0);
    expect(buckets.take('k', limit, 0)).toBe(0);
    expect(buckets.take('k', limit, 0)).toBe(1);
    expect(buckets.take('other', limit, 0)).toBe(0);
    expect(buckets.take('k', limit, 1_000)).toBe(0);
    expect(buckets.take('k', { requests_per_minute: 1, burst_size: 1 }, 1_000)).toBe(60);
  });
});

describe('proxy TLS', () => {
  it('generates a development CA once (files 0600) issuing a wildcard certificate for the domain', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-proxy-tls-'));
    try {
      const first = await loadProxyTls({
        dataDir: dir,
        domain: 'proxy.localhost',
        certFile: null,
        keyFile: null,
      });
      expect(first.source).toBe('development_ca');
      const leaf = new X509Certificate(first.cert);
      expect(leaf.checkHost('cluster-abc-8888.proxy.localhost')).toBe('*.proxy.localhost');
      expect(leaf.verify(new X509Certificate(first.caCert!).publicKey)).toBe(true);
      for (const file of ['ca.key', 'ca.crt', 'server.key', 'server.crt']) {
        expect((await stat(join(dir, 'proxy-tls', file))).mode & 0o777).toBe(0o600);
      }
      const again = await loadProxyTls({
        dataDir: dir,
        domain: 'proxy.localhost',
        certFile: null,
        keyFile: null,
      });
      expect(again.cert).toBe(first.cert);
      // A new domain gets a new certificate from the same CA.
      const moved = await loadProxyTls({
        dataDir: dir,
        domain: 'apps.example.com',
        certFile: null,
        keyFile: null,
      });
      expect(moved.caCert).toBe(first.caCert);
      expect(new X509Certificate(moved.cert).checkHost('x.apps.example.com')).toBe('*.apps.example.com');

      const info = certificateInfo(moved.cert, new Date());
      expect(info).toMatchObject({ issuer: 'Anvil Development CA', status: 'valid' });
      expect(certificateInfo(moved.cert, new Date('2000-01-01')).status).toBe('not_yet_valid');

      // Operator files are served as they are.
      const operator = await loadProxyTls({
        dataDir: dir,
        domain: 'ignored',
        certFile: join(dir, 'proxy-tls', 'server.crt'),
        keyFile: join(dir, 'proxy-tls', 'server.key'),
      });
      expect(operator).toMatchObject({ source: 'operator', caCert: null });
      expect(operator.cert).toBe(await readFile(join(dir, 'proxy-tls', 'server.crt'), 'utf8'));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('proxy configuration variables', () => {
  it('defaults to port 8443 on proxy.localhost with a development CA, and validates what is set', async () => {
    const { ConfigError, loadConfig } = await import('../config.ts');
    expect(loadConfig({})).toMatchObject({
      proxyPort: 8443,
      proxyDomain: 'proxy.localhost',
      proxyTlsCert: null,
      proxyTlsKey: null,
    });
    expect(
      loadConfig({
        ANVIL_PROXY_PORT: '0',
        ANVIL_PROXY_DOMAIN: 'Apps.Example.com.',
        ANVIL_PROXY_TLS_CERT: '/c.pem',
        ANVIL_PROXY_TLS_KEY: '/k.pem',
      }),
    ).toMatchObject({
      proxyPort: 0,
      proxyDomain: 'apps.example.com',
      proxyTlsCert: '/c.pem',
      proxyTlsKey: '/k.pem',
    });
    expect(() => loadConfig({ ANVIL_PROXY_PORT: '99999' })).toThrow(ConfigError);
    expect(() => loadConfig({ ANVIL_PROXY_DOMAIN: 'bad_domain!' })).toThrow(/ANVIL_PROXY_DOMAIN/);
    expect(() => loadConfig({ ANVIL_PROXY_TLS_CERT: '/c.pem' })).toThrow(/ANVIL_PROXY_TLS_KEY/);
  });
});
