import {
  CLOSE_CODES,
  type ControlPlaneMessage,
  createMessage,
  type MessageOf,
  type RefusalCode,
} from '@anvil/shared/protocol';
import type { AuthenticateResult, HostService } from '../hosts/hosts.ts';

/** A refusal the connection sends, with its full reason, before it closes with `closeCode`. */
export interface Refusal {
  code: RefusalCode;
  reason: string;
  retryable: boolean;
  closeCode: number;
}

/** The host a hello proved, as the credential check read it. */
export type Authenticated = Extract<AuthenticateResult, { ok: true }>;

interface HandshakeLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

/** What the handshake needs of the connection it runs on. */
export interface HandshakeDeps {
  readonly hosts: Pick<HostService, 'register' | 'authenticate' | 'markConnected'>;
  readonly replicaId: string;
  readonly connectionId: string;
  log(): HandshakeLogger;
  /** The connection's log fields, with `extra`. */
  details(extra?: Record<string, unknown>): Record<string, unknown>;
  /** May this connection become the host's (false while another connection of the host answers)? */
  claim(hostId: string): Promise<boolean>;
}

/** What welcome tells the agent besides its host id (GatewaySettings has these). */
export interface WelcomeSettings {
  heartbeatSeconds: number;
  metricsSeconds: number;
  serverVersion: string;
  credentialRenewSeconds: number;
}

/**
 * register: a join token exchanged for a new host's id and credential. Answers the `registered` message to
 * send, or the refusal (a refused token is final; a failure of ours is worth a retry).
 */
export async function register(
  d: HandshakeDeps,
  message: MessageOf<'register'>,
): Promise<{ ok: true; registered: ControlPlaneMessage } | { ok: false; refusal: Refusal }> {
  let result: Awaited<ReturnType<HostService['register']>>;
  try {
    result = await d.hosts.register({
      joinToken: message.joinToken,
      hostname: message.hostname,
      agentVersion: message.agentVersion,
    });
  } catch (error) {
    d.log().error(d.details({ err: error }), 'registration failed');
    return {
      ok: false,
      refusal: {
        code: 'internal_error',
        reason: 'registration failed on the control plane; retry',
        retryable: true,
        closeCode: CLOSE_CODES.refusedRetry,
      },
    };
  }
  if (!result.ok) {
    d.log().warn(d.details({ hostname: message.hostname, reason: result.reason }), 'join token refused');
    return {
      ok: false,
      refusal: {
        code: 'join_token_invalid',
        reason: result.reason,
        retryable: false,
        closeCode: CLOSE_CODES.refusedFatal,
      },
    };
  }
  d.log().info(
    d.details({
      registeredHostId: result.hostId,
      hostname: message.hostname,
      agentVersion: message.agentVersion,
    }),
    'host registered',
  );
  return {
    ok: true,
    registered: createMessage(
      'registered',
      { hostId: result.hostId, credential: result.credential },
      { id: message.id },
    ),
  };
}

/**
 * hello: the credential checked, the host claimed for this connection (a second agent sharing a credential
 * is refused while the first answers) and marked connected here. Answers the host, or the refusal.
 */
export async function hello(
  d: HandshakeDeps,
  message: MessageOf<'hello'>,
): Promise<{ ok: true; auth: Authenticated } | { ok: false; refusal: Refusal }> {
  let auth: AuthenticateResult;
  try {
    auth = await d.hosts.authenticate(message.hostId, message.credential);
  } catch (error) {
    d.log().error(d.details({ err: error }), 'hello failed');
    return {
      ok: false,
      refusal: {
        code: 'internal_error',
        reason: 'the control plane could not check the credential; retry',
        retryable: true,
        closeCode: CLOSE_CODES.refusedRetry,
      },
    };
  }
  if (!auth.ok) {
    d.log().warn(
      d.details({ claimedHostId: message.hostId, reason: auth.reason }),
      'host credential refused',
    );
    return {
      ok: false,
      refusal: {
        code: 'credential_invalid',
        reason: auth.reason,
        retryable: false,
        closeCode: CLOSE_CODES.refusedFatal,
      },
    };
  }
  const hostId = auth.host.id;
  if (!(await d.claim(hostId))) {
    d.log().warn(
      d.details({ claimedHostId: hostId }),
      'a second agent claims a host whose agent is connected and answering; refused',
    );
    return {
      ok: false,
      refusal: {
        code: 'host_already_connected',
        reason: `host ${hostId} is already connected from another agent that still answers; two agents must not share a credential`,
        retryable: true,
        closeCode: CLOSE_CODES.refusedRetry,
      },
    };
  }
  await d.hosts.markConnected(hostId, {
    replicaId: d.replicaId,
    connectionId: d.connectionId,
    agentVersion: message.agentVersion,
    protocolVersion: message.v,
    inventory: message.inventory,
    // An agent redialling sends the inventory it sent last: then nothing is rewritten.
    storedInventory: auth.host.inventory,
  });
  return { ok: true, auth };
}

/** The welcome that answers a hello: the agent's settings and when its credential was issued. */
export function welcome(
  settings: WelcomeSettings,
  nowMs: number,
  auth: Authenticated,
  answering: string,
): ControlPlaneMessage {
  return createMessage(
    'welcome',
    {
      hostId: auth.host.id,
      heartbeatSeconds: settings.heartbeatSeconds,
      metricsSeconds: settings.metricsSeconds,
      serverVersion: settings.serverVersion,
      serverTime: nowMs,
      credentialRenewSeconds: settings.credentialRenewSeconds,
      // A credential already renewed away counts as issued at the epoch: the agent renews at once.
      credentialIssuedAt: auth.previous ? 0 : (auth.host.credentialIssuedAt ?? auth.host.createdAt).getTime(),
    },
    { id: answering },
  );
}

/** The log lines of a welcomed agent; a simulated GPU inventory is called out. */
export function logWelcomed(d: Pick<HandshakeDeps, 'log' | 'details'>, message: MessageOf<'hello'>): void {
  const gpus = message.inventory.gpus;
  d.log().info(
    d.details({
      agentVersion: message.agentVersion,
      protocol: message.v,
      gpus: gpus.devices.length,
      simulated: gpus.simulated,
    }),
    'agent connected',
  );
  if (gpus.simulated) {
    d.log().warn(
      d.details({ gpus: gpus.devices.map((device) => device.name) }),
      'HOST DECLARES A SIMULATED GPU INVENTORY: its GPUs are not real devices (development and tests only)',
    );
  }
}
