import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ConnectionOptions, connect } from 'node:tls';
import { describe, expect, it } from 'vitest';
import { loadProxyTls, PROXY_TLS_SERVER_OPTIONS } from './tls.ts';

/** The cipher a client negotiates with a listener using the proxy's TLS settings, or the error. */
function negotiate(port: number, options: ConnectionOptions): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', rejectUnauthorized: false, ...options }, () => {
      resolve(`${socket.getProtocol()} ${socket.getCipher().name}`);
      socket.destroy();
    });
    socket.on('error', () => resolve('refused'));
  });
}

describe('proxy TLS settings', () => {
  it('picks AES-128-GCM for a client preferring AES-256, keeps AEAD on TLS 1.2, refuses older', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-proxy-tls-'));
    const tls = await loadProxyTls({
      dataDir: dir,
      domain: 'proxy.localhost',
      certFile: null,
      keyFile: null,
    });
    const server = createServer({ ...PROXY_TLS_SERVER_OPTIONS, cert: tls.cert, key: tls.key });
    server.on('tlsClientError', () => {});
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    try {
      // OpenSSL's default client order (wrk, curl) lists TLS_AES_256_GCM_SHA384 first.
      expect(await negotiate(port, {})).toBe('TLSv1.3 TLS_AES_128_GCM_SHA256');
      expect(await negotiate(port, { maxVersion: 'TLSv1.2' })).toBe('TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256');
      // A client offering only CBC suites on TLS 1.2 gets no connection.
      expect(await negotiate(port, { maxVersion: 'TLSv1.2', ciphers: 'ECDHE-ECDSA-AES128-SHA256' })).toBe(
        'refused',
      );
      expect(await negotiate(port, { minVersion: 'TLSv1', maxVersion: 'TLSv1.1' })).toBe('refused');
    } finally {
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
