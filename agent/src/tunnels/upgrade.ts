import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { TUNNEL_HEADERS, TUNNEL_UPGRADE } from '@anvil/shared/protocol';
import type { TunnelDial } from './socket.ts';

/**
 * Dials a raw stream tunnel: an HTTP/1.1 Upgrade to TUNNEL_UPGRADE at the tunnel URL (TLS for wss/https),
 * presenting the host credential and the one-time token. Resolves with the socket once the control
 * plane answered 101; from then on it carries the stream's bytes as they are. Rejects with the HTTP
 * status (and the control plane's reason) when refused, or on time-out.
 */
export function dialUpgrade(dial: TunnelDial): Promise<Socket> {
  return dialRawUpgrade({
    url: dial.url,
    timeoutMs: dial.timeoutMs,
    what: 'tunnel socket',
    headers: {
      authorization: `Bearer ${dial.credential}`,
      [TUNNEL_HEADERS.hostId]: dial.hostId,
      [TUNNEL_HEADERS.tunnelId]: dial.tunnelId,
      [TUNNEL_HEADERS.token]: dial.token,
    },
  });
}

/**
 * The raw upgrade itself, for any path of the control plane that hands over a byte pipe (tunnels, the
 * worker API relay): `headers` carry the credentials, `what` names the socket in errors.
 */
export function dialRawUpgrade(dial: {
  url: string;
  timeoutMs: number;
  what: string;
  headers: Record<string, string>;
}): Promise<Socket> {
  const what = dial.what;
  const url = new URL(dial.url);
  const secure = url.protocol === 'wss:' || url.protocol === 'https:';
  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (message: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(new Error(message));
    };
    const request = (secure ? httpsRequest : httpRequest)({
      // URL keeps IPv6 literals in brackets; the socket wants the bare address.
      hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: url.port || (secure ? 443 : 80),
      path: `${url.pathname}${url.search}`,
      method: 'GET',
      // A connection of its own: an upgraded socket never goes back to a pool.
      agent: false,
      headers: {
        connection: 'Upgrade',
        upgrade: TUNNEL_UPGRADE,
        ...dial.headers,
      },
    });
    const timer = setTimeout(() => {
      fail(`${what}: no answer within ${dial.timeoutMs} ms`);
      request.destroy();
    }, dial.timeoutMs);
    request.once('upgrade', (response: IncomingMessage, socket: Socket, head: Buffer) => {
      if ((response.headers.upgrade ?? '').toLowerCase() !== TUNNEL_UPGRADE) {
        socket.destroy();
        fail(`${what}: the control plane upgraded to ${JSON.stringify(response.headers.upgrade)}`);
        return;
      }
      if (settled) {
        socket.destroy();
        return;
      }
      settled = true;
      clearTimeout(timer);
      // The stream's first bytes may share a read with the 101 head: node hands them over apart.
      if (head.length > 0) socket.unshift(head);
      socket.setTimeout(0);
      socket.setNoDelay(true);
      // The control plane's FIN ends only its direction; the container's reply still flows back.
      socket.allowHalfOpen = true;
      resolve(socket);
    });
    request.once('response', (response: IncomingMessage) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        if (body.length < 512) body += chunk;
      });
      const refused = () => {
        const reason = body.trim().slice(0, 200);
        fail(
          `the control plane refused the ${what}: HTTP ${response.statusCode}${reason ? ` (${reason})` : ''}`,
        );
        request.destroy();
      };
      response.once('end', refused);
      response.once('error', refused);
    });
    request.once('error', (error) => fail(`${what}: ${error.message}`));
    request.end();
  });
}
