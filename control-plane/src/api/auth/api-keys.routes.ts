import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Principal } from '../../auth/principal.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import {
  ApiKeyRecord,
  CreateApiKeyBody,
  CreatedApiKey,
  KeyIdParams,
  RotateBody,
  VerifyResponse,
} from './auth.schemas.ts';

export const apiKeyRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  app.addSchema(ApiKeyRecord);
  const tags = ['auth'];

  app.post(
    '/v2/auth/api-keys',
    {
      config: { scope: 'accounts', sensitive: 'API key creation' },
      schema: {
        tags,
        summary: 'Create an API key (the value is returned once)',
        body: CreateApiKeyBody,
        response: { 201: CreatedApiKey, ...flatErrors(400, 401, 403, 413, 429) },
      },
    },
    async (request, reply) => {
      const { key, value } = await context.apiKeys.create(request.principal!, request.body);
      return reply.code(201).send({ key, value, message: 'Store this key now: it will not be shown again.' });
    },
  );

  app.get(
    '/v2/auth/api-keys',
    {
      config: { scope: 'accounts' },
      schema: {
        tags,
        summary: "List the account's API keys (never their values)",
        response: {
          200: Type.Object({ api_keys: Type.Array(Type.Ref('ApiKey')), total: Type.Integer() }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request) => {
      const keys = await context.apiKeys.list(request.principal!);
      return { api_keys: keys, total: keys.length };
    },
  );

  app.delete(
    '/v2/auth/api-keys/:key_id',
    {
      config: { scope: 'accounts' },
      schema: {
        tags,
        summary: 'Revoke an API key; it stops working at once',
        params: KeyIdParams,
        response: {
          200: Type.Object({ key: Type.Ref('ApiKey'), message: Type.String() }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const key = await context.apiKeys.revoke(request.principal!, request.params.key_id);
      return { key, message: `API key ${key.id} revoked` };
    },
  );

  app.post(
    '/v2/auth/api-keys/:key_id/rotate',
    {
      config: { scope: 'accounts', sensitive: 'API key rotation' },
      schema: {
        tags,
        summary: 'Rotate an API key: a new value replaces it; the old one stops after the grace period',
        params: KeyIdParams,
        body: Type.Optional(RotateBody),
        response: {
          200: Type.Object({
            key: Type.Ref('ApiKey'),
            value: Type.String(),
            previous: Type.Ref('ApiKey'),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request) => {
      const grace = request.body?.grace_period_seconds ?? 0;
      const result = await context.apiKeys.rotate(request.principal!, request.params.key_id, grace);
      return {
        ...result,
        message:
          grace > 0
            ? `Store the new key now. The old value works until ${result.previous.graceUntil}.`
            : 'Store the new key now. The old value no longer works.',
      };
    },
  );

  app.get(
    '/v2/auth/verify',
    {
      config: { scope: null },
      schema: {
        tags,
        summary: 'Check the calling key',
        response: { 200: VerifyResponse, ...flatErrors(401, 429) },
      },
    },
    (request, reply) => {
      const principal = request.principal!;
      let body = verifyBodies.get(principal);
      if (body === undefined) {
        body = reply.serialize(verifyBody(principal)) as string;
        verifyBodies.set(principal, body);
      }
      // Serialised above by this route's own 200 schema, so fastify sends the JSON text as it is.
      reply.type('application/json; charset=utf-8').send(body as never);
    },
  );
};

/**
 * GET /v2/auth/verify answers the same body for as long as the key resolver keeps the same principal
 * (it builds a new one whenever it reloads the key), and it is called on every health check of every
 * client: the body is serialised once per principal rather than once per request.
 */
const verifyBodies = new WeakMap<Principal, string>();

function verifyBody(p: Principal) {
  return {
    valid: true,
    key_id: p.keyId,
    permissions: p.permissions,
    scopes: p.scopes,
    expires_at: p.expiresAt ? p.expiresAt.toISOString() : null,
    type: p.keyType,
    environment: p.environment,
    account_id: p.accountId,
  };
}
