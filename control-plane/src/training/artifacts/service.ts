import type { Socket } from 'node:net';
import { ApiError } from '@anvil/shared';
import type { FileStat } from '@anvil/shared/protocol';
import type { Actor } from '../../accounts/access.ts';
import type { Clock } from '../../auth/clock.ts';
import type { TrainingArtifact, TrainingJob } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import { ACTIVE_STATUSES, type TrainingService } from '../service.ts';
import type { HostFiles } from './host-files.ts';
import { type ArtifactView, viewArtifact } from './view.ts';

export function artifactNotFound(jobId: string, artifactId: string, reason?: string): ApiError {
  return new ApiError(
    'ARTIFACT_NOT_FOUND',
    `artifact ${artifactId} of training job ${jobId} not found${reason ? `: ${reason}` : ''}`,
    { jobId, artifactId, ...(reason ? { reason } : {}) },
  );
}

/** A downloadable file: what the agent found, and how to get its bytes (a file tunnel from its host). */
export interface ArtifactDownload {
  artifact: ArtifactView;
  sizeBytes: number;
  sha256: string;
  modifiedAt: Date | null;
  /** `length` bytes from `offset` (the file's SHA-256 is checked again by the agent before it sends). */
  open(offset: number, length: number): Promise<Socket>;
}

/**
 * A training job's artifacts (files its trainer reported, and its checkpoints): list, download, delete.
 * They live in rank 0's volume on its host and outlive the containers; the agent of that host measures
 * them and streams them over a file tunnel. Access is the job's: read to list and download, write (and the
 * execute scope) to delete; another account's job answers 404 TRAINING_JOB_NOT_FOUND.
 */
export class ArtifactService {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      training: Pick<TrainingService, 'requireAccess' | 'requireJob'>;
      files: HostFiles;
    },
  ) {}

  async #job(actor: Actor, jobId: string, permission: 'read' | 'write'): Promise<TrainingJob> {
    await this.d.training.requireAccess(actor, permission === 'read' ? 'read' : 'execute');
    return this.d.training.requireJob(actor, jobId, permission);
  }

  async #artifact(job: TrainingJob, artifactId: string): Promise<TrainingArtifact> {
    const row = await this.d.db.prisma.trainingArtifact.findFirst({
      where: { id: artifactId, jobId: job.id, accountId: job.accountId, deletedAt: null },
    });
    if (!row) throw artifactNotFound(job.id, artifactId);
    return row;
  }

  /** The job's artifacts, oldest first; those not measured yet are measured now where their host answers. */
  async list(actor: Actor, jobId: string): Promise<{ jobId: string; artifacts: ArtifactView[] }> {
    const job = await this.#job(actor, jobId, 'read');
    const rows = await this.d.db.prisma.trainingArtifact.findMany({
      where: { jobId: job.id, accountId: job.accountId, deletedAt: null },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    const measured = await Promise.all(
      rows.map((row) => (row.measuredAt ? row : this.measure(row).catch(() => row))),
    );
    return { jobId: job.id, artifacts: measured.map(viewArtifact) };
  }

  /** Asks the host what is at the artifact's path (with its digest) and records it. */
  async measure(row: TrainingArtifact): Promise<TrainingArtifact> {
    if (!row.hostId) return row;
    const stat = await this.d.files.stat(row.hostId, row.workloadId, row.path, true);
    return this.#record(row, stat);
  }

  #record(row: TrainingArtifact, stat: FileStat): Promise<TrainingArtifact> {
    const known = stat.kind === 'file' || stat.kind === 'directory';
    return this.d.db.prisma.trainingArtifact.update({
      where: { id: row.id },
      data: {
        fileKind: stat.kind,
        sizeBytes: known ? BigInt(stat.sizeBytes) : null,
        sha256: stat.sha256,
        measuredAt: this.d.clock.now(),
      },
    });
  }

  /**
   * What a download serves: the file as its host has it now (measured again; the digest comes from the
   * agent's cache unless the file changed). Gone or leaving the volume (a symlink pointing out): 404; a
   * directory (a checkpoint written as several files): 400 NOT_SUPPORTED.
   */
  async download(actor: Actor, jobId: string, artifactId: string): Promise<ArtifactDownload> {
    const job = await this.#job(actor, jobId, 'read');
    const row = await this.#artifact(job, artifactId);
    if (!row.hostId) throw artifactNotFound(job.id, row.id, 'its host is not known');
    const stat = await this.d.files.stat(row.hostId, row.workloadId, row.path, true);
    const updated = await this.#record(row, stat);
    if (stat.kind === 'missing') throw artifactNotFound(job.id, row.id, 'the file is no longer on its host');
    if (stat.kind === 'outside')
      throw artifactNotFound(job.id, row.id, "the path leaves the job's workspace");
    if (stat.kind === 'directory' || stat.sha256 === null) {
      throw new ApiError('NOT_SUPPORTED', `artifact ${row.id} is a directory: only files can be downloaded`, {
        field: 'artifactId',
        reason: 'a directory (download the files the trainer reported as artifacts)',
      });
    }
    const sha256 = stat.sha256;
    return {
      artifact: viewArtifact(updated),
      sizeBytes: stat.sizeBytes,
      sha256,
      modifiedAt: stat.modifiedAt === null ? null : new Date(stat.modifiedAt),
      open: (offset, length) => this.d.files.open(row.workloadId, { path: row.path, offset, length, sha256 }),
    };
  }

  /**
   * Deletes the artifact's file (or directory) on its host, and the artifact; a checkpoint artifact takes
   * its checkpoint with it (a resume no longer finds it). Refused while the job is active (400
   * INVALID_STATE): its trainer still writes the workspace. The row keeps deletedAt for the storage meter.
   */
  async delete(actor: Actor, jobId: string, artifactId: string): Promise<void> {
    const job = await this.#job(actor, jobId, 'write');
    const row = await this.#artifact(job, artifactId);
    if ((ACTIVE_STATUSES as readonly string[]).includes(job.status)) {
      throw new ApiError(
        'INVALID_STATE',
        `training job ${job.id} is ${job.status}; artifacts are deleted once it ended`,
        {
          current_status: job.status,
          required_status: ['stopped', 'completed', 'failed', 'cancelled'],
          suggestion: 'stop the job first, or wait until it ends',
        },
      );
    }
    if (row.hostId) await this.d.files.remove(row.hostId, row.workloadId, row.path);
    await this.d.db.prisma.$transaction(async (tx) => {
      await tx.trainingArtifact.update({ where: { id: row.id }, data: { deletedAt: this.d.clock.now() } });
      if (row.checkpointId) await tx.trainingCheckpoint.deleteMany({ where: { id: row.checkpointId } });
    });
  }
}
