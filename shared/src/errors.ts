/**
 * The error catalogue: every code the API answers with, and its HTTP status.
 * Codes and statuses come from the spec; where the spec leaves a status unnamed the choice is noted.
 */
export const ERROR_STATUS = {
  VALIDATION_ERROR: 400,
  INVALID_PARAMETERS: 400,
  INVALID_PERMISSION: 400,
  INVALID_SCOPE: 400,
  INVALID_EMAIL: 400,
  INVALID_PERIOD: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  INSUFFICIENT_PERMISSIONS: 403,
  NOT_FOUND: 404,
  API_KEY_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  BOOST_ALREADY_ACTIVE: 409,
  /** Not in the spec: a temporary boost asked for within the cooldown after the previous one ended. */
  BOOST_COOLDOWN: 409,
  // Accounts: team, roles and permissions, profile, settings (spec: Errors; unnamed statuses noted).
  MEMBER_ALREADY_EXISTS: 409,
  ROLE_NAME_EXISTS: 409,
  /** Not in the spec: deleting a custom role that members still hold. */
  ROLE_IN_USE: 409,
  /** Not in the spec: resending, cancelling or accepting an invitation that is no longer pending. */
  INVITATION_NOT_PENDING: 409,
  /** Not in the spec: accepting an invitation after its expiry (410, the link is gone for good). */
  INVITATION_EXPIRED: 410,
  FILE_TOO_LARGE: 413,
  INVALID_FILE_TYPE: 415,
  CANNOT_REMOVE_OWNER: 422,
  /** Not in the spec: changing the owner's role or status, or one's own. */
  CANNOT_MODIFY_MEMBER: 422,
  INVALID_ROLE_HIERARCHY: 422,
  /** Not in the spec: a setting or field Anvil accepts in the schema but cannot act on (named in details). */
  NOT_SUPPORTED: 400,
  /** Not in the spec: the caller's address is outside the account's security.api_access.ip_whitelist. */
  IP_NOT_ALLOWED: 403,
  // Two-factor authentication (not in the spec, which names security.two_factor without its checks).
  /** A sensitive operation without a code in X-Anvil-OTP while two-factor applies to the caller. */
  OTP_REQUIRED: 401,
  /** A two-factor code that is wrong, expired, or already used. */
  OTP_INVALID: 401,
  /** The account requires two-factor and the caller has not enrolled yet. */
  OTP_ENROLMENT_REQUIRED: 403,
  /** Not in the spec: a role limitation (maxApiKeys, maxClusters, ...) or settings limit is reached. */
  LIMIT_EXCEEDED: 403,
  MEMBER_NOT_FOUND: 404,
  ROLE_NOT_FOUND: 404,
  GRANT_NOT_FOUND: 404,
  SHARE_NOT_FOUND: 404,
  RESOURCE_NOT_FOUND: 404,
  INVITATION_NOT_FOUND: 404,
  /** Not in the spec: a notification test that the receiving server refused or could not be reached. */
  NOTIFICATION_FAILED: 502,
  // Host fleet (issue 3); the spec does not show these: statuses chosen as the field does.
  HOST_NOT_FOUND: 404,
  JOIN_TOKEN_NOT_FOUND: 404,
  WORKLOAD_NOT_FOUND: 404,
  /** Deleting a host that still has workloads (pass force=true to delete them with it). */
  HOST_HAS_WORKLOADS: 409,
  /** A command for a host whose agent is not connected to any control-plane process. */
  HOST_NOT_CONNECTED: 409,
  /** The agent answered a command with an error. */
  AGENT_COMMAND_FAILED: 502,
  /** The agent did not answer a command in time. */
  AGENT_TIMEOUT: 504,
  // Clusters, templates, proxy, secrets, SSH keys, usage alerts (compute spec: Errors). The spec groups
  // CONFIRMATION_REQUIRED, INVALID_STATE, METRICS_NOT_AVAILABLE and TEMPLATE_NOT_FOUND under 400.
  CONFIRMATION_REQUIRED: 400,
  INVALID_STATE: 400,
  METRICS_NOT_AVAILABLE: 400,
  TEMPLATE_NOT_FOUND: 400,
  /** Unnumbered in the spec: no host could ever fit the request (busy capacity leaves it pending instead). */
  INSUFFICIENT_RESOURCES: 422,
  /** Not in the spec: an unknown cluster id, or one of another account. */
  CLUSTER_NOT_FOUND: 404,
  /** Not in the spec: a template name already used in the same project. */
  TEMPLATE_NAME_EXISTS: 409,
  PORT_MAPPING_NOT_FOUND: 404,
  /** Not in the spec: an internal or external port already mapped. */
  PORT_CONFLICT: 409,
  SECRET_NOT_FOUND: 404,
  /** Not in the spec: no snapshot with that id among the cluster's (GET /v1/clusters/{id}/snapshots). */
  SNAPSHOT_NOT_FOUND: 404,
  /** Not in the spec: a secret name already used in the cluster. */
  SECRET_ALREADY_EXISTS: 409,
  SSH_KEY_NOT_FOUND: 404,
  /** Not in the spec: the same public key registered twice. */
  SSH_KEY_EXISTS: 409,
  USAGE_ALERT_NOT_FOUND: 404,
  // Training datasets (compute spec: Errors lists the codes without statuses; chosen as the field does).
  DATASET_NOT_FOUND: 404,
  /** A dataset format outside jsonl, csv, parquet, hdf5, zip, tar (the short form also takes json). */
  UNSUPPORTED_FORMAT: 400,
  /** Not synchronous in Anvil: a processing pass that fails a check records it on the dataset's `error`. */
  VALIDATION_FAILED: 422,
  /** Not in the spec: an unknown, completed, aborted or expired multipart upload id. */
  UPLOAD_NOT_FOUND: 404,
  /** Storage quota (ANVIL_DATASET_QUOTA_BYTES); 403 like the other limits (LIMIT_EXCEEDED). */
  QUOTA_EXCEEDED: 403,
  /** Not in the spec: deleting a dataset that a training job uses. */
  DATASET_IN_USE: 409,
  /** Not in the spec: the dataset URL of the short form could not be fetched. */
  FETCH_FAILED: 502,
  // Serverless endpoints (compute spec: Errors; unnumbered statuses chosen as the field does).
  INVALID_CONFIGURATION: 400,
  ENDPOINT_NOT_FOUND: 404,
  ENDPOINT_BUSY: 409,
  HEALTH_CHECK_TIMEOUT: 408,
  HEALTH_CHECK_FAILED: 503,
  /** Not in the spec: an unknown job id, one of another endpoint, or one past its ttl. */
  JOB_NOT_FOUND: 404,
  /** Not in the spec: retrying a job that is not FAILED or TIMED_OUT (RunPod retries only those). */
  JOB_NOT_RETRYABLE: 409,
  // Training jobs and tuning (compute spec: Errors lists the codes without statuses; chosen as the field does).
  /** An invalid training configuration (learning rate outside 1e-6..1e-1, ...); details field, reason. */
  CONFIGURATION_ERROR: 400,
  /**
   * Not in the spec: a managed training request (baseModel, architecture or strategy, no image of its own)
   * that no operator recipe runs; details requested, available (the recipes that exist).
   */
  NO_TRAINING_RECIPE: 422,
  /** Not in the spec: an unknown training recipe id (/v2/admin/training-recipes). */
  TRAINING_RECIPE_NOT_FOUND: 404,
  /** Not in the spec: a training recipe name already used. */
  TRAINING_RECIPE_EXISTS: 409,
  /** Not in the spec: an unknown training job id, or one of another account. */
  TRAINING_JOB_NOT_FOUND: 404,
  /** Not in the spec: a checkpoint id that is not one of the job's. */
  CHECKPOINT_NOT_FOUND: 404,
  /** Not in the spec: an artifact id that is not one of the job's, or whose file is gone from its host. */
  ARTIFACT_NOT_FOUND: 404,
  /** Not in the spec: a worker id that is not one of the endpoint's. */
  ENDPOINT_WORKER_NOT_FOUND: 404,
  /** Not in the spec: an unknown tuning job id, or one of another account. */
  TUNING_JOB_NOT_FOUND: 404,
  INVALID_SEARCH_SPACE: 400,
  /** The search's estimated cost exceeds budget.max_cost (or max_gpu_hours); details requestedTrials, estimatedCost, availableBudget. */
  INSUFFICIENT_BUDGET: 422,
  /** The algorithm cannot search this space (grid over continuous parameters); details algorithm, unsupportedParameterTypes. */
  ALGORITHM_NOT_SUPPORTED: 400,
  // Experiments (compute spec: Errors lists the codes without statuses; chosen as the field does).
  EXPERIMENT_NOT_FOUND: 404,
  /** Not in the spec: a run id that is not a run of the experiment. */
  RUN_NOT_FOUND: 404,
  /** Not in the spec: a download's Range starts beyond the file (the answer carries Content-Range bytes *\/size). */
  RANGE_NOT_SATISFIABLE: 416,
  /** The training job is already a run of an experiment (details trainingJobId, existingExperimentId). */
  RUN_ALREADY_EXISTS: 409,
  /** Compare with fewer than 2 completed runs: the request is well formed, the experiment not ready. */
  INSUFFICIENT_RUNS: 422,
  /** Not in the spec: adding a run to an archived experiment, or changing its status. */
  EXPERIMENT_ARCHIVED: 409,
  /** Not in the spec: an export destination (s3, gcs, ...) that this installation has not configured. */
  DESTINATION_NOT_CONFIGURED: 400,
  PAYLOAD_TOO_LARGE: 413,
  /** Not in the spec: a plain GET on a WebSocket-only endpoint (the web terminal). */
  UPGRADE_REQUIRED: 426,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMITED: 429,
  RATE_LIMIT_EXCEEDED: 429,
  INTERNAL_ERROR: 500,
  SERVICE_UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** A failure the API reports to its caller: code from the catalogue, human message, structured details. */
export class ApiError extends Error {
  readonly status: number;
  /** Fields placed at the top level of a flat error body next to `details` (e.g. `required_permission`). */
  readonly extra: Record<string, unknown>;

  constructor(
    readonly code: ErrorCode | (string & {}),
    message: string,
    readonly details?: Record<string, unknown>,
    options: { status?: number; extra?: Record<string, unknown>; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = options.status ?? (ERROR_STATUS as Record<string, number>)[code] ?? 500;
    this.extra = options.extra ?? {};
    this.headers = options.headers ?? {};
  }

  readonly headers: Record<string, string>;
}
