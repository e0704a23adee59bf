import { randomUUID } from 'node:crypto';
import type { TSchema } from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import {
  AGENT_MESSAGES,
  type AgentMessage,
  type AnyMessage,
  type BodyOf,
  CONTROL_PLANE_MESSAGES,
  type ControlPlaneMessage,
  type MessageOf,
  type MessageType,
} from './messages.ts';
import { isProtocolCompatible, MAX_FRAME_BYTES, PROTOCOL_VERSION } from './version.ts';

export const DECODE_ERROR_CODES = [
  'too_large',
  'bad_json',
  'bad_envelope',
  'unknown_type',
  'unsupported_version',
  'invalid_message',
] as const;
export type DecodeErrorCode = (typeof DECODE_ERROR_CODES)[number];

/** The envelope fields that could be read from a rejected frame, so the receiver can answer its id. */
export interface EnvelopeHead {
  v: number;
  type: string;
  id: string;
}

export type DecodeResult<M> =
  | { ok: true; message: M }
  | { ok: false; code: DecodeErrorCode; error: string; head: EnvelopeHead | null };

// Compiled once per schema on first use (not at import), then reused for every frame.
const checkers = new Map<TSchema, TypeCheck<TSchema>>();
function checkerFor(schema: TSchema): TypeCheck<TSchema> {
  let checker = checkers.get(schema);
  if (!checker) {
    checker = TypeCompiler.Compile(schema);
    checkers.set(schema, checker);
  }
  return checker;
}

function firstError(checker: TypeCheck<TSchema>, value: unknown): string {
  const e = checker.Errors(value).First();
  return e ? `${e.path || '/'}: ${e.message}` : 'does not match the schema';
}

function readHead(value: unknown): EnvelopeHead | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const { v, type, id } = value as Record<string, unknown>;
  if (typeof v !== 'number' || !Number.isInteger(v) || typeof type !== 'string' || typeof id !== 'string') {
    return null;
  }
  if (id.length === 0 || id.length > 128 || type.length > 64) return null;
  return { v, type, id };
}

function decodeWith<M>(registry: Readonly<Record<string, TSchema>>, raw: string | Buffer): DecodeResult<M> {
  const size = typeof raw === 'string' ? Buffer.byteLength(raw) : raw.length;
  if (size > MAX_FRAME_BYTES) {
    return {
      ok: false,
      code: 'too_large',
      error: `frame of ${size} bytes exceeds ${MAX_FRAME_BYTES}`,
      head: null,
    };
  }
  let value: unknown;
  try {
    value = JSON.parse(typeof raw === 'string' ? raw : raw.toString('utf8'));
  } catch (err) {
    return { ok: false, code: 'bad_json', error: `not JSON: ${(err as Error).message}`, head: null };
  }
  const head = readHead(value);
  if (!head) {
    return {
      ok: false,
      code: 'bad_envelope',
      error: 'expected an object with integer v, string type and string id',
      head,
    };
  }
  const schema = Object.hasOwn(registry, head.type) ? registry[head.type] : undefined;
  if (!schema)
    return {
      ok: false,
      code: 'unknown_type',
      error: `unknown message type ${JSON.stringify(head.type)}`,
      head,
    };
  // A refusal is frozen across versions, so a peer of another version can still say why it refuses.
  if (!isProtocolCompatible(head.v) && head.type !== 'refusal') {
    return {
      ok: false,
      code: 'unsupported_version',
      error: `protocol version ${head.v} is not supported`,
      head,
    };
  }
  const checker = checkerFor(schema);
  if (!checker.Check(value)) {
    return { ok: false, code: 'invalid_message', error: `${head.type}${firstError(checker, value)}`, head };
  }
  return { ok: true, message: value as M };
}

/** Decode a frame received by the control plane (sent by an agent). Never throws. */
export function decodeAgentMessage(raw: string | Buffer): DecodeResult<AgentMessage> {
  return decodeWith<AgentMessage>(AGENT_MESSAGES, raw);
}

/** Decode a frame received by an agent (sent by the control plane). Never throws. */
export function decodeControlPlaneMessage(raw: string | Buffer): DecodeResult<ControlPlaneMessage> {
  return decodeWith<ControlPlaneMessage>(CONTROL_PLANE_MESSAGES, raw);
}

export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}

const ALL_MESSAGES: Readonly<Record<string, TSchema>> = { ...AGENT_MESSAGES, ...CONTROL_PLANE_MESSAGES };

/**
 * Validate and serialise a message. Throws ProtocolError on a message that breaks the schema or the
 * frame limit: that is a bug on the sending side, caught before the peer has to refuse it.
 */
export function encodeMessage(message: AnyMessage): string {
  const type: string = message.type;
  const schema = ALL_MESSAGES[type];
  if (!schema) throw new ProtocolError(`encode: unknown message type ${type}`);
  const checker = checkerFor(schema);
  if (!checker.Check(message)) throw new ProtocolError(`encode ${type}: ${firstError(checker, message)}`);
  const text = JSON.stringify(message);
  if (Buffer.byteLength(text) > MAX_FRAME_BYTES) {
    throw new ProtocolError(`encode ${type}: frame exceeds ${MAX_FRAME_BYTES} bytes`);
  }
  return text;
}

export function newMessageId(): string {
  return randomUUID();
}

/**
 * Build a message: adds `v` (this side's PROTOCOL_VERSION unless given, which tests use to play an
 * incompatible peer) and `id` (fresh unless given, as answers reuse the id they answer).
 */
export function createMessage<T extends MessageType>(
  type: T,
  body: BodyOf<T>,
  options: { id?: string; v?: number } = {},
): MessageOf<T> {
  return {
    v: options.v ?? PROTOCOL_VERSION,
    type,
    id: options.id ?? newMessageId(),
    ...body,
  } as unknown as MessageOf<T>;
}
