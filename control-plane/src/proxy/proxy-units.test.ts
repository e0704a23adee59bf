import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type CounterDelta,
  type CounterRef,
  type CounterStore,
  counterKey,
  SharedCounterLimiter,
} from '../ratelimit/index.ts';
import { ManualClock } from '../testing/clock.ts';
import { readCookie } from './browser-policy.ts';
import { parseProxyHost } from './gateway.ts';
import { IpRules, invalidCidrs } from './ip-rules.ts';
import { ProxyRateLimits, windowCheck } from './rate-limiter.ts';
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

/** The shared counters in memory: what SqlCounterStore does, for one process. */
class MemoryCounters implements CounterStore {
  readonly counts = new Map<string, number>();
  async add(deltas: readonly CounterDelta[]) {
    const out = new Map<string, number>();
    for (const d of deltas) {
      const key = counterKey(d.bucket, d.windowStart);
      out.set(key, (this.counts.get(key) ?? 0) + d.delta);
      this.counts.set(key, out.get(key)!);
    }
    return out;
  }
  async read(refs: readonly CounterRef[]) {
    return new Map(
      refs.map((r) => [
        counterKey(r.bucket, r.windowStart),
        this.counts.get(counterKey(r.bucket, r.windowStart)) ?? 0,
      ]),
    );
  }
  async purgeExpired() {
    return 0;
  }
}

describe('proxy rate limits', () => {
  it('count a limit as burst_size requests per burst_size / requests_per_minute minutes, at least 1 s', () => {
    expect(windowCheck('m:p', { requests_per_minute: 6, burst_size: 2 })).toEqual({
      bucket: 'proxy:m:p:20000',
      windowMs: 20_000,
      limit: 2,
    });
    expect(windowCheck('g:c', { requests_per_minute: 60, burst_size: 60 })).toMatchObject({
      windowMs: 60_000,
      limit: 60,
    });
    expect(windowCheck('g:c', { requests_per_minute: 10, burst_size: 100 })).toMatchObject({
      windowMs: 600_000,
      limit: 100,
    });
    // 600/min with a burst of 1 would be a 100 ms window: widened to 1 s holding 10.
    expect(windowCheck('g:c', { requests_per_minute: 600, burst_size: 1 })).toMatchObject({
      windowMs: 1_000,
      limit: 10,
    });
  });

  it('refuse with the seconds until the refusing window ends, counting a refused request nowhere', async () => {
    const clock = new ManualClock(new Date('2026-03-01T00:00:00.000Z'));
    const store = new MemoryCounters();
    const limiter = new SharedCounterLimiter({ store, clock });
    const limits = new ProxyRateLimits(limiter);
    const now = () => clock.now().getTime();
    const port = {
      bucket: 'm:port_a:user:u',
      limit: { requests_per_minute: 6, burst_size: 2 },
      name: 'port',
    };
    const global = { bucket: 'g:c', limit: { requests_per_minute: 600, burst_size: 600 }, name: 'global' };
    expect(await limits.admit([global, port], now())).toBeNull();
    clock.advance(5_000);
    expect(await limits.admit([global, port], now())).toBeNull();
    expect(await limits.admit([global, port], now())).toEqual({
      name: 'port',
      limit: port.limit,
      retryAfterSeconds: 15,
    });
    expect(await limits.admit([global], now())).toBeNull();
    clock.advance(15_000);
    expect(await limits.admit([global, port], now())).toBeNull();
    expect(await limits.admit([], now())).toBeNull();
    // The global window saw 4 admitted requests, the refused one not among them.
    const windowStart = Date.parse('2026-03-01T00:00:00.000Z');
    await limiter.sync();
    expect(store.counts.get(counterKey('proxy:g:c:60000', windowStart))).toBe(4);
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
