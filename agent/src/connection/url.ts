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

/** Loopback names and addresses: plain ws:// to these never leaves the machine. */
function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost') || host === '::1') return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Why `controlPlane` must not be used, or null. The host credential travels in the hello and the channel
 * carries every container's logs and the commands the agent obeys: over plain ws:// (or http://) anyone on
 * the path reads and could replay them. Plain text is accepted only to a loopback address, or where the
 * operator opted in (allowInsecure: --allow-insecure-control-plane / ANVIL_ALLOW_INSECURE_CONTROL_PLANE=true).
 */
export function insecureControlPlaneRefusal(controlPlane: string, allowInsecure: boolean): string | null {
  const url = new URL(connectUrl(controlPlane));
  if (url.protocol === 'wss:' || allowInsecure || isLoopbackHost(url.hostname)) return null;
  return (
    `control plane url ${JSON.stringify(controlPlane)} is not encrypted (ws:// or http://) and not a loopback ` +
    'address: the host credential and every command would cross the network in clear text. Use https:// ' +
    '(wss://), or opt in with --allow-insecure-control-plane (ANVIL_ALLOW_INSECURE_CONTROL_PLANE=true) on a ' +
    'network you trust'
  );
}
