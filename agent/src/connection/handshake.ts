import { createMessage, type Inventory, type MessageOf } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { errorMessage, FatalAgentError, wrapError } from '../errors.ts';
import { type Channel, refusalError } from './channel.ts';
import type { CredentialStore, HostCredential } from './credential-store.ts';

export interface HandshakeOptions {
  controlPlane: string;
  credentials: CredentialStore;
  joinToken: string | null;
  hostname: string;
  agentVersion: string;
  inventory: () => Promise<Inventory>;
  timeoutMs: number;
  logger: Logger;
}

export interface HandshakeResult {
  credential: HostCredential;
  welcome: MessageOf<'welcome'>;
}

/**
 * Register (first contact only: join token -> credential, saved before anything else happens), then
 * hello -> welcome. Any refusal ends here as an error; a fatal one stops the agent.
 */
export async function handshake(channel: Channel, options: HandshakeOptions): Promise<HandshakeResult> {
  const { logger } = options;
  // Gathered from the start, while the credential is read and a token traded: on a busy machine it
  // takes many seconds, and the control plane's handshake time-out runs from the socket's opening.
  const gathering = options.inventory().then(
    (value) => ({ ok: true as const, value }),
    (err: unknown) => ({ ok: false as const, err }),
  );
  let credential: HostCredential | null;
  try {
    credential = await options.credentials.load();
  } catch (err) {
    // A damaged credential file does not heal by redialling: say so and stop.
    throw new FatalAgentError(errorMessage(err), 'credential_unreadable');
  }
  if (credential && options.joinToken) {
    logger.info(
      { path: options.credentials.path },
      'host credential found; the join token is not needed and not used',
    );
  }
  if (!credential) {
    if (!options.joinToken) {
      throw new FatalAgentError(
        `no host credential at ${options.credentials.path} and no join token given: pass --join-token`,
        'no_credential',
      );
    }
    const answer = await channel.request(
      createMessage('register', {
        joinToken: options.joinToken,
        hostname: options.hostname,
        agentVersion: options.agentVersion,
      }),
      options.timeoutMs,
    );
    if (answer.type === 'refusal') throw refusalError('join token', answer);
    if (answer.type !== 'registered') throw new Error(`register: unexpected answer ${answer.type}`);
    credential = {
      hostId: answer.hostId,
      credential: answer.credential,
      controlPlane: options.controlPlane,
      createdAt: new Date().toISOString(),
    };
    await options.credentials.save(credential);
    logger.info(
      { hostId: credential.hostId, path: options.credentials.path },
      'registered; host credential saved',
    );
  }

  const gathered = await gathering;
  if (!gathered.ok) throw wrapError('gather inventory', gathered.err);
  const inventory: Inventory = gathered.value;
  const answer = await channel.request(
    createMessage('hello', {
      agentVersion: options.agentVersion,
      hostId: credential.hostId,
      credential: credential.credential,
      inventory,
    }),
    options.timeoutMs,
  );
  if (answer.type === 'refusal') throw refusalError('host credential', answer);
  if (answer.type !== 'welcome') throw new Error(`hello: unexpected answer ${answer.type}`);
  if (answer.hostId !== credential.hostId) {
    throw new FatalAgentError(
      `hello: control plane welcomed host ${answer.hostId} but this agent is ${credential.hostId}`,
      'host_mismatch',
    );
  }
  return { credential, welcome: answer };
}
