import { isVolumePath } from '@anvil/shared/protocol';

/**
 * The trainer contract: what a training container gets, and how it tells the control plane what it does.
 * Written once here; the README and the OpenAPI descriptions quote TRAINER_CONTRACT.
 */

/** The image a job runs when config.image is not given; it runs its own CMD unless config.command is set. */
export const DEFAULT_TRAINER_IMAGE = 'pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime';

/** Rank 0's volume (it persists across stop and resume on its host): checkpoints go here. */
export const CHECKPOINT_DIR = '/anvil/checkpoints';
/** The dataset's bytes, read-only (mode 0444). */
export const DATASET_DIR = '/anvil/dataset';
/** Short form customCode. */
export const CODE_PATH = '/anvil/code/train.py';
/** A report is one stdout line: this marker, a space, then one JSON object. */
export const REPORT_MARKER = 'ANVIL_REPORT';
/** ANVIL_TRAINING_PREEMPTION: whose training work a queued job of higher priority may preempt. */
export const PREEMPTION_POLICIES = ['off', 'same-account', 'any-account'] as const;
export type PreemptionPolicy = (typeof PREEMPTION_POLICIES)[number];

/** MASTER_PORT of a gang on one host (each container has its own network namespace, so no clash). */
export const RENDEZVOUS_PORT = 29500;
/** MASTER_PORTs of gangs across hosts: published on rank 0's host, one per gang there. */
export const RENDEZVOUS_PORTS = { first: 29500, last: 29999 } as const;
/** Seconds between SIGTERM and SIGKILL when a worker is stopped. */
export const STOP_GRACE_SECONDS = 60;

export const TRAINER_CONTRACT =
  'Trainer contract. Each worker is one container of the image config.image (default ' +
  `${DEFAULT_TRAINER_IMAGE}; config.command overrides its CMD; short-form customCode is written to ` +
  `${CODE_PATH} and run with python). Environment: ANVIL_JOB_ID, ANVIL_ATTEMPT (1 for the first run, +1 per ` +
  'resume), ANVIL_RANK (0..workers-1), ANVIL_WORLD_SIZE, ANVIL_LOCAL_GPUS (GPUs of this worker), the launcher ' +
  'environment torchrun reads (MASTER_ADDR and MASTER_PORT: rank 0 on the account network of its host, or, for ' +
  "a gang spread over hosts, rank 0's host's rendezvous address and a port published there for the gang's " +
  'other hosts only; NODE_RANK = ANVIL_RANK, LOCAL_WORLD_SIZE = GPUs of this worker, WORLD_SIZE = workers x ' +
  'GPUs per worker, RANK = NODE_RANK x LOCAL_WORLD_SIZE, LOCAL_RANK 0: one container is one node), ANVIL_HPARAMS ' +
  '(the hyperparameters as one JSON object) and one ANVIL_HP_<NAME> per hyperparameter (upper-case snake ' +
  `case: ANVIL_HP_LEARNING_RATE=0.001), ANVIL_TOTAL_EPOCHS when epochs is set, ANVIL_DATASET_DIR=${DATASET_DIR} ` +
  'and ANVIL_DATASET_FILE (the current version of the dataset as data.<format>, a read-only bind mount: ' +
  'the agent fetches it from the control plane with its host credential before the container starts, ' +
  'checks its SHA-256 and keeps it once per digest on the host), ' +
  `ANVIL_CHECKPOINT_DIR=${CHECKPOINT_DIR} (rank 0: a volume kept on its host ` +
  'across stop and resume), ANVIL_RESUME_FROM (the checkpoint directory to resume from; empty on a fresh ' +
  `start). Reports: stdout lines \`${REPORT_MARKER} {json}\` from rank 0 (other ranks' reports are ignored), ` +
  'read from the log stream the agent already sends: {"type":"metrics","step":n,"epoch":e,"loss":x,' +
  '"learning_rate":x,"throughput":x,"memory_usage":x,"total_steps":n,"total_epochs":n, any other numeric ' +
  'values} and {"type":"checkpoint","path":"<dir relative to ANVIL_CHECKPOINT_DIR>","epoch":e,"step":n,' +
  '"loss":x,"size_bytes":n}. Lines that do not parse are ignored. Exit code 0: completed; any other: failed ' +
  '(statusReason names the code); a worker that fails fails the whole gang, whose other workers are removed. Stop: every worker gets SIGTERM — the trainer writes a checkpoint, reports ' +
  `it and exits; SIGKILL follows after ${STOP_GRACE_SECONDS} s (saveCheckpoint false: SIGKILL at once).`;

export type TrainerReport =
  | {
      type: 'metrics';
      step: number | null;
      epoch: number | null;
      totalSteps: number | null;
      totalEpochs: number | null;
      values: Record<string, number>;
    }
  | {
      type: 'checkpoint';
      path: string;
      epoch: number | null;
      step: number | null;
      loss: number | null;
      sizeBytes: number | null;
    }
  | {
      /** A file of the workspace (rank 0's volume) the trainer wants kept: artifacts/docs.ts states the rules. */
      type: 'artifact';
      /** Relative to CHECKPOINT_DIR. */
      path: string;
      name: string;
    };

const finite = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;
const integer = (value: unknown): number | null => {
  const n = finite(value);
  return n !== null && Number.isInteger(n) && n >= 0 && n <= 2_147_483_647 ? n : null;
};

/** A checkpoint path stays inside the checkpoint directory: relative, no `..`, a sane alphabet. */
const CHECKPOINT_PATH = /^(?!.*(^|\/)\.\.(\/|$))[A-Za-z0-9_.\-/]{1,200}$/;

/** The report a log line carries, or null (not a report, or malformed). */
export function parseReport(line: string): TrainerReport | null {
  const at = line.indexOf(REPORT_MARKER);
  if (at === -1) return null;
  const text = line.slice(at + REPORT_MARKER.length).trim();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return null;
  const report = parsed as Record<string, unknown>;
  if (report['type'] === 'artifact') return artifactReport(report);
  if (report['type'] === 'checkpoint') {
    const path = report['path'];
    if (typeof path !== 'string' || !CHECKPOINT_PATH.test(path) || path.startsWith('/')) return null;
    return {
      type: 'checkpoint',
      path,
      epoch: finite(report['epoch']),
      step: integer(report['step']),
      loss: finite(report['loss']),
      sizeBytes: integer(report['size_bytes']),
    };
  }
  if (report['type'] !== 'metrics') return null;
  const values: Record<string, number> = {};
  for (const [key, value] of Object.entries(report)) {
    if (['type', 'step', 'epoch', 'total_steps', 'total_epochs'].includes(key)) continue;
    const n = finite(value);
    if (n !== null && /^[A-Za-z0-9_.\-/]{1,64}$/.test(key) && Object.keys(values).length < 50)
      values[key] = n;
  }
  return {
    type: 'metrics',
    step: integer(report['step']),
    epoch: finite(report['epoch']),
    totalSteps: integer(report['total_steps']),
    totalEpochs: integer(report['total_epochs']),
    values,
  };
}

/** An artifact report's path (relative to CHECKPOINT_DIR or absolute under it) and name, or null. */
function artifactReport(report: Record<string, unknown>): TrainerReport | null {
  let path = report['path'];
  if (typeof path !== 'string') return null;
  if (path.startsWith(`${CHECKPOINT_DIR}/`)) path = path.slice(CHECKPOINT_DIR.length + 1);
  if (!isVolumePath(path as string)) return null;
  const name = report['name'] ?? path;
  if (typeof name !== 'string' || name.length === 0 || name.length > 200) return null;
  return { type: 'artifact', path: path as string, name };
}

/** ANVIL_HP_<NAME> for a parameter name: upper snake case, anything outside [A-Z0-9_] as _. */
export function hyperparameterEnvName(name: string): string {
  return `ANVIL_HP_${name.toUpperCase().replace(/[^A-Z0-9_]/g, '_')}`;
}
