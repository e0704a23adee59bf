import { AGENT_TUNNEL_PATH } from '@anvil/shared/protocol';
import { connectUrl } from '../connection/url.ts';

/** `https://cp.example.com` -> `wss://cp.example.com/agent/v1/tunnel`. */
export function tunnelUrl(controlPlane: string): string {
  const url = new URL(connectUrl(controlPlane));
  url.pathname = url.pathname.replace(/\/agent\/v1\/connect$/, AGENT_TUNNEL_PATH);
  return url.toString();
}
