import { SHELL_PERMISSION } from '../ssh/gate.ts';

/** Stored JSON shapes of the proxy's settings and port mappings (snake_case, as the API shows them). */

export interface RateLimit {
  requests_per_minute: number;
  burst_size: number;
}

export interface HealthCheck {
  enabled: boolean;
  path: string;
  interval_seconds: number;
  timeout_seconds: number;
  expected_status: number;
  retries: number;
}

export interface Cors {
  enabled: boolean;
  allowed_origins: string[];
  allowed_methods: string[];
  allowed_headers: string[];
}

export interface MappingAccess {
  /** null: the cluster's default_authentication decides. */
  authentication_required: boolean | null;
  /** User ids (usr_…); empty: every member who may read the cluster. */
  allowed_users: string[];
  /** Account roles (owner, admin, developer, viewer, role_custom_…); empty: any. */
  allowed_roles: string[];
  ip_whitelist: string[];
  rate_limit: RateLimit | null;
  public_access: boolean;
  session_timeout_minutes: number | null;
  cors: Cors;
  /**
   * What the caller must hold on the cluster to pass an authenticated port: by default what a shell
   * needs (an application behind a port, Jupyter say, often is one); the owner may lower it to read.
   */
  required_permission: ProxyPermission;
}

export type ProxyPermission = 'read' | 'write';

export interface SecurityHeaders {
  hsts_enabled: boolean;
  content_security_policy: string | null;
  x_frame_options: string | null;
}

export const DEFAULT_HEALTH_CHECK: HealthCheck = {
  enabled: false,
  path: '/',
  interval_seconds: 30,
  timeout_seconds: 5,
  expected_status: 200,
  retries: 3,
};

export const DEFAULT_CORS: Cors = {
  enabled: false,
  allowed_origins: [],
  allowed_methods: [],
  allowed_headers: [],
};

export const DEFAULT_MAPPING_ACCESS: MappingAccess = {
  authentication_required: null,
  allowed_users: [],
  allowed_roles: [],
  ip_whitelist: [],
  rate_limit: null,
  public_access: false,
  session_timeout_minutes: null,
  cors: DEFAULT_CORS,
  required_permission: SHELL_PERMISSION,
};

/** HSTS on (the proxy only speaks HTTPS); CSP and X-Frame-Options left to the application by default. */
export const DEFAULT_SECURITY_HEADERS: SecurityHeaders = {
  hsts_enabled: true,
  content_security_policy: null,
  x_frame_options: null,
};

/** Auto-assigned external ports: the first free one of this range within the cluster. */
export const EXTERNAL_PORT_RANGE = { min: 30000, max: 32767 } as const;

export function healthCheckOf(stored: unknown): HealthCheck | null {
  if (!stored || typeof stored !== 'object') return null;
  return { ...DEFAULT_HEALTH_CHECK, ...(stored as Partial<HealthCheck>) };
}

export function mappingAccessOf(stored: unknown): MappingAccess {
  const value = (stored && typeof stored === 'object' ? stored : {}) as Partial<MappingAccess>;
  return { ...DEFAULT_MAPPING_ACCESS, ...value, cors: { ...DEFAULT_CORS, ...(value.cors ?? {}) } };
}

export function securityHeadersOf(stored: unknown): SecurityHeaders {
  return { ...DEFAULT_SECURITY_HEADERS, ...((stored ?? {}) as Partial<SecurityHeaders>) };
}

export function rateLimitOf(stored: unknown): RateLimit | null {
  if (!stored || typeof stored !== 'object') return null;
  const value = stored as Partial<RateLimit>;
  if (!value.requests_per_minute) return null;
  return {
    requests_per_minute: value.requests_per_minute,
    burst_size: value.burst_size ?? value.requests_per_minute,
  };
}
