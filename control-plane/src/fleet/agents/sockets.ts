import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { AGENT_CONNECT_PATH, AGENT_TUNNEL_PATH, AGENT_WORKER_API_PATH } from '@anvil/shared/protocol';

/** Serves the WebSocket upgrades of one path. */
export interface UpgradeEndpoint {
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void;
}

/**
 * The agents' sockets on the API's HTTP server, routed by path in one upgrade listener: their control
 * connection (AGENT_CONNECT_PATH, the gateway), the reverse tunnels into containers (AGENT_TUNNEL_PATH)
 * and the RunPod worker API relays (AGENT_WORKER_API_PATH). Wired where all three exist (app.ts), so the
 * gateway is built before the tunnels and endpoints that need it and knows neither. Other paths are left
 * to the server's other upgrade listeners (terminals), or refused with 404 when there are none.
 */
export function attachAgentSockets(
  server: Server,
  endpoints: { connect: UpgradeEndpoint; tunnels: UpgradeEndpoint; workerApi: UpgradeEndpoint },
): void {
  const byPath = new Map<string, UpgradeEndpoint>([
    [AGENT_CONNECT_PATH, endpoints.connect],
    [AGENT_TUNNEL_PATH, endpoints.tunnels],
    [AGENT_WORKER_API_PATH, endpoints.workerApi],
  ]);
  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const endpoint = byPath.get((request.url ?? '').split('?')[0] ?? '');
    if (endpoint) endpoint.handleUpgrade(request, socket, head);
    else if (server.listenerCount('upgrade') === 1) refuseUpgrade(socket, 404, 'Not Found');
  });
}

/** Answers an upgrade request with a plain HTTP status and closes the socket. */
export function refuseUpgrade(
  socket: Duplex,
  status: number,
  text: string,
  headers: Record<string, string> = {},
): void {
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\n${extra}Content-Length: 0\r\n\r\n`);
}
