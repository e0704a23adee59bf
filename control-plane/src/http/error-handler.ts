import { ApiError } from '@anvil/shared';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import FindMyWay from 'find-my-way';
import { errorAreaOf, errorBody } from './error-body.ts';

const GENERIC_CODES: Record<number, string> = {
  400: 'VALIDATION_ERROR',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  406: 'NOT_ACCEPTABLE',
  408: 'REQUEST_TIMEOUT',
  409: 'CONFLICT',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
};

export function sendError(request: FastifyRequest, reply: FastifyReply, error: ApiError): FastifyReply {
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  // Serialised here rather than by the route's response schema: an error must reach the client in the
  // shape of its area even where a route declared the other one (a mismatch was a 500 before).
  return reply
    .code(error.status)
    .type('application/json; charset=utf-8')
    .serializer(JSON.stringify)
    .send(
      errorBody(errorAreaOf(request.url), {
        status: error.status,
        code: error.code,
        message: error.message,
        details: error.details,
        extra: error.extra,
        requestId: request.id,
      }),
    );
}

interface AjvIssue {
  instancePath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

function fieldOf(issue: AjvIssue, location: string | undefined): string {
  const params = issue.params ?? {};
  const path = (issue.instancePath ?? '').replace(/^\//, '').replaceAll('/', '.');
  const leaf = (params['missingProperty'] ?? params['additionalProperty']) as string | undefined;
  const field = [path, leaf].filter(Boolean).join('.');
  return field || location || 'body';
}

/** Maps anything thrown while handling a request to the spec's error shape of that route's area. */
export function toApiError(error: FastifyError | ApiError | Error): ApiError {
  if (error instanceof ApiError) return error;
  const fastifyError = error as FastifyError & { validation?: AjvIssue[]; validationContext?: string };
  if (fastifyError.validation && fastifyError.validation.length > 0) {
    const issue = fastifyError.validation[0]!;
    const location = fastifyError.validationContext;
    const field = fieldOf(issue, location);
    const reason =
      issue.keyword === 'additionalProperties'
        ? 'is not an allowed field'
        : issue.keyword === 'required'
          ? 'is required'
          : (issue.message ?? 'is invalid');
    return new ApiError('VALIDATION_ERROR', `${location ?? 'body'} field "${field}" ${reason}`, {
      field,
      reason,
      location: location ?? 'body',
    });
  }
  const status = fastifyError.statusCode ?? 500;
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('VALIDATION_ERROR', 'request body is not valid JSON', {
        field: 'body',
        reason: fastifyError.message,
        location: 'body',
      });
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('PAYLOAD_TOO_LARGE', 'request body is larger than the server accepts', {
        reason: fastifyError.message,
      });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError('UNSUPPORTED_MEDIA_TYPE', 'unsupported Content-Type; send application/json', {
        reason: fastifyError.message,
      });
    default:
      break;
  }
  if (status >= 400 && status < 500) {
    return new ApiError(GENERIC_CODES[status] ?? 'BAD_REQUEST', fastifyError.message, {}, { status });
  }
  // 5xx: the text of the failure stays in the logs, never in the response.
  return new ApiError(
    'INTERNAL_ERROR',
    'internal error; quote the request id when reporting it',
    {},
    { status: 500 },
  );
}

/**
 * Fastify's `frameworkErrors` option: errors raised before routing (a path whose percent-escapes do not
 * decode, FST_ERR_BAD_URL; an unsupported content type) get the spec's shape too, not fastify's own.
 */
export function frameworkErrorHandler(
  error: FastifyError,
  request: FastifyRequest,
  reply: FastifyReply,
): void {
  const apiError =
    error.code === 'FST_ERR_BAD_URL'
      ? new ApiError('VALIDATION_ERROR', 'the path has a malformed percent-escape or invalid UTF-8', {
          field: 'path',
          reason: 'malformed percent-escape or invalid UTF-8',
          location: 'params',
        })
      : toApiError(error);
  request.log.info({ code: apiError.code, status: apiError.status }, apiError.message);
  sendError(request, reply, apiError);
}

/**
 * Installs the error handler, the 404 handler and 405 detection. Must be registered before any route:
 * it mirrors every route into its own router so an unknown method on a known path answers 405.
 */
export function installErrorHandling(app: FastifyInstance): void {
  const mirror = FindMyWay();
  const noop = () => {};
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      try {
        mirror.on(method as 'GET', route.url, noop);
      } catch {
        // Duplicate registrations (HEAD mirrors of GET) are harmless here.
      }
    }
  });

  app.setErrorHandler((error, request, reply) => {
    const apiError = toApiError(error as FastifyError);
    if (apiError.status >= 500) request.log.error({ err: error }, 'request failed');
    else request.log.info({ code: apiError.code, status: apiError.status }, apiError.message);
    return sendError(request, reply, apiError);
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? request.url;
    const allowed = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((method) =>
      mirror.find(method as 'GET', path),
    );
    if (allowed.length > 0) {
      return sendError(
        request,
        reply,
        new ApiError(
          'METHOD_NOT_ALLOWED',
          `${request.method} is not allowed on ${path}`,
          { method: request.method, allowed },
          { headers: { allow: allowed.join(', ') } },
        ),
      );
    }
    return sendError(
      request,
      reply,
      new ApiError('NOT_FOUND', `no route ${request.method} ${path}`, { method: request.method, path }),
    );
  });
}
