import { AGENT_CONNECT_PATH } from '@anvil/shared/protocol';

/** `https://cp.example.com` -> `wss://cp.example.com/agent/v1/connect`; ws:// and wss:// pass through. */
export function connectUrl(controlPlane: string): string {
  let url: URL;
  try {
    url = new URL(controlPlane);
  } catch {
    throw new Error(`control plane url ${JSON.stringify(controlPlane)} is not a URL`);
  }
  const schemes: Record<string, string> = { 'http:': 'ws:', 'https:': 'wss:', 'ws:': 'ws:', 'wss:': 'wss:' };
  const scheme = schemes[url.protocol];
  if (!scheme) throw new Error(`control plane url must be http(s) or ws(s), got ${url.protocol}`);
  url.protocol = scheme;
  url.pathname = url.pathname.replace(/\/+$/, '') + AGENT_CONNECT_PATH;
  url.search = '';
  url.hash = '';
  return url.toString();
}
