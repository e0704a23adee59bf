import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import {
  type ClientRequest,
  request as httpRequest,
  type IncomingMessage,
  type RequestOptions,
} from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP, connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

/**
 * Outbound requests the control plane makes for its users (webhooks, dataset URLs) must not reach its
 * own network unless the operator allows it (ANVIL_OUTBOUND_ALLOW_PRIVATE): server-side request forgery.
 * Three checks, so no spelling of an address gets past: a literal is classified before any packet is
 * sent, a name is classified after DNS (the lookup hook, so rebinding cannot pass), and the address the
 * socket actually connected to is classified again before the request writes a byte.
 */

// Addresses an outbound request must not reach unless the operator allows it: every range that is not
// plain global unicast (IANA special-purpose registries), and every IPv6 form that embeds an IPv4 address
// a gateway may translate into a private one (mapped, compatible, NAT64, 6to4, Teredo).
const BLOCKED_V4: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // CGNAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
];
const BLOCKED_V6: Array<[string, number]> = [
  ['::', 96], // unspecified, loopback, IPv4-compatible
  ['::ffff:0:0', 96], // IPv4-mapped
  ['::ffff:0:0:0', 96], // IPv4-translated (SIIT)
  ['64:ff9b::', 96], // NAT64
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard-only
  ['2001::', 23], // IETF protocol assignments, Teredo (2001::/32) among them
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4
  ['fc00::', 7], // unique-local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
];
// One list per family: a BlockList matches IPv4 addresses against IPv6 rules through their mapped and
// compatible forms, so ::/96 in a shared list would refuse every IPv4 address.
const BLOCKED = { ipv4: new BlockList(), ipv6: new BlockList() };
for (const [net, prefix] of BLOCKED_V4) BLOCKED.ipv4.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of BLOCKED_V6) BLOCKED.ipv6.addSubnet(net, prefix, 'ipv6');

/**
 * True for an address an outbound request must not reach (see BLOCKED), and for anything that is not an
 * IP address at all: the check fails closed. Accepts the forms sockets and URLs write (`::ffff:127.0.0.1`,
 * `::ffff:7f00:1`, a zone suffix `fe80::1%eth0`).
 */
export function isPrivateAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const version = isIP(bare);
  if (version === 0) return true;
  try {
    const family = version === 4 ? 'ipv4' : 'ipv6';
    return BLOCKED[family].check(bare, family);
  } catch {
    return true;
  }
}

/** The error an outbound request fails with when its target is refused. */
export class PrivateAddressError extends Error {
  readonly code = 'EPRIVATE';
  constructor(target: string, address: string) {
    const what = 'a private address (loopback, private, link-local or another reserved range)';
    super(
      `${target === address ? `${target} is ${what}` : `${target} resolves to ${address}, ${what}`}; ` +
        'set ANVIL_OUTBOUND_ALLOW_PRIVATE=true to allow',
    );
  }
}

/** True when a URL's host is an IP literal of a refused range or `localhost` (checked before any DNS). */
export function isPrivateUrlHost(url: URL): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) !== 0) return isPrivateAddress(host);
  const name = host.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

/** The callback shape of dns.lookup, as net.connect's `lookup` option calls it. */
type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/** A `lookup` for net.connect that refuses a name when any of its addresses is refused. */
function guardedLookup(hostname: string, options: object, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, '');
    const list = addresses as LookupAddress[];
    const blocked = list.find((a) => isPrivateAddress(a.address));
    if (blocked) return callback(new PrivateAddressError(hostname, blocked.address), '');
    if ((options as { all?: boolean }).all) return callback(null, list);
    return callback(null, list[0]!.address, list[0]!.family);
  });
}

interface ConnectOptions {
  host?: string | null | undefined;
  hostname?: string | null | undefined;
  port?: number | string | null | undefined;
  protocol?: string | null | undefined;
  servername?: string | undefined;
  rejectUnauthorized?: boolean | undefined;
  ca?: unknown;
}

/**
 * A TCP socket to options.host that never carries a byte to a refused address: literals are refused
 * before connecting, names by the lookup hook, and the connected peer address is checked in a `connect`
 * listener added before anyone can write (so a refused socket is destroyed with its writes still queued).
 */
function guardedSocket(options: ConnectOptions): Socket {
  const host = (options.hostname ?? options.host ?? 'localhost').replace(/^\[|\]$/g, '');
  const port = Number(options.port);
  // Thrown from createConnection, a refusal becomes the request's 'error' (http.ClientRequest does that).
  if (isIP(host) !== 0 && isPrivateAddress(host)) throw new PrivateAddressError(host, host);
  const socket = netConnect({ host, port, lookup: guardedLookup as never });
  socket.once('connect', () => {
    const peer = socket.remoteAddress;
    if (!peer || isPrivateAddress(peer)) socket.destroy(new PrivateAddressError(host, peer ?? 'unknown'));
  });
  return socket;
}

/**
 * http(s).request for a user-supplied URL: the socket comes from guardedSocket unless the operator allows
 * private targets. No agent is used (one socket per request), so no pooled socket skips the checks.
 */
export function outboundRequest(
  url: URL,
  options: RequestOptions,
  allowPrivate: boolean,
  onResponse: (response: IncomingMessage) => void,
): ClientRequest {
  const https = url.protocol === 'https:';
  const send = https ? httpsRequest : httpRequest;
  if (allowPrivate) return send(url, options, onResponse);
  const port = url.port ? Number(url.port) : https ? 443 : 80;
  const createConnection = (connect: ConnectOptions): Socket => {
    const raw = guardedSocket({ ...connect, port });
    if (!https) return raw;
    const name = (connect.hostname ?? connect.host ?? '').replace(/^\[|\]$/g, '');
    return tlsConnect({
      ...(connect as object),
      socket: raw,
      host: name,
      servername: isIP(name) === 0 ? name : undefined,
    } as never);
  };
  return send(
    url,
    {
      ...options,
      port,
      defaultPort: https ? 443 : 80,
      agent: undefined,
      createConnection: createConnection as never,
    },
    onResponse,
  );
}
