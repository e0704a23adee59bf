import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';

/**
 * Outbound requests the control plane makes for its users (webhooks, dataset URLs) must not reach its
 * own network unless the operator allows it (ANVIL_OUTBOUND_ALLOW_PRIVATE): server-side request forgery.
 */

// Addresses an outbound request must not reach unless the operator allows it: the control plane's own
// network (SSRF). Loopback, RFC 1918, CGNAT, link-local (cloud metadata), unique-local, unspecified.
const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv6');
}

export function isPrivateAddress(address: string): boolean {
  const version = isIP(address);
  if (version === 0) return true;
  if (version === 6 && address.toLowerCase().startsWith('::ffff:')) {
    return PRIVATE.check(address.slice(7), 'ipv4');
  }
  return PRIVATE.check(address, version === 4 ? 'ipv4' : 'ipv6');
}

/** The callback shape of dns.lookup, as http(s).request's `lookup` option calls it. */
type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for http(s).request that refuses names resolving to a private address. The address is
 * checked when the socket connects, after DNS, so a name that looked public cannot rebind past the
 * check. Sockets skip lookup for literal addresses: callers check those with isPrivateAddress.
 */
export function privateAddressGuard(allowPrivate: boolean) {
  return (hostname: string, options: object, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, '');
      const list = addresses as LookupAddress[];
      if (!allowPrivate && list.some((a) => isPrivateAddress(a.address))) {
        const blocked = new Error(
          `${hostname} resolves to a private address; set ANVIL_OUTBOUND_ALLOW_PRIVATE=true to allow`,
        ) as NodeJS.ErrnoException;
        blocked.code = 'EPRIVATE';
        return callback(blocked, '');
      }
      if ((options as { all?: boolean }).all) return callback(null, list);
      return callback(null, list[0]!.address, list[0]!.family);
    });
  };
}
