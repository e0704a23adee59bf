import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { ACCESS_CONTROL_DESCRIPTION } from '../accounts/access.ts';
import { FlatError, WrappedError } from './error-body.ts';
import { RATE_LIMITS_DESCRIPTION } from './rate-limit.ts';

const DESCRIPTION = `Anvil: a self-hosted GPU cloud.

**Authentication.** Every route except /healthz, /readyz, /openapi.json and /docs needs
\`Authorization: Bearer <API_KEY>\`. Keys look like \`anv_live_…\` or \`anv_test_…\`: 32 random base62
characters (~190 bits) followed by a 6-character CRC-32 checksum, so a mistyped key is refused (401)
without a database lookup and leaked keys are easy to scan for. Only a SHA-256 hash is stored.

**Key types.** \`read\` keys may only send GET. \`read_write\` keys may send GET, POST, PUT, PATCH, DELETE.
\`service\` keys are for machines: they reach only service routes (serverless execution, training jobs,
AI services) within their scopes, plus /v2/auth/verify and /v2/auth/rate-limits. A key lacking the
permission or scope answers 403 FORBIDDEN with \`required_permission\` = \`<scope>:<permission>\`.
A key can never create a key with more permissions or scopes than it has, a service key only creates
service keys, a test key only creates test keys, and a new key never outlives the key that created it.

**Live and test keys.** Both reach the same API; the environment is recorded with every request
(see /v2/analytics/api-usage) so development traffic can be told apart, and test keys cannot mint live keys.

**Key states.** active → revoked (DELETE), active → rotated (POST rotate; the old value keeps working
for the optional \`grace_period_seconds\`, at most 7 days, then answers 401), active → expired
(at \`expiresAt\`). Keys without \`expiresAt\` never expire. Revocation takes effect at once in every
control-plane process (LISTEN/NOTIFY invalidation). \`lastUsedAt\` is recorded with up to 15 s delay.

**Errors.** /v1 cluster routes answer \`{success:false, error:{code,message,details}, meta:{request_id}}\`;
all other routes answer \`{error, message, code, details}\`. Every response carries \`X-Request-Id\`
(the caller's, when it sends a sane one).`;

export async function installOpenApi(app: FastifyInstance): Promise<void> {
  app.addSchema(FlatError);
  app.addSchema(WrappedError);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Anvil API',
        version: '0.1.0',
        description: `${DESCRIPTION}\n\n${RATE_LIMITS_DESCRIPTION}\n\n${ACCESS_CONTROL_DESCRIPTION}`,
      },
      components: {
        securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'Anvil API key' } },
      },
      security: [{ bearer: [] }],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json['$id'] ?? `def-${i}`) },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { deepLinking: true } });
  app.get('/openapi.json', { config: { public: true }, schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/json').send(app.swagger()),
  );
}
