import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import { ACCESS } from './training-jobs.docs.ts';
import {
  DeployBestBody,
  DeployedJob,
  JobParams,
  ShortTuneCreated,
  StopTuneBody,
  Tune,
  TuneBody,
  TuneList,
  TuneListQuery,
  TuneParams,
} from './training-jobs.schemas.ts';
import { TUNING } from './tune.docs.ts';

const tags = ['hyperparameter tuning'];

/** Tuning jobs over a training job's hyperparameters: thin HTTP over training/tuning. */
export const tuningRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const tuning = context.training.tuning;
  app.addSchema(Tune);
  const config = { scope: 'training' as const, service: true };

  app.post(
    '/v2/training/jobs/:job_id/tune',
    {
      config,
      schema: {
        tags,
        summary: "Tune a training job's hyperparameters",
        description:
          `${ACCESS} Full form: objective (minimize|maximize), metric (a value name the trainer reports, e.g. loss), ` +
          'search_space, algorithm required; max_trials (default 50; grid: at most the grid size; hyperband: at ' +
          "most its brackets' trials), max_concurrent (default 4), early_stopping {metric, patience, min_delta}, " +
          "budget {max_gpu_hours, max_cost}, hyperband_config {max_epochs (default: the job's epochs), " +
          'reduction_factor (default 3), min_epochs (default 1)}. Answers 201 with the tuning job. Short form: ' +
          'hyperparameters {learningRate, batchSize, epochs, optimizer: an array (choice) or {min, max}}, ' +
          'searchStrategy (default random), maxTrials: answers {tuningJobId, status `started`, estimatedDuration ' +
          `(null until a trial finished)}. ${TUNING}`,
        params: JobParams,
        body: TuneBody,
        response: {
          201: Type.Union([Type.Ref('TuningJob'), ShortTuneCreated]),
          ...flatErrors(400, 401, 403, 404, 422, 429),
        },
      },
    },
    async (request, reply) =>
      reply.code(201).send(await tuning.create(actorOf(request), request.params.job_id, request.body)),
  );

  app.get(
    '/v2/training/jobs/:job_id/tune/:tune_id',
    {
      config,
      schema: {
        tags,
        summary: 'One tuning job, its trials and analysis',
        description: `${ACCESS} ${TUNING}`,
        params: TuneParams,
        response: { 200: Type.Ref('TuningJob'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => tuning.get(actorOf(request), request.params.job_id, request.params.tune_id),
  );

  app.get(
    '/v2/training/tune',
    {
      config,
      schema: {
        tags,
        summary: "The account's tuning jobs",
        description:
          `${ACCESS} Filters status and algorithm match exactly; newest first; limit 1-100 (default 50), offset. ` +
          'Each item: id, trainingJobId, status, algorithm, objective, metric, progress, bestValue, createdAt, updatedAt.',
        querystring: TuneListQuery,
        response: { 200: TuneList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => tuning.list(actorOf(request), request.query),
  );

  app.post(
    '/v2/training/jobs/:job_id/tune/:tune_id/stop',
    {
      config,
      schema: {
        tags,
        summary: 'Stop a tuning job',
        description:
          `${ACCESS} No new trials start. complete_running_trials true: running trials go on to their end; false ` +
          '(default): they are stopped (SIGKILL, no checkpoint). The tuning job is `stopping` until no trial ' +
          'runs, then `cancelled` (statusReason carries the reason); its results stay. Answers the tuning job. ' +
          'A finished tuning job: 400 INVALID_STATE.',
        params: TuneParams,
        body: StopTuneBody,
        response: { 200: Type.Ref('TuningJob'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) =>
      tuning.stop(actorOf(request), request.params.job_id, request.params.tune_id, request.body ?? {}),
  );

  app.post(
    '/v2/training/jobs/:job_id/tune/:tune_id/deploy-best',
    {
      config,
      schema: {
        tags,
        summary: 'Create a training job from the best trial',
        description:
          `${ACCESS} Creates a new training job like the base job with the parameters of use_best_trial (a trial ` +
          'id) or of bestTrial, then override_parameters, then epochs when given; name defaults to "<base name> ' +
          '(best of <tune id>)". Answers 201 with the new job plus sourceTrialId and tuningJobId. No finished ' +
          'trial with a value yet: 400 INVALID_STATE; a use_best_trial that is not a trial of this tuning job: ' +
          '404 TRAINING_JOB_NOT_FOUND. The creation errors of POST /v2/training/jobs apply.',
        params: TuneParams,
        body: DeployBestBody,
        response: { 201: DeployedJob, ...flatErrors(400, 401, 403, 404, 422, 429) },
      },
    },
    async (request, reply) =>
      reply
        .code(201)
        .send(
          await tuning.deployBest(
            actorOf(request),
            request.params.job_id,
            request.params.tune_id,
            request.body ?? {},
          ),
        ),
  );
};
