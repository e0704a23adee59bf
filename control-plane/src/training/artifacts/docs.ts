import { CHECKPOINT_DIR, REPORT_MARKER } from '../contract.ts';

/** The artifact rules, written once: the README and the OpenAPI descriptions quote them. */
export const ARTIFACT_REPORT =
  `Artifacts: rank 0 prints \`${REPORT_MARKER} {"type":"artifact","path":"<file>","name":"<label>"}\` for a file ` +
  `it wrote in its workspace ANVIL_CHECKPOINT_DIR (${CHECKPOINT_DIR}, rank 0's volume): path relative to it ` +
  `(or absolute under it), 1-512 characters of A-Z a-z 0-9 _ . - /, no "." or ".." segment; name (at most 200 ` +
  'characters) defaults to the path. A report outside these rules is ignored: a path that leaves the workspace ' +
  'is never recorded. Every checkpoint report is also an artifact, of type checkpoint.';

export const ARTIFACT_RETENTION =
  "Retention: artifacts live in rank 0's volume on its host, which outlives the containers (it is kept after " +
  'the job ends, for downloads and resumes); they stay until deleted one by one (DELETE) — deleting the ' +
  "job's workspace otherwise is an operator's act on the host. Storage: their measured bytes are billed as " +
  'storage (usage kind storage, resource training_job, metadata.source training_artifacts, GB-hours at the ' +
  'storage price) from when they were reported, or the end of the last billing session of the job, until ' +
  'their deletion; while the job runs, its container disk measurement (which includes the volume) bills them ' +
  'instead, so no byte is billed twice.';
