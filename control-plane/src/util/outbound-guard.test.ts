import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPrivateAddress, isPrivateUrlHost, outboundRequest } from './outbound-guard.ts';

/**
 * The SSRF guard. Refused ranges are tested on the classification alone (no traffic to them); the
 * connection tests reach only a listener this file starts on loopback.
 */
describe('outbound guard: address classification', () => {
  const refused = [
    '127.0.0.1',
    '127.255.255.254',
    '0.0.0.0',
    '10.1.2.3',
    '100.64.0.1',
    '169.254.169.254',
    '172.16.0.1',
    '172.31.255.255',
    '192.0.0.8',
    '192.0.2.1',
    '192.88.99.1',
    '192.168.1.1',
    '198.18.0.1',
    '198.19.255.255',
    '198.51.100.7',
    '203.0.113.9',
    '224.0.0.1',
    '239.255.255.250',
    '255.255.255.255',
    '::',
    '::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:a9fe:a9fe',
    '::ffff:8.8.8.8',
    '::127.0.0.1',
    '::7f00:1',
    '::ffff:0:7f00:1',
    '64:ff9b::7f00:1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b:1::1',
    '2002:7f00:1::',
    '2002:a9fe:a9fe::1',
    '2001:0:4136:e378::1',
    '2001:db8::1',
    '100::1',
    'fc00::1',
    'fd12:3456::1',
    'fe80::1',
    'fe80::1%eth0',
    'febf::1',
    'fec0::1',
    'ff02::1',
    '[::1]',
    'not-an-address',
    '',
  ];
  const allowed = [
    '8.8.8.8',
    '1.1.1.1',
    '93.184.216.34',
    '172.32.0.1',
    '198.20.0.1',
    '2606:4700::1111',
    '2a00:1450::1',
  ];

  it.each(refused)('refuses %s', (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });
  it.each(allowed)('allows %s', (address) => {
    expect(isPrivateAddress(address)).toBe(false);
  });

  it('classifies URL hosts as WHATWG URL parsing normalises them', () => {
    for (const url of [
      'http://[::ffff:127.0.0.1]/',
      'http://[::ffff:a9fe:a9fe]/',
      'http://2130706433/',
      'http://0x7f.1/',
      'http://017700000001/',
      'http://localhost/',
      'http://LOCALHOST./',
      'http://api.localhost/',
      'http://[64:ff9b::7f00:1]/',
    ])
      expect(isPrivateUrlHost(new URL(url)), url).toBe(true);
    expect(isPrivateUrlHost(new URL('http://example.com/'))).toBe(false);
    expect(isPrivateUrlHost(new URL('https://8.8.8.8/'))).toBe(false);
  });
});

describe('outbound guard: connections', () => {
  let server: Server;
  let port: number;
  let connections = 0;

  beforeAll(async () => {
    server = createServer((_req, res) => res.end('secret'));
    server.on('connection', () => {
      connections += 1;
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => new Promise((resolve) => server.close(resolve)));

  const get = (url: string, allowPrivate: boolean) =>
    new Promise<string>((resolve, reject) => {
      const req = outboundRequest(new URL(url), { method: 'GET' }, allowPrivate, (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(Buffer.concat(chunks).toString()));
      });
      req.on('error', reject);
      req.end();
    });

  const targets = () => [
    `http://[::ffff:127.0.0.1]:${port}/`,
    `http://[::ffff:7f00:1]:${port}/`,
    `http://127.0.0.1:${port}/`,
    `http://2130706433:${port}/`,
    `http://localhost:${port}/`,
    `https://[::ffff:127.0.0.1]:${port}/`,
    `https://localhost:${port}/`,
  ];

  it('never opens a connection to a loopback listener, whatever the spelling', async () => {
    for (const url of targets()) {
      await expect(get(url, false), url).rejects.toMatchObject({ code: 'EPRIVATE' });
    }
    expect(connections).toBe(0);
  });

  it('reaches the same listener when the operator allows private targets', async () => {
    expect(await get(`http://[::ffff:127.0.0.1]:${port}/`, true)).toBe('secret');
    expect(await get(`http://localhost:${port}/`, true)).toBe('secret');
    expect(connections).toBe(2);
  });
});
