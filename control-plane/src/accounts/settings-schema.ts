import { type Static, type TSchema, Type } from '@sinclair/typebox';

/**
 * The account settings sections (spec: Resources → Account settings) as TypeBox schemas: the same
 * schema validates a PUT of the section, an import, and documents the route. Every field is optional
 * in an update; fields marked read-only are accepted and ignored, so an exported document imports
 * unchanged. Secret fields answer "********" when set; sending "********" back keeps the stored value.
 */

export function StringEnum<const T extends readonly string[]>(values: T, description?: string) {
  return Type.Unsafe<T[number]>({
    type: 'string',
    enum: [...values],
    ...(description ? { description } : {}),
  });
}

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const Text = (maxLength: number, description?: string) =>
  Type.String({ maxLength, ...(description ? { description } : {}) });
const Url = (description: string) => Type.String({ maxLength: 2048, description });
const ReadOnly = (description: string) =>
  Type.Optional(Type.Unknown({ description: `Read-only: ${description}. Ignored in updates.` }));

export const MASK = '********';

export const WEBHOOK_EVENTS = [
  'endpoint.failed',
  'cost.threshold_exceeded',
  'cluster.status_changed',
  'cluster.stopped',
  'training.completed',
  'training.failed',
  'training.preempted',
  'member.joined',
  'member.removed',
  'security.alert',
] as const;

export const CURRENCIES = ['USD', 'EUR', 'GBP', 'JPY'] as const;
export const EMAIL_FREQUENCIES = ['immediate', 'daily_digest', 'weekly_digest'] as const;
export const ALERT_PERIODS = ['daily', 'weekly', 'monthly'] as const;
export const TWO_FACTOR_METHODS = ['totp', 'sms'] as const;
export const LANGUAGES = ['en', 'es', 'fr', 'de', 'ja', 'zh'] as const;
export const THEMES = ['light', 'dark', 'auto'] as const;
export const DATE_FORMATS = ['MM/DD/YYYY', 'DD/MM/YYYY', 'YYYY/MM/DD'] as const;
export const NUMBER_FORMATS = ['1,234.56', '1.234,56', '1 234,56'] as const;

const o = <T extends Record<string, TSchema>>(properties: T, description?: string) =>
  Type.Partial(
    Type.Object(properties, { additionalProperties: false, ...(description ? { description } : {}) }),
  );

export const NotificationsSection = o({
  email: o({
    enabled: Type.Boolean(),
    alerts: o({
      cost_alerts: Type.Boolean(),
      usage_warnings: Type.Boolean(),
      security_notifications: Type.Boolean(),
      system_updates: Type.Boolean(),
      marketing_emails: Type.Boolean(),
    }),
    frequency: StringEnum(EMAIL_FREQUENCIES),
    email: ReadOnly("the owner's address notifications go to"),
  }),
  slack: o({
    enabled: Type.Boolean(),
    webhook_url: Nullable(
      Url('Chat incoming-webhook URL (Slack, or Mattermost/Rocket.Chat in Slack format); secret: masked'),
    ),
    channel: Nullable(Type.String({ maxLength: 80, pattern: '^[#@]?[A-Za-z0-9._-]+$' })),
    alerts: o({
      endpoint_failures: Type.Boolean(),
      cost_thresholds: Type.Boolean(),
      cluster_events: Type.Boolean(),
    }),
  }),
  webhook: o({
    enabled: Type.Boolean(),
    url: Nullable(Url('Receiver of signed event deliveries (see X-Anvil-Signature)')),
    events: Type.Array(StringEnum(WEBHOOK_EVENTS), {
      maxItems: WEBHOOK_EVENTS.length,
      uniqueItems: true,
      description:
        'Event types delivered to url. Every delivery is a POST of {id, type, timestamp, created_at, ' +
        'account_id, data}. Sent by this version: `cluster.status_changed` (data: cluster_id, cluster_name, ' +
        'previous_status (null for a new cluster), status, reason), `member.joined` (user_id, email, name, ' +
        'role, invitation_id, invited_by, joined_at), `member.removed` (user_id, email, name, role, ' +
        'removed_by, removed_at) — these three are written in the transaction of the change and retried ' +
        'after 10 s, 1 min, 5 min, 30 min and 2 h (6 attempts) until the receiver answers 2xx; their data ' +
        'also carries occurred_at, sequence (increasing in commit order for changes of one cluster or ' +
        'member: drop an event older than one already seen) and attempt — and `cluster.stopped` (on a stop ' +
        'with notify_users; result kept in the stop operation) and `cost.threshold_exceeded` (usage ' +
        'alerts), sent once when they happen. `endpoint.failed` (endpoint_id, name, status error, ' +
        'previous_status, reason, failed_workers) is written with the change when a serverless endpoint ' +
        'enters status error (its last workers failed in a row and none is ready), delivered and retried as ' +
        'the first three. `training.completed`, `training.failed` and `security.alert` are accepted for ' +
        'subscriptions but not sent by this version.',
    }),
    secret: Nullable(
      Type.String({
        minLength: 8,
        maxLength: 256,
        description: 'HMAC-SHA256 key for X-Anvil-Signature; masked',
      }),
    ),
  }),
});

const CostAlert = Type.Object(
  {
    threshold: Type.Number({ exclusiveMinimum: 0, maximum: 1e9 }),
    period: StringEnum(ALERT_PERIODS),
    enabled: Type.Optional(Type.Boolean({ default: true })),
  },
  { additionalProperties: false },
);

export const BillingSection = o({
  currency: StringEnum(CURRENCIES),
  timezone: Type.String({ maxLength: 64, description: 'IANA time zone, e.g. Europe/Berlin' }),
  payment_method: ReadOnly('type, last_four, expires, brand of the card on file'),
  billing_address: o({
    name: Nullable(Text(100)),
    company: Nullable(Text(100)),
    address: Nullable(Text(200)),
    city: Nullable(Text(100)),
    state: Nullable(Text(100)),
    zip: Nullable(Text(20)),
    country: Nullable(Type.String({ maxLength: 2, description: 'ISO 3166-1 alpha-2, e.g. US' })),
  }),
  auto_recharge: o({
    enabled: Type.Boolean(),
    threshold: Type.Number({
      minimum: 0,
      maximum: 1e9,
      description: 'Minimum balance that triggers a recharge',
    }),
    amount: Type.Number({ minimum: 0, maximum: 1e9, description: 'Recharge amount; above 0 when enabled' }),
  }),
  cost_alerts: Type.Array(CostAlert, { maxItems: 20 }),
});

export const SecuritySection = o({
  two_factor: o({
    enabled: Type.Boolean(),
    method: StringEnum(TWO_FACTOR_METHODS),
    backup_codes: ReadOnly('one-time recovery codes, generated when two-factor is enabled'),
  }),
  api_access: o({
    ip_whitelist: Type.Array(Type.String({ maxLength: 64 }), {
      maxItems: 100,
      description: 'IPv4/IPv6 addresses or CIDR blocks',
    }),
    require_ip_whitelist: Type.Boolean(),
    max_api_keys: Type.Integer({
      minimum: 1,
      maximum: 50,
      description: 'Active API keys one member may hold',
    }),
  }),
  session: o(
    {
      timeout: Nullable(Type.Integer({ minimum: 1, maximum: 168, description: 'Hours' })),
      require_reauth_for_sensitive: Type.Boolean(),
      concurrent_sessions: Nullable(Type.Integer({ minimum: 1, maximum: 10 })),
    },
    'Not supported: the API has no login sessions (API keys only). Read as timeout null, ' +
      'require_reauth_for_sensitive false, concurrent_sessions null; any other value is 400 NOT_SUPPORTED.',
  ),
  audit: o({
    log_api_requests: Type.Boolean(),
    log_resource_access: Type.Boolean(),
    retention_days: Type.Integer({
      minimum: 30,
      maximum: 365,
      description: 'Audit events older are deleted',
    }),
  }),
});

const Registry = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: 255,
      description: 'Registry host[:port][/path] or https URL',
    }),
    username: Type.Optional(Nullable(Text(255))),
    access_token: Type.Optional(Nullable(Type.String({ maxLength: 4096, description: 'Masked' }))),
  },
  { additionalProperties: false },
);

export const IntegrationsSection = o({
  github: o({
    enabled: Type.Boolean(),
    access_token: Nullable(Type.String({ maxLength: 512, description: 'Write-only: masked when read' })),
    username: Nullable(Type.String({ maxLength: 39 })),
    repositories: Type.Array(Type.String({ maxLength: 140, pattern: '^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$' }), {
      maxItems: 100,
      description: 'owner/name',
    }),
  }),
  docker: o({
    enabled: Type.Boolean(),
    registries: Type.Array(Registry, { maxItems: 20 }),
  }),
  monitoring: o({
    datadog: o({
      enabled: Type.Boolean(),
      api_key: Nullable(Type.String({ maxLength: 256, description: 'Masked' })),
    }),
    grafana: o({
      enabled: Type.Boolean(),
      url: Nullable(Url('Grafana base URL')),
      dashboard_id: Nullable(Text(128)),
    }),
  }),
});

export const PreferencesSection = o({
  timezone: Type.String({ maxLength: 64, description: 'IANA time zone' }),
  language: StringEnum(LANGUAGES),
  theme: StringEnum(THEMES),
  date_format: StringEnum(DATE_FORMATS),
  number_format: StringEnum(NUMBER_FORMATS),
  default_region: Nullable(
    Type.String({
      maxLength: 32,
      pattern: '^[a-z]{2,}(-[a-z0-9]+){1,3}$',
      description:
        'Region a cluster create without `region` is placed in (us-east-1, us-west-2, eu-west-1, ' +
        'ap-southeast-1); null: any region',
    }),
  ),
  default_gpu_type: Nullable(
    Type.String({
      maxLength: 64,
      pattern: '^[A-Za-z0-9][A-Za-z0-9 ._-]*$',
      description:
        'GPU type a cluster create without `gpu_type` (and without a template naming one) asks for ' +
        '(A100, H100, RTX4090, V100, T4); null: gpu_type stays required',
    }),
  ),
});

export const SECTION_SCHEMAS = {
  notifications: NotificationsSection,
  billing: BillingSection,
  security: SecuritySection,
  integrations: IntegrationsSection,
  preferences: PreferencesSection,
} as const;

export type SectionName = keyof typeof SECTION_SCHEMAS;
export const SECTION_NAMES = Object.keys(SECTION_SCHEMAS) as SectionName[];

export type NotificationsInput = Static<typeof NotificationsSection>;
export type BillingInput = Static<typeof BillingSection>;
export type SecurityInput = Static<typeof SecuritySection>;
export type IntegrationsInput = Static<typeof IntegrationsSection>;
export type PreferencesInput = Static<typeof PreferencesSection>;

/** Short form of the whole-settings update (spec: Account settings, last paragraph). */
export const ShortSettingsBody = Type.Object(
  {
    notifications: Type.Optional(
      o({ email: Type.Boolean(), slack: Type.Boolean(), webhook: Type.Boolean() }),
    ),
    security: Type.Optional(
      o({ twoFactorAuth: Type.Boolean(), sessionTimeout: Type.Integer({ minimum: 1, maximum: 168 }) }),
    ),
    defaults: Type.Optional(
      o({
        defaultGpuType: Nullable(Type.String({ maxLength: 64, pattern: '^[A-Za-z0-9][A-Za-z0-9 ._-]*$' })),
        defaultRegion: Nullable(Type.String({ maxLength: 32, pattern: '^[a-z]{2,}(-[a-z0-9]+){1,3}$' })),
      }),
    ),
  },
  { additionalProperties: false },
);
export type ShortSettingsInput = Static<typeof ShortSettingsBody>;

/**
 * Values of a section no one has set. Fields this version refuses (settings-refused.ts) show what really
 * happens: switches off, nothing configured.
 */
export function defaultSettings(ownerEmail: string | null): Record<SectionName, Record<string, unknown>> {
  return {
    notifications: {
      email: {
        enabled: true,
        alerts: {
          cost_alerts: true,
          usage_warnings: false,
          security_notifications: false,
          system_updates: false,
          marketing_emails: false,
        },
        frequency: 'immediate',
        email: ownerEmail,
      },
      slack: {
        enabled: false,
        webhook_url: null,
        channel: null,
        alerts: { endpoint_failures: false, cost_thresholds: true, cluster_events: false },
      },
      webhook: { enabled: false, url: null, events: [], secret: null },
    },
    billing: {
      currency: 'USD',
      timezone: 'UTC',
      payment_method: { type: null, last_four: null, expires: null, brand: null },
      billing_address: {
        name: null,
        company: null,
        address: null,
        city: null,
        state: null,
        zip: null,
        country: null,
      },
      auto_recharge: { enabled: false, threshold: 0, amount: 0 },
      cost_alerts: [],
    },
    security: {
      two_factor: { enabled: false, method: 'totp', backup_codes: [] },
      api_access: { ip_whitelist: [], require_ip_whitelist: false, max_api_keys: 25 },
      session: { timeout: null, require_reauth_for_sensitive: false, concurrent_sessions: null },
      audit: { log_api_requests: false, log_resource_access: false, retention_days: 90 },
    },
    integrations: {
      github: { enabled: false, access_token: null, username: null, repositories: [] },
      docker: { enabled: false, registries: [] },
      monitoring: {
        datadog: { enabled: false, api_key: null },
        grafana: { enabled: false, url: null, dashboard_id: null },
      },
    },
    preferences: {
      timezone: 'UTC',
      language: 'en',
      theme: 'auto',
      date_format: 'YYYY/MM/DD',
      number_format: '1,234.56',
      default_region: null,
      default_gpu_type: null,
    },
  };
}

/** Read-only fields: dropped from updates and imports. */
export const READ_ONLY_PATHS = [
  ['notifications', 'email', 'email'],
  ['billing', 'payment_method'],
  ['security', 'two_factor', 'backup_codes'],
] as const;
