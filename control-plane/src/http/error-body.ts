import { Type } from '@sinclair/typebox';

/**
 * The spec has two error shapes. Cluster operations on /v1 wrap the error with `success: false` and
 * `meta.request_id`; everything else (/v2 account, auth, endpoint, training and cluster short forms)
 * answers flat `{error, message, code, details}`.
 */
export type ErrorArea = 'wrapped' | 'flat';

export function errorAreaOf(url: string): ErrorArea {
  return url.startsWith('/v1/') || url === '/v1' ? 'wrapped' : 'flat';
}

export interface ErrorInput {
  status: number;
  code: string;
  message: string;
  details?: Record<string, unknown> | undefined;
  extra?: Record<string, unknown> | undefined;
  requestId: string;
}

export function errorBody(area: ErrorArea, input: ErrorInput): Record<string, unknown> {
  if (area === 'wrapped') {
    return {
      success: false,
      error: { code: input.code, message: input.message, details: input.details ?? {}, ...input.extra },
      meta: { request_id: input.requestId },
    };
  }
  return {
    error: input.code,
    message: input.message,
    code: input.status,
    details: input.details ?? {},
    ...input.extra,
  };
}

export const FlatError = Type.Object(
  {
    error: Type.String({ description: 'Error code from the catalogue, e.g. VALIDATION_ERROR' }),
    message: Type.String(),
    code: Type.Integer({ description: 'HTTP status' }),
    details: Type.Record(Type.String(), Type.Unknown()),
    required_permission: Type.Optional(Type.String({ description: '<scope>:<permission> on 403 FORBIDDEN' })),
    retry_after: Type.Optional(Type.Integer({ description: 'Seconds to wait, on 429 RATE_LIMITED' })),
  },
  { $id: 'FlatError', description: 'Error body of /v2 account, auth, endpoint and training operations' },
);

export const WrappedError = Type.Object(
  {
    success: Type.Literal(false),
    error: Type.Object({
      code: Type.String(),
      message: Type.String(),
      details: Type.Record(Type.String(), Type.Unknown()),
      required_permission: Type.Optional(Type.String()),
      retry_after: Type.Optional(Type.Integer()),
    }),
    meta: Type.Object({ request_id: Type.String() }),
  },
  { $id: 'WrappedError', description: 'Error body of /v1 cluster operations' },
);

/** Response schemas for the error statuses a flat-area route can answer. */
export function flatErrors(...statuses: number[]): Record<number, unknown> {
  return Object.fromEntries(statuses.map((status) => [status, Type.Ref('FlatError')]));
}

export function wrappedErrors(...statuses: number[]): Record<number, unknown> {
  return Object.fromEntries(statuses.map((status) => [status, Type.Ref('WrappedError')]));
}
