import { KEY_PERMISSIONS, KEY_SCOPES } from '@anvil/shared';
import { Type } from '@sinclair/typebox';

export const ApiKeyRecord = Type.Object(
  {
    id: Type.String({ description: 'key_<id>' }),
    name: Type.String(),
    description: Type.Union([Type.String(), Type.Null()]),
    type: Type.Union([Type.Literal('read'), Type.Literal('read_write'), Type.Literal('service')]),
    environment: Type.Union([Type.Literal('live'), Type.Literal('test')]),
    permissions: Type.Array(Type.String()),
    scopes: Type.Array(Type.String()),
    prefix: Type.String({ description: 'The first characters of the value, to recognise the key' }),
    status: Type.Union([
      Type.Literal('active'),
      Type.Literal('revoked'),
      Type.Literal('rotated'),
      Type.Literal('expired'),
    ]),
    expiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    rotatedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    graceUntil: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
      description: 'After rotation: the old value works until then',
    }),
    replacedBy: Type.Union([Type.String(), Type.Null()], {
      description: 'Id of the key that replaced this one',
    }),
    userId: Type.String(),
  },
  { $id: 'ApiKey' },
);

export const CreateApiKeyBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    permissions: Type.Array(Type.String({ maxLength: 32 }), {
      maxItems: 8,
      description: `Values: ${KEY_PERMISSIONS.join(', ')}`,
    }),
    scopes: Type.Optional(
      Type.Array(Type.String({ maxLength: 32 }), {
        maxItems: 16,
        description: `Values: ${KEY_SCOPES.join(', ')}. Default: the creating key's scopes.`,
      }),
    ),
    expiresAt: Type.Optional(
      Type.String({ format: 'date-time', description: 'ISO 8601; absent = never expires' }),
    ),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    type: Type.Optional(
      Type.Union([Type.Literal('read'), Type.Literal('read_write'), Type.Literal('service')], {
        description: 'Default: read_write when permissions include write, else read',
      }),
    ),
    environment: Type.Optional(
      Type.Union([Type.Literal('live'), Type.Literal('test')], {
        description: "Default: the creating key's",
      }),
    ),
  },
  { additionalProperties: false },
);

export const CreatedApiKey = Type.Object({
  key: Type.Ref('ApiKey'),
  value: Type.String({ description: 'The key itself. Shown once: only its hash is stored.' }),
  message: Type.String(),
});

export const RotateBody = Type.Object(
  {
    grace_period_seconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 604800,
        description: 'How long the old value keeps working (default 0: it stops at once)',
      }),
    ),
  },
  { additionalProperties: false },
);

export const KeyIdParams = Type.Object({ key_id: Type.String({ maxLength: 64 }) });

export const VerifyResponse = Type.Object({
  valid: Type.Boolean(),
  key_id: Type.String(),
  permissions: Type.Array(Type.String()),
  scopes: Type.Array(Type.String()),
  expires_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  type: Type.String(),
  environment: Type.String(),
  account_id: Type.String(),
});
