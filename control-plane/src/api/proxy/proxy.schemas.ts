import { type TSchema, Type } from '@sinclair/typebox';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });
const strict = { additionalProperties: false } as const;

export const ClusterParams = Type.Object({ cluster_id: Type.String({ minLength: 1, maxLength: 64 }) });
export const PortParams = Type.Object({
  cluster_id: Type.String({ minLength: 1, maxLength: 64 }),
  port_id: Type.String({ minLength: 1, maxLength: 64 }),
});

const Cidr = Type.String({ minLength: 1, maxLength: 64, description: 'IPv4/IPv6 address or CIDR' });
const CidrList = Type.Array(Cidr, { maxItems: 500 });

export const RateLimit = Type.Object(
  {
    requests_per_minute: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    burst_size: Type.Integer({
      minimum: 1,
      maximum: 100_000,
      description:
        'Requests allowed at once: admitted per window of burst_size ÷ requests_per_minute minutes (see the proxy description)',
    }),
  },
  strict,
);

export const HealthCheckInput = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean({ description: 'default true when a health_check is sent' })),
    path: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: 'default /' })),
    interval_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600, description: 'default 30' })),
    timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 300, description: 'default 5' })),
    expected_status: Type.Optional(Type.Integer({ minimum: 100, maximum: 599, description: 'default 200' })),
    retries: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100,
        description: 'failures in a row before unhealthy; default 3',
      }),
    ),
  },
  strict,
);

const Cors = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    allowed_origins: Type.Optional(Type.Array(Type.String({ maxLength: 512 }), { maxItems: 100 })),
    allowed_methods: Type.Optional(Type.Array(Type.String({ maxLength: 16 }), { maxItems: 20 })),
    allowed_headers: Type.Optional(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 100 })),
  },
  strict,
);

const RequiredPermission = Type.Union([Type.Literal('read'), Type.Literal('write')], {
  description:
    'What a signed-in caller (key or login-link session) must hold on the cluster to pass this port when ' +
    'it requires authentication. Default `write`, the level SSH and the web terminal need, because an ' +
    'application behind a port (Jupyter, a debugger, a dashboard with a console) often runs code; set ' +
    '`read` to open it to members who may only read the cluster. Service keys never pass.',
});

export const AccessControlInput = Type.Object(
  {
    authentication_required: Type.Optional(Nullable(Type.Boolean())),
    allowed_users: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 500 })),
    allowed_roles: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 50 })),
    ip_whitelist: Type.Optional(CidrList),
    rate_limit: Type.Optional(Nullable(RateLimit)),
    public_access: Type.Optional(Type.Boolean()),
    session_timeout_minutes: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 43_200 }))),
    cors: Type.Optional(Cors),
    required_permission: Type.Optional(RequiredPermission),
  },
  strict,
);

const HealthCheckView = Type.Object({
  enabled: Type.Boolean(),
  path: Type.String(),
  interval_seconds: Type.Integer(),
  timeout_seconds: Type.Integer(),
  expected_status: Type.Integer(),
  retries: Type.Integer(),
  last_check: Nullable(DateTime),
  consecutive_failures: Type.Integer(),
});

const AccessControlView = Type.Object({
  authentication_required: Nullable(Type.Boolean()),
  allowed_users: Type.Array(Type.String()),
  allowed_roles: Type.Array(Type.String()),
  ip_whitelist: Type.Array(Type.String()),
  rate_limit: Nullable(RateLimit),
  public_access: Type.Boolean(),
  session_timeout_minutes: Nullable(Type.Integer()),
  cors: Type.Object({
    enabled: Type.Boolean(),
    allowed_origins: Type.Array(Type.String()),
    allowed_methods: Type.Array(Type.String()),
    allowed_headers: Type.Array(Type.String()),
  }),
  required_permission: RequiredPermission,
});

export const PortMapping = Type.Object(
  {
    id: Type.String({ description: 'port_<id>' }),
    internal_port: Type.Integer(),
    external_port: Type.Integer({
      description:
        'Unique within the cluster; auto-assigned as the lowest free port of 30000-32767. The proxy host ' +
        '<cluster>-<external_port>.<domain> reaches the same mapping as <cluster>-<internal_port>.<domain>.',
    }),
    protocol: Type.String({ description: 'tcp or udp (udp is recorded; the HTTPS proxy carries tcp only)' }),
    description: Type.String(),
    url: Type.String({ description: 'https://cluster-<id>-<internal_port>.<domain>[:port]' }),
    status: Type.String({
      description:
        'active (proxy enabled, cluster running, tcp), inactive (cluster not running), disabled (proxy ' +
        'disabled), unsupported (udp)',
    }),
    health_status: Type.Optional(
      Nullable(
        Type.String({
          description:
            'healthy after a passing check, unhealthy after `retries` failures in a row; null before',
        }),
      ),
    ),
    health_check: Type.Optional(HealthCheckView),
    access_control: AccessControlView,
    usage_statistics: Type.Object({
      total_requests: Type.Integer({
        description: 'Requests forwarded to the container (refusals excluded)',
      }),
      unique_visitors: Type.Integer({
        description: 'Distinct users (or client addresses for public traffic)',
      }),
      last_accessed: Nullable(DateTime),
      avg_response_time_ms: Nullable(
        Type.Number({ description: 'Mean time to the end of the response, over total_requests' }),
      ),
    }),
    custom_domain: Nullable(Type.String({ description: 'Recorded only: not routed by this proxy' })),
    ssl_redirect: Type.Boolean({ description: 'Always true: the proxy speaks HTTPS only' }),
    created_at: DateTime,
    updated_at: DateTime,
  },
  { $id: 'ProxyPortMapping' },
);

const SecurityHeaders = Type.Object({
  hsts_enabled: Type.Boolean(),
  content_security_policy: Nullable(Type.String()),
  x_frame_options: Nullable(Type.String()),
});

export const AccessView = Type.Object(
  {
    default_authentication: Type.Boolean({
      description: 'Mappings whose authentication_required is null ask for a key or session when true',
    }),
    session_timeout_minutes: Type.Integer(),
    max_concurrent_sessions: Nullable(Type.Integer()),
    ip_whitelist: Type.Array(Type.String()),
    blocked_ips: Type.Array(Type.String()),
    rate_limiting: Type.Object({
      global_limit: Nullable(RateLimit),
      per_user_limit: Nullable(RateLimit),
    }),
    security_headers: SecurityHeaders,
  },
  { $id: 'ProxyAccessControl' },
);

export const ProxyConfig = Type.Object({
  cluster_id: Type.String(),
  proxy_url: Nullable(
    Type.String({ description: "URL of the cluster's first tcp mapping; null without one" }),
  ),
  proxy_status: Type.String({ description: 'active, or disabled after PUT /proxy {enabled:false}' }),
  ssl_certificate: Type.Optional(
    Nullable(
      Type.Object({
        issuer: Type.String(),
        valid_from: DateTime,
        valid_until: DateTime,
        status: Type.String({ description: 'valid, expired, not_yet_valid' }),
      }),
    ),
  ),
  port_mappings: Type.Array(Type.Ref('ProxyPortMapping')),
  access_control: Type.Ref('ProxyAccessControl'),
  network_configuration: Type.Object({
    load_balancer: Type.Object({
      enabled: Type.Boolean({ description: 'false: one container per cluster, nothing to balance' }),
      algorithm: Nullable(Type.String()),
      health_check_enabled: Type.Boolean(),
    }),
    ssl_termination: Type.Boolean(),
    websocket_support: Type.Boolean(),
    compression: Type.Object({
      enabled: Type.Boolean({ description: 'false: bodies pass through as the container sends them' }),
      algorithms: Type.Array(Type.String()),
    }),
  }),
  access_logs: Type.Optional(
    Type.Array(
      Type.Object({
        timestamp: DateTime,
        client_ip: Type.String(),
        user: Nullable(Type.String()),
        method: Type.String(),
        path: Type.String(),
        status_code: Type.Integer(),
        response_time_ms: Type.Number(),
        user_agent: Nullable(Type.String()),
      }),
    ),
  ),
});

export const CreatePortBody = Type.Object(
  {
    internal_port: Type.Integer({ minimum: 1, maximum: 65535 }),
    external_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    protocol: Type.Optional(Type.Union([Type.Literal('tcp'), Type.Literal('udp')], { default: 'tcp' })),
    description: Type.String({ minLength: 1, maxLength: 500 }),
    health_check: Type.Optional(HealthCheckInput),
    access_control: Type.Optional(AccessControlInput),
    custom_domain: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 253 }))),
  },
  strict,
);

export const UpdatePortBody = Type.Object(
  {
    description: Type.Optional(Type.String({ minLength: 1, maxLength: 500 })),
    health_check: Type.Optional(HealthCheckInput),
    access_control: Type.Optional(AccessControlInput),
    custom_domain: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 253 }))),
  },
  strict,
);

export const AccessBody = Type.Object(
  {
    default_authentication: Type.Optional(Type.Boolean()),
    session_timeout_minutes: Type.Optional(Type.Integer({ minimum: 1, maximum: 43_200 })),
    max_concurrent_sessions: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 100_000 }))),
    ip_whitelist: Type.Optional(CidrList),
    blocked_ips: Type.Optional(CidrList),
    rate_limiting: Type.Optional(
      Type.Object(
        {
          global_limit: Type.Optional(Nullable(RateLimit)),
          per_user_limit: Type.Optional(Nullable(RateLimit)),
        },
        strict,
      ),
    ),
    security_headers: Type.Optional(
      Type.Object(
        {
          hsts_enabled: Type.Optional(Type.Boolean()),
          content_security_policy: Type.Optional(Nullable(Type.String({ maxLength: 4096 }))),
          x_frame_options: Type.Optional(Nullable(Type.String({ maxLength: 64 }))),
        },
        strict,
      ),
    ),
  },
  strict,
);

export const ShortBody = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    allowedIps: Type.Optional(CidrList),
  },
  strict,
);

export const ShortResponse = Type.Object({ proxyUrl: Nullable(Type.String()), enabled: Type.Boolean() });
