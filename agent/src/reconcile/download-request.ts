import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { TUNNEL_HEADERS } from '@anvil/shared/protocol';
import type { HostCredential } from '../connection/credential-store.ts';
import type { DownloadRequester } from './download-cache.ts';

/**
 * GETs download paths on the control plane (its http(s) address, whatever scheme the agent was given),
 * presenting the host credential as the tunnels do. `timeoutMs` bounds the wait for the response head
 * and each silence of the body after it, not the whole transfer (datasets may be large).
 */
export function controlPlaneDownloads(
  controlPlaneUrl: string,
  credential: () => Pick<HostCredential, 'hostId' | 'credential'> | null,
  timeoutMs = 30_000,
): DownloadRequester {
  const base = new URL(controlPlaneUrl);
  base.protocol = base.protocol === 'wss:' || base.protocol === 'https:' ? 'https:' : 'http:';
  return (path) =>
    new Promise<IncomingMessage>((resolve, reject) => {
      const current = credential();
      if (!current) return reject(new Error('the agent is not registered'));
      const url = new URL(path, base);
      const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
        method: 'GET',
        headers: {
          authorization: `Bearer ${current.credential}`,
          [TUNNEL_HEADERS.hostId]: current.hostId,
        },
        timeout: timeoutMs,
      });
      request.once('timeout', () => request.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      request.once('error', reject);
      request.once('response', resolve);
      request.end();
    });
}
