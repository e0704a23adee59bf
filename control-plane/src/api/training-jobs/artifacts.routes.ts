import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { ARTIFACT_REPORT, ARTIFACT_RETENTION } from '../../training/artifacts/docs.ts';
import { actorOf } from '../accounts/common.ts';
import { sendArtifact } from './artifact-download.ts';
import { ArtifactList, ArtifactParams, TrainingArtifact } from './artifacts.schemas.ts';
import { ACCESS } from './training-jobs.docs.ts';
import { JobParams } from './training-jobs.schemas.ts';

const tags = ['training jobs'];

/** /v2/training/jobs/{id}/artifacts: thin HTTP over training/artifacts (flat errors, bare bodies). */
export const trainingArtifactRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const artifacts = context.trainingArtifacts.service;
  app.addSchema(TrainingArtifact);
  const config = { scope: 'training' as const, service: true };

  app.get(
    '/v2/training/jobs/:job_id/artifacts',
    {
      config,
      schema: {
        tags,
        summary: "The job's artifacts and checkpoints",
        description:
          `${ACCESS} Oldest first. ${ARTIFACT_REPORT} sizeBytes, sha256 and fileKind are what the agent of the ` +
          'host holding the workspace measured (an artifact not measured yet is measured while listing when its ' +
          `host is connected; otherwise they stay null). ${ARTIFACT_RETENTION}`,
        params: JobParams,
        response: { 200: ArtifactList, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => artifacts.list(actorOf(request), request.params.job_id),
  );

  app.get(
    '/v2/training/jobs/:job_id/artifacts/:artifactId/download',
    {
      config,
      schema: {
        tags,
        summary: 'Download an artifact (Range and resume)',
        description:
          `${ACCESS} The file's bytes, streamed from the agent of its host over a file tunnel (nothing is copied ` +
          'to the control plane; the transfer is metered like other tunnel traffic). The agent opens the file ' +
          "only inside the job's workspace: the path is resolved on the host, a symlink leading out is refused " +
          '(404 ARTIFACT_NOT_FOUND, reason says so), as is a file no longer there; a directory (a checkpoint ' +
          'written as several files): 400 NOT_SUPPORTED. Headers: ETag = the SHA-256 in quotes, ' +
          'X-Checksum-SHA256 (hex) and Repr-Digest (sha-256, RFC 9530) of the whole file, computed by the ' +
          'agent before sending (kept per file content); Accept-Ranges: bytes; Content-Length; Last-Modified. ' +
          'Range: one range `bytes=a-b`, `bytes=a-` (resume from a) or `bytes=-n` answers 206 with ' +
          'Content-Range; several ranges or a malformed header: the whole file (200); a range starting past the ' +
          'end: 416 RANGE_NOT_SATISFIABLE with Content-Range `bytes */size`. If-Range with the ETag resumes only ' +
          'while the file is unchanged (else 200, the whole file); If-None-Match with the ETag: 304. The agent ' +
          'checks the digest again when it opens the file, so a file changed between the check and the transfer ' +
          'fails rather than mixing contents; a transfer cut short ends the connection without a complete body. ' +
          'HEAD answers the headers only. The job’s host must be connected (409 HOST_NOT_CONNECTED otherwise).',
        params: ArtifactParams,
        response: {
          200: { content: { 'application/octet-stream': { schema: Type.String({ format: 'binary' }) } } },
          206: { content: { 'application/octet-stream': { schema: Type.String({ format: 'binary' }) } } },
          304: Type.Null(),
          ...flatErrors(400, 401, 403, 404, 409, 416, 429, 502, 504),
        },
      },
    },
    async (request, reply) => {
      const { job_id: jobId, artifactId } = request.params;
      const download = await artifacts.download(actorOf(request), jobId, artifactId);
      return sendArtifact(request, reply, download);
    },
  );

  app.delete(
    '/v2/training/jobs/:job_id/artifacts/:artifactId',
    {
      config,
      schema: {
        tags,
        summary: 'Delete an artifact and its file',
        description:
          `${ACCESS} Needs write on the job (as stop and resume do). Removes the file or directory on the host ` +
          '(a symlink is removed itself, never followed) and the artifact; a checkpoint artifact takes its ' +
          'checkpoint with it, so a resume no longer starts from it. Refused while the job is queued, pending, ' +
          'running or stopping (400 INVALID_STATE: its trainer may still write the workspace). The host must ' +
          'be connected (409 HOST_NOT_CONNECTED; nothing changes). Answers 204.',
        params: ArtifactParams,
        response: { 204: Type.Null(), ...flatErrors(400, 401, 403, 404, 409, 429, 502, 504) },
      },
    },
    async (request, reply) => {
      const { job_id: jobId, artifactId } = request.params;
      await artifacts.delete(actorOf(request), jobId, artifactId);
      return reply.code(204).send(null);
    },
  );
};
