import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';

/**
 * /v1 cluster operations answer `{success: true, data, meta: {request_id, ...}}` (spec: Envelope
 * conventions). Routes build the body with `ok()` and describe it with `Envelope(schema)`.
 */
export function ok<T>(request: FastifyRequest, data: T, meta: Record<string, unknown> = {}) {
  return { success: true as const, data, meta: { request_id: request.id, ...meta } };
}

export function Envelope<T extends TSchema>(data: T, meta: Record<string, TSchema> = {}) {
  return Type.Object({
    success: Type.Literal(true),
    data,
    meta: Type.Object({ request_id: Type.String(), ...meta }, { additionalProperties: true }),
  });
}
