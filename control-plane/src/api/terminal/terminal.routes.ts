import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { type RawData, WebSocket, WebSocketServer } from 'ws';
import type { AppContext } from '../../context.ts';
import { TrustedProxies } from '../../http/client-address.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { wrappedErrors } from '../../http/error-body.ts';
import { admitOrRefuse } from '../../http/rate-limit.ts';
import {
  refuseServiceKey,
  type TerminalClient,
  type TerminalService,
  type TerminalSession,
} from '../../terminal/service.ts';
import { actorOf } from '../accounts/common.ts';
import { MAX_SEQUENCE } from '../bounds.ts';

const tags = ['clusters'];
const TERMINAL_PATH = /^\/v1\/clusters\/(cluster_[a-z0-9]+)\/terminal$/;
/** The upgrade's route pattern, as the rate limiter's endpoint rules match routes. */
const TERMINAL_ROUTE = '/v1/clusters/:cluster_id/terminal';
/** Largest client message: input pastes are split by browsers long before this. */
const MAX_MESSAGE_BYTES = 1024 * 1024;

const TERMINAL_DESCRIPTION = `**Web terminal.** A PTY login shell (bash when the image has it, else sh) in a running cluster's
container, reached through the agent, for the dashboard. Needs \`write\` on the cluster (as SSH does); service keys
are refused (403 FORBIDDEN), over REST and on the WebSocket.

1. \`POST /v1/clusters/{cluster_id}/terminal/sessions\` with an API key starts the shell and answers
   \`{session_id, ticket, ticket_expires_at, websocket_path, reconnect_window_seconds}\`. The ticket is one-time and
   valid 30 s: browsers cannot set headers on a WebSocket, so the socket is authorised by it.
2. Open \`GET /v1/clusters/{cluster_id}/terminal?session_id=…&ticket=…&after=N\` as a WebSocket (non-browser
   clients may send \`Authorization: Bearer anv_…\` instead of a ticket; without session_id that opens a new
   session). \`after\` is the byte offset of output the client already has (0 at first).
3. To reconnect, get a new ticket with \`POST …/terminal/sessions/{session_id}/tickets\` and connect again with
   \`after\` = the next byte you expect. A session whose socket closed keeps running, its output buffered
   (newest 1 MiB), for 60 s; then it is closed. A new connection to a session replaces the previous one (close
   code 4000). \`DELETE …/terminal/sessions/{session_id}\` ends it at once.

Messages are JSON text frames. Server → client: \`{"type":"ready","session_id","seq","buffer_start"}\` first
(\`seq\`: offset of the next new byte), \`{"type":"output","seq":N,"data":"<base64>"}\` where \`seq\` is the offset
of the chunk's first byte in the session's output (replayed output first), \`{"type":"gap","from","to"}\` when
bytes the client asked for were already dropped, \`{"type":"exit","code"}\` when the shell ended (then close
1000), \`{"type":"error","code","message"}\`. Client → server: \`{"type":"input","data":"<text>"}\` (or a binary
frame of raw bytes), \`{"type":"resize","cols","rows"}\`, \`{"type":"signal","name":"INT"}\`. Refused upgrades answer
an HTTP status with the wrapped error body (401 no or bad credentials, 403/404 as for the cluster, 400 bad query).

An account holds at most ANVIL_MAX_TERMINAL_SESSIONS sessions at once (default 20): opening another answers 429
\`RATE_LIMITED\` (details.reason \`max_concurrent_sessions\`). When the opener loses access to the cluster (key revoked,
member suspended or removed, cluster unshared) the session ends within seconds: \`{"type":"error","code":"UNAUTHORIZED"}\`,
then close code 4001.`;

const SessionView = Type.Object({
  session_id: Type.String(),
  cluster_id: Type.String(),
  ticket: Type.String({
    description: 'One-time, valid ticket_expires_at; passed as ?ticket= on the WebSocket',
  }),
  ticket_expires_at: Type.String({ format: 'date-time' }),
  websocket_path: Type.String({
    description: 'Path and query to open as a WebSocket (same host as the API)',
  }),
  reconnect_window_seconds: Type.Integer(),
});

const Params = Type.Object({ cluster_id: Type.String({ pattern: '^cluster_[a-z0-9]+$', maxLength: 64 }) });
const SessionParams = Type.Object({
  cluster_id: Type.String({ pattern: '^cluster_[a-z0-9]+$', maxLength: 64 }),
  session_id: Type.String({ pattern: '^term_[a-z0-9]+$', maxLength: 64 }),
});

function view(
  terminal: TerminalService,
  session: TerminalSession,
  ticket: { value: string; expiresAt: Date },
) {
  return {
    session_id: session.id,
    cluster_id: session.clusterId,
    ticket: ticket.value,
    ticket_expires_at: ticket.expiresAt.toISOString(),
    websocket_path: `/v1/clusters/${session.clusterId}/terminal?session_id=${session.id}&ticket=${encodeURIComponent(ticket.value)}&after=0`,
    reconnect_window_seconds: Math.round(terminal.reconnectWindowMs / 1000),
  };
}

export const terminalRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const terminal = context.terminal;
  const config = { scope: 'clusters' as const };

  app.post(
    '/v1/clusters/:cluster_id/terminal/sessions',
    {
      config,
      schema: {
        tags,
        summary: 'Open a web terminal session (PTY shell) in a running cluster',
        description: TERMINAL_DESCRIPTION,
        params: Params,
        body: Type.Object(
          {
            cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
            rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
          },
          { additionalProperties: false },
        ),
        response: { 201: Envelope(SessionView), ...wrappedErrors(400, 401, 403, 404, 429, 503) },
      },
    },
    async (request, reply) => {
      const { session, ticket } = await terminal.create(
        actorOf(request),
        request.params.cluster_id,
        request.body,
      );
      return reply.code(201).send(ok(request, view(terminal, session, ticket)));
    },
  );

  app.post(
    '/v1/clusters/:cluster_id/terminal/sessions/:session_id/tickets',
    {
      config,
      schema: {
        tags,
        summary: 'A new one-time ticket to reconnect to a terminal session',
        description:
          'See POST /v1/clusters/{cluster_id}/terminal/sessions. 404 NOT_FOUND once the session closed.',
        params: SessionParams,
        response: { 201: Envelope(SessionView), ...wrappedErrors(401, 403, 404, 429) },
      },
    },
    async (request, reply) => {
      const { cluster_id, session_id } = request.params;
      const { session, ticket } = await terminal.ticket(actorOf(request), cluster_id, session_id);
      return reply.code(201).send(ok(request, view(terminal, session, ticket)));
    },
  );

  app.delete(
    '/v1/clusters/:cluster_id/terminal/sessions/:session_id',
    {
      config,
      schema: {
        tags,
        summary: 'End a terminal session (the shell is killed)',
        params: SessionParams,
        response: {
          200: Envelope(Type.Object({ session_id: Type.String(), closed: Type.Boolean() })),
          ...wrappedErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const { cluster_id, session_id } = request.params;
      const { session } = await terminal.ticket(actorOf(request), cluster_id, session_id);
      terminal.close(session);
      return ok(request, { session_id, closed: true });
    },
  );

  // Documents the WebSocket; a plain GET (no Upgrade header) gets 426.
  app.get(
    '/v1/clusters/:cluster_id/terminal',
    {
      config: { public: true },
      schema: {
        tags,
        summary: 'The web terminal WebSocket (connect with Upgrade: websocket)',
        description: TERMINAL_DESCRIPTION,
        params: Params,
        querystring: Type.Object({
          session_id: Type.Optional(Type.String({ maxLength: 64 })),
          ticket: Type.Optional(Type.String({ maxLength: 128 })),
          after: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_SEQUENCE })),
        }),
        response: wrappedErrors(401, 426),
      },
    },
    async () => {
      throw new ApiError(
        'UPGRADE_REQUIRED',
        'this endpoint is a WebSocket: connect with Upgrade: websocket',
        {},
        { status: 426 },
      );
    },
  );

  const trustedProxies = new TrustedProxies(context.config.trustedProxies);
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
  const onUpgrade = (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(request.url ?? '/', 'http://terminal');
    const match = TERMINAL_PATH.exec(url.pathname);
    if (!match) return;
    authorise(context, match[1]!, url, request, trustedProxies.clientOf(request)).then(
      (session) => wss.handleUpgrade(request, socket, head, (ws) => serve(terminal, session, ws, after(url))),
      (error: unknown) => refuse(socket, error, String(request.headers['x-request-id'] ?? 'ws')),
    );
  };
  app.server.on('upgrade', onUpgrade);
  app.addHook('preClose', async () => {
    app.server.off('upgrade', onUpgrade);
    terminal.closeAll();
    for (const ws of wss.clients) ws.terminate();
    wss.close();
  });
};

function after(url: URL): number {
  const raw = url.searchParams.get('after');
  return raw && /^\d{1,15}$/.test(raw) ? Number(raw) : 0;
}

/**
 * A ticket (browsers), or a member's API key (not a service key) in Authorization with write on the
 * cluster; either way from an address the account's ip_whitelist admits (the ticket may have been handed
 * elsewhere).
 */
async function authorise(
  context: AppContext,
  clusterId: string,
  url: URL,
  request: IncomingMessage,
  ip: string,
): Promise<TerminalSession> {
  const ticket = url.searchParams.get('ticket');
  const sessionId = url.searchParams.get('session_id');
  if (ticket) {
    const session = context.terminal.redeem(clusterId, ticket);
    if (!session || (sessionId && session.id !== sessionId)) {
      throw new ApiError(
        'UNAUTHORIZED',
        'the terminal ticket is unknown, used or expired: request a new one',
        {},
      );
    }
    await context.accounts.ipPolicy.check(session.accountId, ip);
    return session;
  }
  const principal = await context.keys.resolve(request.headers.authorization);
  refuseServiceKey(principal);
  await context.accounts.ipPolicy.check(principal.accountId, ip);
  // The request guard never sees an upgrade: it counts here, as a read of the terminal (a ticket's upgrade
  // was counted when the ticket was issued, by POST /v1/clusters/{id}/terminal/sessions).
  await admitOrRefuse(context.rateLimits, principal, 'GET', TERMINAL_ROUTE, {
    priority: request.headers['x-priority'],
  });
  const actor = { principal, ip };
  if (!principal.scopes.includes('clusters') || !principal.permissions.includes('write')) {
    throw new ApiError(
      'FORBIDDEN',
      'the terminal needs a key with write permission on the clusters scope',
      {},
    );
  }
  if (sessionId) {
    await context.ssh.clusters.require(actor, clusterId, 'write');
    const session = context.terminal.find(clusterId, sessionId, principal.userId);
    if (!session)
      throw new ApiError('NOT_FOUND', `no terminal session ${sessionId} of yours on this cluster`, {});
    return session;
  }
  return (await context.terminal.create(actor, clusterId, {})).session;
}

function refuse(socket: Duplex, error: unknown, requestId: string): void {
  const apiError =
    error instanceof ApiError ? error : new ApiError('INTERNAL_ERROR', 'terminal upgrade failed', {});
  const body = JSON.stringify({
    success: false,
    error: { code: apiError.code, message: apiError.message, details: apiError.details ?? {} },
    meta: { request_id: requestId },
  });
  socket.end(
    `HTTP/1.1 ${apiError.status} ${apiError.code}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function serve(terminal: TerminalService, session: TerminalSession, ws: WebSocket, from: number): void {
  const client: TerminalClient = {
    send(message) {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
    },
    close(code, reason) {
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(code, reason);
    },
  };
  ws.on('message', (raw: RawData, binary: boolean) => {
    const data = Array.isArray(raw) ? Buffer.concat(raw) : Buffer.from(raw as ArrayBuffer);
    if (binary) return terminal.input(session, data);
    let message: { type?: unknown; data?: unknown; cols?: unknown; rows?: unknown; name?: unknown };
    try {
      message = JSON.parse(data.toString('utf8'));
    } catch {
      return client.send({ type: 'error', code: 'VALIDATION_ERROR', message: 'messages are JSON objects' });
    }
    if (message.type === 'input' && typeof message.data === 'string') {
      terminal.input(session, Buffer.from(message.data, 'utf8'));
    } else if (
      message.type === 'resize' &&
      Number.isInteger(message.cols) &&
      Number.isInteger(message.rows) &&
      (message.cols as number) > 0 &&
      (message.rows as number) > 0 &&
      (message.cols as number) <= 1000 &&
      (message.rows as number) <= 1000
    ) {
      terminal.resize(session, message.cols as number, message.rows as number);
    } else if (
      message.type === 'signal' &&
      typeof message.name === 'string' &&
      /^[A-Z0-9]{2,8}$/.test(message.name)
    ) {
      terminal.signal(session, message.name);
    } else {
      client.send({
        type: 'error',
        code: 'VALIDATION_ERROR',
        message: 'unknown message: see the OpenAPI description',
      });
    }
  });
  ws.on('close', () => terminal.detach(session, client));
  ws.on('error', () => terminal.detach(session, client));
  terminal.attach(session, client, from);
}
