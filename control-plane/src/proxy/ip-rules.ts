import { BlockList, isIP } from 'node:net';

/**
 * Parses an address or CIDR (IPv4 or IPv6) into [address, prefix, family]; null when it is neither.
 * IPv4-mapped IPv6 client addresses (::ffff:a.b.c.d) are matched as IPv4 by `matches`.
 */
export function parseCidr(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const [address = '', prefixText, extra] = text.trim().split('/');
  if (extra !== undefined) return null;
  const version = isIP(address);
  if (version === 0) return null;
  const max = version === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : -1;
  if (prefix < 0 || prefix > max) return null;
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/** The entries of a list that are not addresses or CIDRs (for 400 VALIDATION_ERROR details). */
export function invalidCidrs(list: string[]): string[] {
  return list.filter((entry) => parseCidr(entry) === null);
}

/** A compiled address list (node:net BlockList). */
export class IpRules {
  private readonly list = new BlockList();
  readonly size: number;

  constructor(entries: string[]) {
    let size = 0;
    for (const entry of entries) {
      const parsed = parseCidr(entry);
      if (!parsed) continue;
      this.list.addSubnet(parsed.address, parsed.prefix, parsed.family);
      size++;
    }
    this.size = size;
  }

  matches(clientIp: string): boolean {
    // Most lists are empty: skip the parsing on every request.
    if (this.size === 0) return false;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(clientIp);
    const address = mapped ? mapped[1]! : clientIp;
    const version = isIP(address);
    if (version === 0) return false;
    return this.list.check(address, version === 4 ? 'ipv4' : 'ipv6');
  }
}
