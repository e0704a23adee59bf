import type { IncomingHttpHeaders } from 'node:http';
import type { MappingAccess } from './types.ts';

/**
 * What keeps one tenant's port from acting on another's in a browser. Every `cluster-*.<domain>` host
 * is one *site* to a browser (SameSite cookies travel between them) unless the operator puts the proxy
 * domain on the Public Suffix List, so the proxy itself enforces the origin boundary: a host-only
 * `__Host-` session cookie, upstream cookies kept host-only, no credentialed CORS for `*`, and no
 * cookie-authenticated writes from another origin.
 */

/**
 * The proxy's session cookie. The `__Host-` prefix makes browsers refuse it unless it is Secure, has
 * Path=/ and no Domain, so neither the proxy nor a container on a sibling host can widen or plant it.
 */
export const SESSION_COOKIE = '__Host-anvil_proxy_session';
/** The name used before the `__Host-` prefix: still kept from containers, never accepted. */
export const LEGACY_SESSION_COOKIE = 'anvil_proxy_session';
const PROXY_COOKIES = [SESSION_COOKIE, LEGACY_SESSION_COOKIE];

export function sessionCookie(value: string, maxAgeSeconds: number): string {
  return `${SESSION_COOKIE}=${value}; Path=/; Max-Age=${maxAgeSeconds}; Secure; HttpOnly; SameSite=Lax`;
}

export function clearedSessionCookie(): string {
  return `${SESSION_COOKIE}=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Lax`;
}

export function readCookie(header: string | undefined, name: string): string | null {
  if (!header) return null;
  for (const part of header.split(';')) {
    const index = part.indexOf('=');
    if (index > 0 && part.slice(0, index).trim() === name) return part.slice(index + 1).trim();
  }
  return null;
}

/** The Cookie header without the proxy's cookies; null when it held none of them (forwarded unchanged). */
export function withoutProxyCookies(header: string | undefined): string | null {
  if (!header || !PROXY_COOKIES.some((name) => header.includes(name))) return null;
  const parts = header.split(';').map((part) => part.trim());
  const kept = parts.filter((part) => !PROXY_COOKIES.includes(part.split('=')[0]?.trim() ?? ''));
  return kept.length === parts.length ? null : kept.filter((part) => part !== '').join('; ');
}

/**
 * A container's Set-Cookie as the browser receives it: without any Domain attribute, so the cookie stays
 * on this port's host and never reaches sibling `cluster-*` hosts; null (dropped) when it names one of
 * the proxy's own cookies.
 */
export function hostOnlySetCookie(value: string): string | null {
  const parts = value.split(';');
  const name = parts[0]!.split('=')[0]!.trim();
  if (PROXY_COOKIES.includes(name)) return null;
  const kept = parts.filter((part, index) => index === 0 || !/^\s*domain\s*(=|$)/i.test(part));
  return kept.join(';');
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `https://<Host>` as browsers write an Origin (no default port, lower case); null for a bad Host. */
export function ownOrigin(host: string | undefined): string | null {
  if (!host) return null;
  try {
    return new URL(`https://${host}`).origin;
  } catch {
    return null;
  }
}

/** An origin the port's owner listed by name in cors.allowed_origins (`*` lists no one by name). */
function listedOrigin(access: MappingAccess, origin: string): boolean {
  return access.cors.enabled && origin !== '*' && access.cors.allowed_origins.includes(origin);
}

/**
 * Why a request that would carry the browser's proxy cookie must be refused, or null. State-changing
 * methods and WebSocket upgrades (which browsers send across origins with cookies and no preflight)
 * are refused when the browser says they come from another site or origin (`Sec-Fetch-Site` other than
 * same-origin or none) or when an `Origin` is neither this port's nor one the owner listed.
 */
export function crossSiteReason(
  method: string | undefined,
  headers: IncomingHttpHeaders,
  access: MappingAccess,
): string | null {
  const upgrade = headers.upgrade !== undefined;
  if (!upgrade && SAFE_METHODS.has((method ?? 'GET').toUpperCase())) return null;
  const origin = headers.origin;
  if (origin !== undefined) {
    if (origin === ownOrigin(headers.host) || listedOrigin(access, origin)) return null;
    return `a ${upgrade ? 'WebSocket' : 'state-changing request'} from origin ${origin} may not use this port's session cookie`;
  }
  const site = headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    return `a ${site} ${upgrade ? 'WebSocket' : 'state-changing request'} may not use this port's session cookie`;
  }
  return null;
}

/**
 * The CORS answer for `origin`: a listed origin is echoed with credentials; `*` alone answers `*` without
 * credentials (browsers then send no cookie and read no credentialed answer); anything else nothing.
 */
export function corsGrant(access: MappingAccess, origin: string): Record<string, string> | null {
  if (listedOrigin(access, origin)) {
    return {
      'access-control-allow-origin': origin,
      'access-control-allow-credentials': 'true',
      vary: 'Origin',
    };
  }
  if (access.cors.allowed_origins.includes('*')) return { 'access-control-allow-origin': '*' };
  return null;
}

/**
 * The login's `next` when it is a path on this same origin, else `/`. Refused: other hosts in any
 * spelling browsers accept (`//host`, `/\host`, `https://host`, tabs and newlines the URL parser drops).
 */
export function sameOriginPath(next: string, origin: string): string {
  if (!next.startsWith('/') || next.startsWith('//') || next.includes('\\') || hasControl(next)) return '/';
  try {
    return new URL(next, origin).origin === origin ? next : '/';
  } catch {
    return '/';
  }
}

/** Control characters and spaces, which URL parsers drop or trim before reading the host. */
function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code <= 0x20 || code === 0x7f) return true;
  }
  return false;
}
