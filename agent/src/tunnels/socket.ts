import { MAX_FRAME_BYTES, TUNNEL_HEADERS } from '@anvil/shared/protocol';
import { WebSocket } from 'ws';

export interface TunnelDial {
  url: string;
  hostId: string;
  credential: string;
  tunnelId: string;
  token: string;
  timeoutMs: number;
}

/** Dials the tunnel socket; rejects with the HTTP status (and the control plane's reason) when refused. */
export function dialTunnel(dial: TunnelDial): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(dial.url, {
      handshakeTimeout: dial.timeoutMs,
      maxPayload: MAX_FRAME_BYTES,
      perMessageDeflate: false,
      // A zero masking key (ws then skips masking, and the control plane unmasking): tunnel sockets carry
      // bulk data (downloads, proxied responses) where masking in JavaScript cost as much as the rest of
      // the relay's work per byte. Masking protects intermediaries from scripts in browsers; this client
      // is no browser and talks to its own control plane (over TLS in production).
      generateMask: (mask: Buffer) => mask.fill(0),
      headers: {
        authorization: `Bearer ${dial.credential}`,
        [TUNNEL_HEADERS.hostId]: dial.hostId,
        [TUNNEL_HEADERS.tunnelId]: dial.tunnelId,
        [TUNNEL_HEADERS.token]: dial.token,
      },
    });
    ws.on('unexpected-response', (_request, response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        if (body.length < 512) body += chunk;
      });
      response.on('end', () => {
        reject(
          new Error(
            `the control plane refused the tunnel socket: HTTP ${response.statusCode}${body.trim() ? ` (${body.trim().slice(0, 200)})` : ''}`,
          ),
        );
        ws.terminate();
      });
      response.on('error', () => reject(new Error(`tunnel socket refused: HTTP ${response.statusCode}`)));
    });
    ws.once('error', (error) => reject(new Error(`tunnel socket: ${error.message}`)));
    ws.once('close', (code) => reject(new Error(`tunnel socket closed before opening (${code})`)));
    ws.once('open', () => resolve(ws));
  });
}
