import { resolve } from 'node:path';
import { isWellFormedApiKey } from '@anvil/shared';
import type { SessionLimits } from './access-revocation/live-sessions.ts';
import { parseSecretKey } from './crypto/secret-box.ts';
import { invalidCidrs } from './proxy/ip-rules.ts';
import { PREEMPTION_POLICIES, type PreemptionPolicy } from './training/contract.ts';

/** Everything the control plane reads from its environment, validated once at start-up. */
export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | null;
  ownerEmail: string;
  bootstrapApiKey: string | null;
  logLevel: LogLevel;
  /** Largest request body accepted, in bytes. */
  bodyLimitBytes: number;
  /** How long graceful shutdown waits for in-flight requests before closing connections. */
  shutdownTimeoutMs: number;
  /**
   * On SIGTERM, how long /readyz answers 503 while every request is still served, before the process stops
   * accepting work (ANVIL_SHUTDOWN_DRAIN_MS): long enough for a load balancer's health checks to take this
   * replica out, so a rolling restart fails no request. 0: stop at once (one replica, no balancer).
   */
  shutdownDrainMs: number;
  /** Base URL clients reach this server at: invitation links and avatar URLs are built from it. */
  publicUrl: string;
  /** AES-256-GCM key sealing stored secrets (null: a generated key in <dataDir>/secret.key). */
  secretKey: Buffer | null;
  /** Keys a previous ANVIL_SECRET_KEY sealed values with: still opened, re-sealed under the current key. */
  previousSecretKeys: Buffer[];
  /** SMTP server for e-mail notifications and invitations (smtp:// or smtps://); null: no e-mail. */
  smtpUrl: string | null;
  smtpFrom: string;
  /** Lets notification webhooks reach loopback and private addresses (off: they are refused). */
  outboundAllowPrivate: boolean;
  /** Agents' heartbeat interval, sent to them in welcome. */
  heartbeatSeconds: number;
  /** A host without a heartbeat for this long is unreachable (its workloads are marked, never stopped). */
  hostGraceSeconds: number;
  /**
   * ANVIL_TRAINING_PREEMPTION: whose running training work a queued job of higher priority may preempt:
   * same-account (default), any-account, or off. Clusters and endpoint workers are never preempted.
   */
  trainingPreemption: PreemptionPolicy;
  /** Agents' metric sampling interval, sent to them in welcome. */
  metricsSeconds: number;
  /** An agent socket that has not said hello this long after opening is closed (ANVIL_AGENT_HANDSHAKE_SECONDS). */
  agentHandshakeSeconds: number;
  /** Agent sockets open at once without a hello; more are answered 503 (ANVIL_AGENT_PREAUTH_LIMIT). */
  agentPreAuthLimit: number;
  /** Agents renew their host credential once it is this old (ANVIL_HOST_CREDENTIAL_RENEW_SECONDS). */
  hostCredentialRenewSeconds: number;
  /** How long a renewed-away credential keeps working (ANVIL_HOST_CREDENTIAL_GRACE_SECONDS). */
  hostCredentialGraceSeconds: number;
  /** Bearer token of the Prometheus endpoint /metrics; null: /metrics does not exist (404). */
  metricsToken: string | null;
  /**
   * This process's own address as agents reach it directly (ANVIL_REPLICA_URL), sent with every tunnel it
   * asks for: behind a load balancer a tunnel must land on the replica holding its ticket. Null: agents
   * dial their control-plane URL (one replica, or a balancer that is not between agents and replicas).
   */
  replicaUrl: string | null;
  /** `npm start` also runs an agent for this machine (ANVIL_LOCAL_AGENT=0 turns it off). */
  localAgent: boolean;
  /** JSON file of USD per GPU-hour by type ({"H100": 2.49}), applied to the price table at start; null: none. */
  gpuPricesFile: string | null;
  /** HTTPS port proxy: its port (0 = a free port), the domain under which `<cluster>-<port>.<domain>` resolve. */
  proxyPort: number;
  proxyDomain: string;
  /** Operator-supplied PEM certificate (chain) and key for *.<proxyDomain>; null: a generated development CA. */
  proxyTlsCert: string | null;
  proxyTlsKey: string | null;
  /** SSH relay: its port (0 = a free port) and the host name shown in clusters' ssh_connection. */
  sshPort: number;
  sshHost: string;
  /**
   * Concurrent long-lived sessions one account may hold per control-plane process, by kind
   * (ANVIL_MAX_TERMINAL_SESSIONS, ANVIL_MAX_LOG_STREAMS, ANVIL_MAX_SSH_CONNECTIONS, ANVIL_MAX_PROXY_WEBSOCKETS).
   */
  sessionLimits: SessionLimits;
  /** How often usage alerts and billing.cost_alerts are evaluated (seconds; 0 = never on a timer). */
  usageAlertSeconds: number;
  /** USD per GB (10^9 bytes) of data transfer through tunnels and dataset downloads; 0 meters for free. */
  transferPricePerGb: number;
  /** USD per GB-hour of stored datasets and workloads' measured disks; 0 meters for free. */
  storagePricePerGbHour: number;
  /** Seconds between storage metering passes (0 = no timer). */
  storageMeterSeconds: number;
  /**
   * What happens to clusters on a GPU whose health turns `failed` (ANVIL_FAILED_GPU_POLICY): `keep` (default)
   * leaves them running with the reason in status_reason; `stop` fails them (status error, the reason kept,
   * GPUs released, container stopped, volume kept for a later start on a healthy GPU).
   */
  failedGpuPolicy: 'keep' | 'stop';
  /** Where training datasets' bytes are stored (default <dataDir>/datasets). */
  datasetsDir: string;
  /** Largest dataset accepted, in bytes, however it arrives (single PUT, multipart, URL). */
  datasetMaxBytes: number;
  /** Lifetime of a dataset's upload token, in seconds from the dataset's creation. */
  datasetUploadTokenSeconds: number;
  /** Bytes of dataset versions and multipart uploads in progress an account may hold; null: no quota (`unlimited`). */
  datasetQuotaBytes: number | null;
  /**
   * Addresses or CIDRs of reverse proxies in front of the API and the port proxy (ANVIL_TRUSTED_PROXIES,
   * comma-separated): only a connection from one of them has its X-Forwarded-For read. Empty: never read.
   */
  trustedProxies: string[];
  /** Where agent artifacts are kept and served from (ANVIL_AGENT_ARTIFACTS_DIR, default <dataDir>/agent-artifacts). */
  agentArtifactsDir: string;
  /** Node.js runtimes for other architectures: <dir>/<arch>/node (ANVIL_AGENT_RUNTIMES_DIR); null: none. */
  agentRuntimesDir: string | null;
  /**
   * The fleet's agent version until an operator sets one with PUT /v2/admin/agent-version
   * (ANVIL_AGENT_VERSION): a version, `manual` (no fleet-wide upgrade), or null: the version this
   * control plane ships.
   */
  agentVersion: string | null;
}

/** What an agent version may look like (semver-like; it names directories and URL segments). */
export const AGENT_VERSION_PATTERN = /^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/;

/** The dataset storage every account may hold unless ANVIL_DATASET_QUOTA_BYTES says otherwise: 100 GiB. */
export const DEFAULT_DATASET_QUOTA_BYTES = 107_374_182_400;

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A configuration value that prevents start-up; its message names the variable and the reason. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    reason: string,
  ) {
    super(`invalid configuration: ${variable} ${reason}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be an integer, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function price(env: Env, name: string): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return 0;
  if (!/^\d+(\.\d+)?$/.test(raw)) throw new ConfigError(name, `must be a number >= 0 (USD), got "${raw}"`);
  return Number(raw);
}

const EMAIL = /^[^\s@]+@[^\s@]+$/;

export function loadConfig(env: Env = process.env): Config {
  const databaseUrl = env['DATABASE_URL'] || null;
  if (databaseUrl !== null) {
    let url: URL;
    try {
      url = new URL(databaseUrl);
    } catch {
      throw new ConfigError('DATABASE_URL', 'is not a URL (expected postgres://user:pass@host:5432/db)');
    }
    if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
      throw new ConfigError('DATABASE_URL', `must use postgres:// or postgresql://, got "${url.protocol}"`);
    }
  }

  const ownerEmail = env['ANVIL_OWNER_EMAIL'] || 'admin@localhost';
  if (!EMAIL.test(ownerEmail))
    throw new ConfigError('ANVIL_OWNER_EMAIL', `is not an e-mail address: "${ownerEmail}"`);

  const bootstrapApiKey = env['ANVIL_BOOTSTRAP_API_KEY'] || null;
  if (bootstrapApiKey !== null && !isWellFormedApiKey(bootstrapApiKey)) {
    throw new ConfigError(
      'ANVIL_BOOTSTRAP_API_KEY',
      'is not a well-formed Anvil key (anv_live_ or anv_test_, 32 random base62 characters and a 6-character checksum)',
    );
  }

  const logLevel = (env['LOG_LEVEL'] || 'info') as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }

  const port = integer(env, 'PORT', 8080, 0, 65535);
  const publicUrl = (env['ANVIL_PUBLIC_URL'] || `http://localhost:${port}`).replace(/\/+$/, '');
  try {
    const url = new URL(publicUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('protocol');
  } catch {
    throw new ConfigError('ANVIL_PUBLIC_URL', `must be an http(s) URL, got "${publicUrl}"`);
  }

  const replicaUrl = (env['ANVIL_REPLICA_URL'] || '').replace(/\/+$/, '') || null;
  if (replicaUrl !== null) {
    let protocol = '';
    try {
      protocol = new URL(replicaUrl).protocol;
    } catch {}
    if (!['http:', 'https:', 'ws:', 'wss:'].includes(protocol)) {
      throw new ConfigError('ANVIL_REPLICA_URL', `must be an http(s) or ws(s) URL, got "${replicaUrl}"`);
    }
  }

  const secretKeyText = env['ANVIL_SECRET_KEY'] || null;
  const secretKey = secretKeyText === null ? null : parseSecretKey(secretKeyText);
  if (secretKeyText !== null && secretKey === null) {
    throw new ConfigError('ANVIL_SECRET_KEY', 'must be 32 bytes written as 64 hex characters or base64');
  }
  const previousSecretKeys = (env['ANVIL_SECRET_KEY_PREVIOUS'] || '')
    .split(',')
    .filter((part) => part.trim() !== '')
    .map((part) => {
      const key = parseSecretKey(part);
      if (!key) {
        throw new ConfigError(
          'ANVIL_SECRET_KEY_PREVIOUS',
          'must be a comma-separated list of 32-byte keys (64 hex characters or base64)',
        );
      }
      return key;
    });

  const smtpUrl = env['ANVIL_SMTP_URL'] || null;
  if (smtpUrl !== null) {
    let protocol = '';
    try {
      protocol = new URL(smtpUrl).protocol;
    } catch {
      // reported below
    }
    if (protocol !== 'smtp:' && protocol !== 'smtps:') {
      throw new ConfigError('ANVIL_SMTP_URL', 'must be smtp://[user:pass@]host[:port] or smtps://...');
    }
  }
  const smtpFrom = env['ANVIL_SMTP_FROM'] || 'Anvil <anvil@localhost>';

  const allowPrivate = (env['ANVIL_OUTBOUND_ALLOW_PRIVATE'] || 'false').toLowerCase();
  if (allowPrivate !== 'true' && allowPrivate !== 'false') {
    throw new ConfigError('ANVIL_OUTBOUND_ALLOW_PRIVATE', `must be true or false, got "${allowPrivate}"`);
  }

  const heartbeatSeconds = integer(env, 'ANVIL_HEARTBEAT_SECONDS', 10, 1, 3600);
  const hostGraceSeconds = integer(
    env,
    'ANVIL_HOST_GRACE_SECONDS',
    Math.max(40, heartbeatSeconds * 4),
    1,
    86_400,
  );
  if (hostGraceSeconds <= heartbeatSeconds) {
    throw new ConfigError(
      'ANVIL_HOST_GRACE_SECONDS',
      `must be longer than ANVIL_HEARTBEAT_SECONDS (${heartbeatSeconds}), got ${hostGraceSeconds}`,
    );
  }
  const trainingPreemption = (env['ANVIL_TRAINING_PREEMPTION'] || 'same-account') as PreemptionPolicy;
  if (!PREEMPTION_POLICIES.includes(trainingPreemption)) {
    throw new ConfigError(
      'ANVIL_TRAINING_PREEMPTION',
      `must be one of ${PREEMPTION_POLICIES.join(', ')}, got "${trainingPreemption}"`,
    );
  }
  const metricsToken = env['ANVIL_METRICS_TOKEN'] || null;
  if (metricsToken !== null && !/^[\x21-\x7e]{16,256}$/.test(metricsToken)) {
    throw new ConfigError(
      'ANVIL_METRICS_TOKEN',
      'must be 16-256 printable characters without spaces (e.g. openssl rand -hex 32)',
    );
  }
  const localAgentText = (env['ANVIL_LOCAL_AGENT'] || '1').toLowerCase();
  if (!['0', '1', 'true', 'false'].includes(localAgentText)) {
    throw new ConfigError('ANVIL_LOCAL_AGENT', `must be 1 or 0 (true or false), got "${localAgentText}"`);
  }

  const proxyDomain = (env['ANVIL_PROXY_DOMAIN'] || 'proxy.localhost').toLowerCase().replace(/\.+$/, '');
  if (
    !/^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(
      proxyDomain,
    )
  ) {
    throw new ConfigError(
      'ANVIL_PROXY_DOMAIN',
      `must be a DNS name such as proxy.example.com, got "${proxyDomain}"`,
    );
  }
  const proxyTlsCert = env['ANVIL_PROXY_TLS_CERT'] || null;
  const proxyTlsKey = env['ANVIL_PROXY_TLS_KEY'] || null;
  if ((proxyTlsCert === null) !== (proxyTlsKey === null)) {
    throw new ConfigError(
      proxyTlsCert === null ? 'ANVIL_PROXY_TLS_CERT' : 'ANVIL_PROXY_TLS_KEY',
      'must be set together with its pair (ANVIL_PROXY_TLS_CERT and ANVIL_PROXY_TLS_KEY are PEM file paths)',
    );
  }

  const dataDir = resolve(env['ANVIL_DATA_DIR'] || './data');
  const trustedProxies = (env['ANVIL_TRUSTED_PROXIES'] || '')
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean);
  const badProxies = invalidCidrs(trustedProxies);
  if (badProxies.length > 0) {
    throw new ConfigError(
      'ANVIL_TRUSTED_PROXIES',
      `must be comma-separated IP addresses or CIDRs, got "${badProxies.join(', ')}"`,
    );
  }

  return {
    port,
    host: env['ANVIL_HOST'] || '0.0.0.0',
    dataDir,
    databaseUrl,
    ownerEmail,
    bootstrapApiKey,
    logLevel,
    bodyLimitBytes: integer(env, 'ANVIL_BODY_LIMIT_BYTES', 1_048_576, 1024, 1_073_741_824),
    shutdownTimeoutMs: integer(env, 'ANVIL_SHUTDOWN_TIMEOUT_MS', 10_000, 0, 600_000),
    shutdownDrainMs: integer(env, 'ANVIL_SHUTDOWN_DRAIN_MS', 0, 0, 600_000),
    publicUrl,
    replicaUrl,
    secretKey,
    previousSecretKeys,
    smtpUrl,
    smtpFrom,
    outboundAllowPrivate: allowPrivate === 'true',
    heartbeatSeconds,
    hostGraceSeconds,
    trainingPreemption,
    metricsSeconds: integer(env, 'ANVIL_METRICS_SECONDS', 15, 1, 3600),
    agentHandshakeSeconds: integer(env, 'ANVIL_AGENT_HANDSHAKE_SECONDS', 20, 1, 600),
    agentPreAuthLimit: integer(env, 'ANVIL_AGENT_PREAUTH_LIMIT', 128, 1, 100_000),
    hostCredentialRenewSeconds: integer(
      env,
      'ANVIL_HOST_CREDENTIAL_RENEW_SECONDS',
      30 * 86_400,
      1,
      3_650 * 86_400,
    ),
    hostCredentialGraceSeconds: integer(env, 'ANVIL_HOST_CREDENTIAL_GRACE_SECONDS', 3_600, 0, 30 * 86_400),
    metricsToken,
    localAgent: localAgentText === '1' || localAgentText === 'true',
    gpuPricesFile: env['ANVIL_GPU_PRICES_FILE'] ? resolve(env['ANVIL_GPU_PRICES_FILE']) : null,
    proxyPort: integer(env, 'ANVIL_PROXY_PORT', 8443, 0, 65535),
    proxyDomain,
    proxyTlsCert: proxyTlsCert === null ? null : resolve(proxyTlsCert),
    proxyTlsKey: proxyTlsKey === null ? null : resolve(proxyTlsKey),
    sshPort: integer(env, 'ANVIL_SSH_PORT', 2222, 0, 65535),
    sshHost: sshHostOf(env, publicUrl),
    sessionLimits: {
      terminal: integer(env, 'ANVIL_MAX_TERMINAL_SESSIONS', 20, 1, 100_000),
      log_stream: integer(env, 'ANVIL_MAX_LOG_STREAMS', 50, 1, 100_000),
      ssh: integer(env, 'ANVIL_MAX_SSH_CONNECTIONS', 50, 1, 100_000),
      proxy_websocket: integer(env, 'ANVIL_MAX_PROXY_WEBSOCKETS', 200, 1, 100_000),
    },
    usageAlertSeconds: integer(env, 'ANVIL_USAGE_ALERT_SECONDS', 300, 0, 86_400),
    transferPricePerGb: price(env, 'ANVIL_TRANSFER_PRICE_PER_GB'),
    storagePricePerGbHour: price(env, 'ANVIL_STORAGE_PRICE_PER_GB_HOUR'),
    storageMeterSeconds: integer(env, 'ANVIL_STORAGE_METER_SECONDS', 3600, 0, 86_400),
    failedGpuPolicy: failedGpuPolicy(env),
    datasetsDir: env['ANVIL_DATASETS_DIR']
      ? resolve(env['ANVIL_DATASETS_DIR'])
      : resolve(dataDir, 'datasets'),
    // 50 GiB by default; at most 5 TiB, S3's largest object.
    datasetMaxBytes: integer(env, 'ANVIL_DATASET_MAX_BYTES', 53_687_091_200, 1024, 5_497_558_138_880),
    datasetUploadTokenSeconds: integer(env, 'ANVIL_DATASET_UPLOAD_TOKEN_SECONDS', 86_400, 60, 2_592_000),
    // Every account gets 100 GiB unless the operator sets another figure, or `unlimited`.
    datasetQuotaBytes:
      (env['ANVIL_DATASET_QUOTA_BYTES'] ?? '').trim().toLowerCase() === 'unlimited'
        ? null
        : integer(env, 'ANVIL_DATASET_QUOTA_BYTES', DEFAULT_DATASET_QUOTA_BYTES, 0, Number.MAX_SAFE_INTEGER),
    trustedProxies,
    agentArtifactsDir: env['ANVIL_AGENT_ARTIFACTS_DIR']
      ? resolve(env['ANVIL_AGENT_ARTIFACTS_DIR'])
      : resolve(dataDir, 'agent-artifacts'),
    agentRuntimesDir: env['ANVIL_AGENT_RUNTIMES_DIR'] ? resolve(env['ANVIL_AGENT_RUNTIMES_DIR']) : null,
    agentVersion: agentVersionOf(env['ANVIL_AGENT_VERSION']),
  };
}

function agentVersionOf(raw: string | undefined): string | null {
  if (raw === undefined || raw.trim() === '') return null;
  if (raw !== 'manual' && !AGENT_VERSION_PATTERN.test(raw)) {
    throw new ConfigError('ANVIL_AGENT_VERSION', `must be an agent version or "manual", got "${raw}"`);
  }
  return raw;
}

function failedGpuPolicy(env: Env): 'keep' | 'stop' {
  const value = (env['ANVIL_FAILED_GPU_POLICY'] ?? '').trim().toLowerCase() || 'keep';
  if (value !== 'keep' && value !== 'stop') {
    throw new ConfigError('ANVIL_FAILED_GPU_POLICY', `must be keep or stop, got "${value}"`);
  }
  return value;
}

/** ANVIL_SSH_HOST, else the host of ANVIL_PUBLIC_URL (what users already reach this server by). */
function sshHostOf(env: Env, publicUrl: string): string {
  const host = (env['ANVIL_SSH_HOST'] || new URL(publicUrl).hostname).replace(/^\[|\]$/g, '');
  if (!/^[A-Za-z0-9.:-]{1,253}$/.test(host)) {
    throw new ConfigError('ANVIL_SSH_HOST', `must be a host name or IP address, got "${host}"`);
  }
  return host;
}
