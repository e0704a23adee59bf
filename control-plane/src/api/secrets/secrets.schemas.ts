import { Type } from '@sinclair/typebox';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Union([schema, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });

export const SecretName = Type.String({
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$',
  description: 'Unique within the cluster; letters, digits, `.`, `_`, `-` (it is part of the URL)',
});

const Word = (description: string) =>
  Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z][a-z0-9_]*$', description });

const SecretType = Word(
  'api_key, database, certificate, file, generic (filter values); other lower_snake words are accepted ' +
    '(cloud_provider, webhook, monitoring)',
);
const SecretCategory = Word(
  'ml_services, databases, cloud_providers, custom (filter values); other lower_snake words are accepted ' +
    '(security, api_authentication, monitoring)',
);

const EnvName = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[A-Za-z_][A-Za-z0-9_]*$',
  description: 'Variable set to the value in the cluster container; null: not injected as a variable',
});
const FilePath = Type.String({
  minLength: 2,
  maxLength: 255,
  pattern: '^/',
  description:
    'Absolute path of a file holding the value in the cluster container (no `.`/`..` segments, at most ' +
    '255 bytes, parent directories created, owned by root); null: not injected as a file',
});

const FileMode = Type.Union(
  [Type.Integer({ minimum: 0, maximum: 511 }), Type.String({ pattern: '^(0o?)?[0-7]{1,3}$' })],
  {
    description: 'Octal text ("0400", "0o440") or the numeric mode (256); default "0400"',
  },
);

const PermissionsInput = Type.Object(
  {
    read_only: Type.Optional(
      Type.Boolean({
        description: 'Default true: the injected file gets no write bits, whatever file_mode says',
      }),
    ),
    allowed_users: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 64 }), {
        maxItems: 100,
        description:
          'User ids (usr_...) that may read the value; empty with allowed_roles empty: anyone permitted',
      }),
    ),
    allowed_roles: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 64 }), {
        maxItems: 100,
        description: 'Role ids (owner, admin, developer, viewer, role_custom_<name>) that may read the value',
      }),
    ),
    file_mode: Type.Optional(FileMode),
  },
  { additionalProperties: false },
);

const RotationPolicyInput = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    rotation_interval_days: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 3650 }))),
    notification_days_before: Type.Optional(Nullable(Type.Integer({ minimum: 0, maximum: 3650 }))),
  },
  {
    additionalProperties: false,
    description: 'enabled needs rotation_interval_days; notification_days_before must be below it',
  },
);

const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 50 });
const Value = Type.String({
  minLength: 1,
  maxLength: 65536,
  description: 'The secret; stored encrypted (AES-256-GCM), never returned unless asked for and permitted',
});

export const CreateSecretBody = Type.Object(
  {
    name: SecretName,
    description: Type.Optional(Nullable(Type.String({ maxLength: 1000 }))),
    type: SecretType,
    category: Type.Optional(Nullable(SecretCategory)),
    value: Value,
    environment_variable: Type.Optional(Nullable(EnvName)),
    file_path: Type.Optional(Nullable(FilePath)),
    permissions: Type.Optional(PermissionsInput),
    expiration_date: Type.Optional(
      Nullable(
        Type.String({
          format: 'date-time',
          description:
            'After it the value is no longer injected into containers (still readable via the API)',
        }),
      ),
    ),
    rotation_policy: Type.Optional(Nullable(RotationPolicyInput)),
    tags: Type.Optional(Tags),
  },
  { additionalProperties: false },
);

export const UpdateSecretBody = Type.Object(
  {
    description: Type.Optional(Nullable(Type.String({ maxLength: 1000 }))),
    type: Type.Optional(SecretType),
    category: Type.Optional(Nullable(SecretCategory)),
    value: Type.Optional(Value),
    environment_variable: Type.Optional(Nullable(EnvName)),
    file_path: Type.Optional(Nullable(FilePath)),
    permissions: Type.Optional(PermissionsInput),
    expiration_date: Type.Optional(Nullable(DateTime)),
    rotation_policy: Type.Optional(Nullable(RotationPolicyInput)),
    tags: Type.Optional(Tags),
  },
  { additionalProperties: false },
);

export const Secret = Type.Object(
  {
    id: Type.String({ description: 'secret_<id>' }),
    cluster_id: Type.String(),
    name: Type.String(),
    description: Nullable(Type.String()),
    type: Type.String(),
    category: Nullable(Type.String()),
    value: Type.Optional(
      Type.String({ description: 'Present only when include_value(s)=true and the caller may read it' }),
    ),
    environment_variable: Nullable(Type.String()),
    file_path: Nullable(Type.String()),
    encrypted: Type.Boolean({ description: 'Always true: values are stored sealed with AES-256-GCM' }),
    expiration_date: Nullable(DateTime),
    rotation_policy: Type.Object({
      enabled: Type.Boolean(),
      rotation_interval_days: Nullable(Type.Integer()),
      notification_days_before: Nullable(Type.Integer()),
      next_rotation: Nullable(
        Type.String({
          format: 'date-time',
          description:
            '(last_rotation, or created_at before the first rotation) + rotation_interval_days; null when disabled',
        }),
      ),
      last_rotation: Nullable(
        Type.String({ format: 'date-time', description: 'When the value was last replaced through PUT' }),
      ),
    }),
    permissions: Type.Object({
      read_only: Type.Boolean(),
      allowed_users: Type.Array(Type.String()),
      allowed_roles: Type.Array(Type.String()),
      file_mode: Type.String({ description: 'Octal, four digits ("0400")' }),
    }),
    usage_statistics: Type.Object(
      {
        last_accessed: Nullable(DateTime),
        access_count: Type.Integer(),
      },
      {
        description:
          'One access per value revealed through the API (get or list with include_value(s)) and per start ' +
          "of the cluster's container with the secret injected (as reported by the host agent)",
      },
    ),
    tags: Type.Array(Type.String()),
    created_at: DateTime,
    updated_at: DateTime,
  },
  { $id: 'ClusterSecret' },
);

export const SecretList = Type.Object({
  secrets: Type.Array(Type.Ref('ClusterSecret')),
  total_count: Type.Integer({ description: 'Number of secrets matching the filters' }),
  secret_types: Type.Record(Type.String(), Type.Integer(), {
    description: 'Secret type → number of matching secrets of that type',
  }),
});

export const DeletedSecret = Type.Object({
  id: Type.String(),
  name: Type.String(),
  deleted: Type.Literal(true),
  deleted_at: DateTime,
});

export const ClusterParams = Type.Object({ cluster_id: Type.String({ minLength: 1, maxLength: 64 }) });
export const SecretParams = Type.Object({
  cluster_id: Type.String({ minLength: 1, maxLength: 64 }),
  secret_name: Type.String({ minLength: 1, maxLength: 128 }),
});

export const ListQuery = Type.Object(
  {
    type: Type.Optional(Type.String({ maxLength: 64 })),
    category: Type.Optional(Type.String({ maxLength: 64 })),
    search: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 200,
        description: 'Case-insensitive substring of the name or description, or an exact tag',
      }),
    ),
    include_values: Type.Optional(Type.Boolean({ default: false })),
  },
  { additionalProperties: false },
);

export const GetQuery = Type.Object(
  { include_value: Type.Optional(Type.Boolean({ default: false })) },
  { additionalProperties: false },
);
