import type { IncomingMessage } from 'node:http';
import { IpRules } from '../proxy/ip-rules.ts';

/**
 * The client's address as the API, the port proxy and the terminal see it. X-Forwarded-For is read only
 * when the connection comes from a configured trusted proxy (ANVIL_TRUSTED_PROXIES), and then from the
 * right: each hop a trusted proxy appended is skipped until the first address no trusted proxy vouches
 * for. Anyone can write the header, so an untrusted peer's is ignored and its socket address is the client.
 */
export class TrustedProxies {
  private readonly rules: IpRules;

  constructor(entries: string[]) {
    this.rules = new IpRules(entries);
  }

  /** For fastify's trustProxy: whether the hop at `address` may speak for the one before it. */
  trusts(address: string): boolean {
    return this.rules.matches(address);
  }

  /** The client address of a raw request (upgrades, the proxy): socket peer, else the trusted chain. */
  clientOf(request: IncomingMessage): string {
    return this.resolve(request.socket.remoteAddress ?? '', request.headers['x-forwarded-for']);
  }

  resolve(peer: string, forwarded: string | string[] | undefined): string {
    if (this.rules.size === 0 || !this.trusts(peer) || forwarded === undefined) return peer;
    const hops = (Array.isArray(forwarded) ? forwarded.join(',') : forwarded)
      .split(',')
      .map((hop) => hop.trim())
      .filter(Boolean);
    let client = peer;
    for (let i = hops.length - 1; i >= 0; i--) {
      client = hops[i]!;
      if (!this.trusts(client)) break;
    }
    return client;
  }
}
