import { createMessage, type MessageOf } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { type Clock, sleep } from '../clock.ts';
import { errorMessage } from '../errors.ts';
import type { Channel } from './channel.ts';
import type { CredentialStore, HostCredential } from './credential-store.ts';

/** Longest single wait: timers overflow past 2^31-1 ms (~24.8 days) and fire at once. */
const MAX_WAIT_MS = 6 * 3_600_000;

export interface RenewalOptions {
  credential: HostCredential;
  welcome: MessageOf<'welcome'>;
  credentials: CredentialStore;
  clock: Clock;
  logger: Logger;
  timeoutMs: number;
  /** The renewed credential is saved: later tunnels, downloads and hellos use it. */
  renewed(credential: HostCredential): void;
}

/**
 * Keeps the host credential young: once it is as old as welcome's credentialRenewSeconds, asks for a new
 * one over the channel, stores it (atomically: write, then rename) and uses it from then on. The control
 * plane keeps the old one working for a grace, so a crash between its answer and the save costs nothing:
 * the next hello presents the old one, and the control plane has the agent renew at once. A control plane
 * without rotation sends no credentialRenewSeconds, and nothing is asked. Ends with the session.
 */
export async function runCredentialRenewal(
  channel: Channel,
  options: RenewalOptions,
  signal: AbortSignal,
): Promise<void> {
  const { welcome, clock, logger } = options;
  const renewSeconds = welcome.credentialRenewSeconds;
  if (renewSeconds === undefined) return;
  let current = options.credential;
  let issuedAt = welcome.credentialIssuedAt ?? 0;
  while (!signal.aborted) {
    const dueInMs = issuedAt + renewSeconds * 1000 - clock.now();
    if (dueInMs > 0) {
      await sleep(clock, Math.min(dueInMs, MAX_WAIT_MS), signal);
      continue;
    }
    const answer = await channel.request(createMessage('renew_credential', {}), options.timeoutMs);
    if (answer.type !== 'credential_renewed') {
      throw new Error(`renew_credential: unexpected answer ${answer.type}`);
    }
    if (answer.hostId !== current.hostId) {
      throw new Error(`renew_credential: a credential for host ${answer.hostId}, not ${current.hostId}`);
    }
    const next: HostCredential = {
      ...current,
      credential: answer.credential,
      createdAt: new Date(answer.issuedAt).toISOString(),
    };
    try {
      await options.credentials.save(next);
    } catch (err) {
      logger.error(
        { err: errorMessage(err), path: options.credentials.path },
        'could not save the renewed host credential; the old one works until its grace ends',
      );
      throw err;
    }
    current = next;
    issuedAt = answer.issuedAt;
    options.renewed(next);
    logger.info(
      { hostId: next.hostId, previousValidUntil: new Date(answer.previousValidUntil).toISOString() },
      'host credential renewed and saved',
    );
  }
}
