import {
  type AgentMessage,
  ANSWER_TYPES,
  CLOSE_CODES,
  type ControlPlaneMessage,
  closeReason,
  createMessage,
  decodeControlPlaneMessage,
  encodeMessage,
  type MessageOf,
  PendingRequests,
  protocolMismatchReason,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { FatalAgentError } from '../errors.ts';
import type { Transport } from './transport.ts';

/** Why a channel ended; FatalAgentError when redialling cannot help. */
export type ChannelEnd = Error;

/**
 * One connection's message layer: encodes and validates outgoing messages, decodes incoming ones,
 * pairs answers with requests, and turns refusals and protocol mismatches into a single end reason.
 */
export class Channel {
  readonly #transport: Transport;
  readonly #logger: Logger;
  readonly #protocolVersion: number;
  readonly #pending = new PendingRequests<ControlPlaneMessage>();
  #handler: ((message: ControlPlaneMessage) => void) | null = null;
  /** Messages that arrive between welcome and the session installing its handler (the desired set). */
  #queued: ControlPlaneMessage[] = [];
  #ended = false;
  #resolveEnded!: (reason: ChannelEnd) => void;
  /** Resolves (never rejects) once, with why the channel is over. */
  readonly ended: Promise<ChannelEnd>;

  constructor(transport: Transport, logger: Logger, protocolVersion: number) {
    this.#transport = transport;
    this.#logger = logger;
    this.#protocolVersion = protocolVersion;
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
    transport.onMessage((text) => this.#receive(text));
    void transport.closed.then(({ code, reason }) =>
      this.#end(new Error(`connection closed by the control plane (${code}${reason ? `: ${reason}` : ''})`)),
    );
  }

  get bufferedAmount(): number {
    return this.#transport.bufferedAmount;
  }

  get isOpen(): boolean {
    return !this.#ended;
  }

  /** Stamp this side's protocol version, validate, send. Throws when closed or invalid. */
  send(message: AgentMessage): void {
    if (this.#ended) throw new Error(`send ${message.type}: connection is closed`);
    this.#transport.send(encodeMessage({ ...message, v: this.#protocolVersion }));
  }

  request(message: AgentMessage, timeoutMs: number): Promise<ControlPlaneMessage> {
    return this.#pending.request(message, (m) => this.send(m), timeoutMs);
  }

  /** Messages that are not answers to our requests: desired_state, command. */
  onMessage(handler: (message: ControlPlaneMessage) => void): void {
    this.#handler = handler;
    for (const message of this.#queued.splice(0)) handler(message);
  }

  close(code: number, reason: string, why: Error = new Error(reason)): void {
    this.#transport.close(code, closeReason(reason));
    this.#end(why);
  }

  #end(reason: ChannelEnd): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#pending.rejectAll(reason);
    this.#resolveEnded(reason);
  }

  #receive(text: string): void {
    const result = decodeControlPlaneMessage(text);
    if (!result.ok) {
      if (result.code === 'unsupported_version' && result.head) {
        this.#refuseVersion(result.head.v, result.head.id);
        return;
      }
      // A malformed frame is the control plane's bug; dropping it keeps the connection and the
      // request it may have answered times out on its own.
      this.#logger.warn({ code: result.code, error: result.error }, 'dropped a frame from the control plane');
      return;
    }
    const message = result.message;
    if (ANSWER_TYPES.has(message.type) && this.#pending.settle(message)) return;
    if (message.type === 'refusal') {
      this.#endWithRefusal(message);
      return;
    }
    if (ANSWER_TYPES.has(message.type)) {
      this.#logger.debug({ type: message.type, id: message.id }, 'late or unsolicited answer ignored');
      return;
    }
    if (this.#handler) this.#handler(message);
    else this.#queued.push(message);
  }

  #refuseVersion(peerVersion: number, id: string): void {
    const reason = protocolMismatchReason('control plane', peerVersion);
    this.#logger.error({ peerVersion }, reason);
    try {
      this.send(
        createMessage(
          'refusal',
          {
            code: 'protocol_incompatible',
            reason,
            retryable: false,
            supportedVersions: { ...SUPPORTED_PROTOCOL_VERSIONS },
          },
          { id },
        ),
      );
    } catch (err) {
      this.#logger.debug({ err }, 'could not send the refusal');
    }
    this.close(CLOSE_CODES.refusedFatal, reason, new FatalAgentError(reason, 'protocol_incompatible'));
  }

  #endWithRefusal(refusal: MessageOf<'refusal'>): void {
    const error = refusalError('connection', refusal);
    this.close(
      refusal.retryable ? CLOSE_CODES.refusedRetry : CLOSE_CODES.refusedFatal,
      refusal.reason,
      error,
    );
  }
}

/** One readable line for a refusal; fatal when the control plane says retrying cannot help. */
export function refusalError(step: string, refusal: MessageOf<'refusal'>): Error {
  const text = `${step} refused by the control plane: ${refusal.reason} (${refusal.code})`;
  return refusal.retryable ? new Error(text) : new FatalAgentError(text, refusal.code);
}
