import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { type CreateJobRequest, isShortForm } from '../../training/config.ts';
import { TRAINER_CONTRACT } from '../../training/contract.ts';
import { actorOf } from '../accounts/common.ts';
import { ACCESS, FIGURES, LIFECYCLE } from './training-jobs.docs.ts';
import {
  CreateJobBody,
  Job,
  JobList,
  JobListItem,
  JobParams,
  ListJobsQuery,
  ResumeJobBody,
  ShortCreatedJob,
  StopJobBody,
} from './training-jobs.schemas.ts';

const tags = ['training jobs'];

/** The full form needs modelType, datasetId and config; the schema cannot say "one form or the other". */
function checkForm(body: CreateJobRequest): void {
  if (isShortForm(body)) return;
  for (const field of ['modelType', 'datasetId', 'config'] as const) {
    if ((body as unknown as Record<string, unknown>)[field] === undefined) {
      throw new ApiError('VALIDATION_ERROR', `body field "${field}" is required`, {
        field,
        reason: 'is required (full form: name, modelType, datasetId, config)',
        location: 'body',
      });
    }
  }
}

/** /v2/training/jobs: thin HTTP over the training domain (flat errors, bare bodies). */
export const trainingJobRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const training = context.training.service;
  app.addSchema(Job);
  app.addSchema(JobListItem);
  const config = { scope: 'training' as const, service: true };

  app.post(
    '/v2/training/jobs',
    {
      config,
      schema: {
        tags,
        summary: 'Create a training job',
        description:
          `${ACCESS} Full form: name, modelType, datasetId, config required; description, tags, gpuType (default ` +
          'h100), maxWorkers (1-32, default 1: workers placed together or not at all), priority. Anvil extensions in ' +
          'config: image, command, gpusPerWorker (1-16, default 1). Short form: name, hyperparameters ' +
          '{learningRate, batchSize, epochs, optimizer}, datasetConfig {datasetId} (a datasetUrl is first made a ' +
          'dataset with POST /v2/training/datasets {dataUrl}), modelConfig {modelType, baseModel, customCode}, ' +
          'infrastructure {gpuType, gpuCount}: answers {jobId, name, status, estimatedStartTime (the placement ' +
          'time when placed at once, else null), estimatedDuration (null: unknown before the trainer reports), ' +
          'estimatedCost {hourly = price x GPUs; gpuCost, storageCost, totalCost null: unknown before it runs}, ' +
          'createdAt}. The hyperparameters (config.training, config.optimization, config.parameters; ' +
          'hyperparameters) become one flat snake_case record, `parameters`. learning_rate outside 1e-6..1e-1, a ' +
          'non-positive epochs or batch_size: 400 CONFIGURATION_ERROR {field, reason}. An unknown dataset or one of ' +
          'another account: 404 DATASET_NOT_FOUND {datasetId}; a dataset not ready: 400 CONFIGURATION_ERROR. No ' +
          'set of hosts could ever fit the workers (e.g. a GPU type no host has): 422 INSUFFICIENT_RESOURCES ' +
          '{requestedGpuType, availableGpuTypes (the types the fleet has)} and nothing is kept. Otherwise 201 ' +
          `with status pending (placed) or queued (waiting for room). ${LIFECYCLE} ${TRAINER_CONTRACT}`,
        body: CreateJobBody,
        response: {
          201: Type.Union([Type.Ref('TrainingJob'), ShortCreatedJob]),
          ...flatErrors(400, 401, 403, 404, 422, 429),
        },
      },
    },
    async (request, reply) => {
      const body = request.body as CreateJobRequest;
      checkForm(body);
      return reply.code(201).send(await training.create(actorOf(request), body));
    },
  );

  app.get(
    '/v2/training/jobs',
    {
      config,
      schema: {
        tags,
        summary: "The account's training jobs",
        description:
          `${ACCESS} Filters status, modelType and tuneId (a tuning job's trials) match exactly. sort: created_at ` +
          '(default), updated_at, name; order desc by default; ties broken by id. pagination.total counts every ' +
          'match; hasMore = offset + returned < total. Each item adds progress and metrics {loss (the latest ' +
          `reported loss), learningRate, throughput}. ${FIGURES}`,
        querystring: ListJobsQuery,
        response: { 200: JobList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => training.list(actorOf(request), request.query),
  );

  app.get(
    '/v2/training/jobs/:job_id',
    {
      config,
      schema: {
        tags,
        summary: 'One training job',
        description: `${ACCESS} ${FIGURES} ${LIFECYCLE}`,
        params: JobParams,
        response: { 200: Type.Ref('TrainingJob'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => training.get(actorOf(request), request.params.job_id),
  );

  app.post(
    '/v2/training/jobs/:job_id/stop',
    {
      config,
      schema: {
        tags,
        summary: 'Stop a training job',
        description:
          `${ACCESS} saveCheckpoint (default true): every worker gets SIGTERM — the trainer writes a checkpoint, ` +
          'reports it and exits — and SIGKILL after the grace period; false: SIGKILL at once, no checkpoint. ' +
          'Answers the job: status `stopping` until every container is gone, then `stopped` (the state a stop ' +
          'reaches; the GPUs are released and billing closes then). A queued job (not placed) becomes ' +
          '`cancelled` at once. stopRequest {saveCheckpoint, reason, requestedAt} records the request. Stopping a ' +
          'stopping job changes nothing; a completed, failed, stopped or cancelled job: 400 INVALID_STATE ' +
          '{current_status, required_status, suggestion}.',
        params: JobParams,
        body: StopJobBody,
        response: { 200: Type.Ref('TrainingJob'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => training.stop(actorOf(request), request.params.job_id, request.body ?? {}),
  );

  app.post(
    '/v2/training/jobs/:job_id/resume',
    {
      config,
      schema: {
        tags,
        summary: 'Resume a stopped training job from a checkpoint',
        description:
          `${ACCESS} A stopped, failed or cancelled job runs again as a new attempt (attempt + 1) from checkpointId ` +
          '(one of its checkpoints, else 404 CHECKPOINT_NOT_FOUND) or, without it, its latest checkpoint (none: ' +
          'from the start). Rank 0 returns to the host holding its checkpoint volume; the trainer finds the ' +
          'checkpoint directory in ANVIL_RESUME_FROM. Answers the job (status pending when placed at once, else ' +
          'queued; resumedFrom names the checkpoint). Other statuses: 400 INVALID_STATE. When the host holding ' +
          'the checkpoints is gone the job is failed again with that reason.',
        params: JobParams,
        body: ResumeJobBody,
        response: { 200: Type.Ref('TrainingJob'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => training.resume(actorOf(request), request.params.job_id, request.body ?? {}),
  );
};
