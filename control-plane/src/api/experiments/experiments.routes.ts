import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import { ACCESS, COMPARE, EXPORT, LIFECYCLE, LIMITS, RUNS, STATISTICS } from './experiments.docs.ts';
import {
  AddRunBody,
  ArchiveBody,
  ArchiveResult,
  CloneBody,
  CompareBody,
  Comparison,
  CreateExperimentBody,
  Experiment,
  ExperimentList,
  ExperimentParams,
  ExperimentSummary,
  ExportBody,
  ListQuery,
  Run,
  UpdateExperimentBody,
} from './experiments.schemas.ts';

const tags = ['training experiments'];
const BASE = '/v2/training/experiments';

/** /v2/training/experiments: thin HTTP over the experiments domain (flat errors, bare bodies). */
export const experimentRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const experiments = context.experiments;
  app.addSchema(Run);
  app.addSchema(ExperimentSummary);
  app.addSchema(Experiment);
  const config = { scope: 'training' as const };
  const one = Type.Ref('Experiment');

  app.post(
    BASE,
    {
      config,
      schema: {
        tags,
        summary: 'Create an experiment',
        description:
          `${ACCESS} name (1-100 characters, not blank) and description required; hypothesis, tags, metadata, ` +
          'baseline {type, name, metrics {<metric>: number}} optional; primaryMetric (default loss) is the ' +
          'metric statistics, best_run and insights rank runs by. Answers 201 with the experiment (status ' +
          `active, no runs). ${LIFECYCLE}`,
        body: CreateExperimentBody,
        response: { 201: one, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(await experiments.create(actorOf(request), request.body)),
  );

  app.get(
    BASE,
    {
      config,
      schema: {
        tags,
        summary: "The account's experiments",
        description:
          `${ACCESS} status matches exactly; tags is a comma list and an experiment matches when it carries ` +
          'every listed tag. sort: created_at (default), updated_at, name; order desc by default; ties broken ' +
          'by id. Items are summaries with runCount (GET one experiment for runs, statistics and insights). ' +
          'pagination.total counts every match; hasMore = offset + returned < total.',
        querystring: ListQuery,
        response: { 200: ExperimentList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => experiments.list(actorOf(request), request.query),
  );

  app.get(
    `${BASE}/:experiment_id`,
    {
      config,
      schema: {
        tags,
        summary: 'One experiment with its runs, statistics and insights',
        description: `${ACCESS} Runs in the order they were added. ${RUNS} ${STATISTICS}`,
        params: ExperimentParams,
        response: { 200: one, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => experiments.get(actorOf(request), request.params.experiment_id),
  );

  app.patch(
    `${BASE}/:experiment_id`,
    {
      config,
      schema: {
        tags,
        summary: 'Change name, description, status, conclusion, tags or metadata',
        description:
          `${ACCESS} Each given field replaces the stored one (tags and metadata as a whole; conclusion null ` +
          'clears it); primaryMetric may change too; at least one field. Answers the experiment as GET ' +
          `does. ${LIFECYCLE}`,
        params: ExperimentParams,
        body: UpdateExperimentBody,
        response: { 200: one, ...flatErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) => experiments.update(actorOf(request), request.params.experiment_id, request.body),
  );

  app.post(
    `${BASE}/:experiment_id/runs`,
    {
      config,
      schema: {
        tags,
        summary: 'Add a training job to the experiment as a run',
        description:
          `${ACCESS} trainingJobId: a training job of the account (else 404 TRAINING_JOB_NOT_FOUND); name ` +
          "defaults to the job's; parameters may add names the job's hyperparameters lack, a different value " +
          'for a name the job has answers 400 VALIDATION_ERROR {field: parameters.<name>, given, jobValue}. ' +
          'A job is a run of one experiment only: linking it again, here or elsewhere, answers 409 ' +
          'RUN_ALREADY_EXISTS {trainingJobId, existingExperimentId, existingRunId} (enforced by a unique ' +
          'index, so concurrent links cannot both pass); copies made by clone with copy_runs share the job ' +
          `and do not count. Archived experiment: 409 EXPERIMENT_ARCHIVED. ${LIMITS} Answers 201 with the ` +
          `run. ${RUNS}`,
        params: ExperimentParams,
        body: AddRunBody,
        response: { 201: Type.Ref('ExperimentRun'), ...flatErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) =>
      reply
        .code(201)
        .send(await experiments.addRun(actorOf(request), request.params.experiment_id, request.body)),
  );

  app.post(
    `${BASE}/:experiment_id/compare`,
    {
      config,
      schema: {
        tags,
        summary: 'Compare runs: rankings, statistical tests, correlations, Pareto frontier',
        description: `${ACCESS} ${COMPARE}`,
        params: ExperimentParams,
        body: CompareBody,
        response: { 200: Comparison, ...flatErrors(400, 401, 403, 404, 422, 429) },
      },
    },
    async (request) => experiments.compare(actorOf(request), request.params.experiment_id, request.body),
  );

  app.post(
    `${BASE}/:experiment_id/archive`,
    {
      config,
      schema: {
        tags,
        summary: 'Archive the experiment',
        description:
          `${ACCESS} Sets status archived with archivedAt, reason and preserve_artifacts (default true). ` +
          'Runs and their training jobs stay; preserve_artifacts false drops the artifact references from ' +
          "the experiment's runs and exports for good — the checkpoints themselves belong to the training " +
          'jobs and are not deleted by an experiment. Archiving an archived experiment changes nothing and ' +
          `answers its archive (alreadyArchived true), so a retried call is harmless. ${LIFECYCLE}`,
        params: ExperimentParams,
        body: ArchiveBody,
        response: { 200: ArchiveResult, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => experiments.archive(actorOf(request), request.params.experiment_id, request.body),
  );

  app.post(
    `${BASE}/:experiment_id/clone`,
    {
      config,
      schema: {
        tags,
        summary: 'Clone the experiment',
        description:
          `${ACCESS} A new active experiment (clonedFrom = the source) with the source's description, ` +
          'hypothesis, tags, metadata, baseline and primaryMetric; name defaults to "<name> (copy)" (cut to ' +
          '100 characters). modifications overrides them: hypothesis, tags, baseline (null clears) and ' +
          'primaryMetric replace, metadata is merged key by key over the source metadata. copy_runs (default ' +
          'false) copies every run (name, parameters, tags, notes; copiedFromRunId set) pointing at the same ' +
          'training jobs, so the copies show the same live figures. Any experiment can be cloned, archived ' +
          'ones included. Answers 201 with the new experiment as GET shows it.',
        params: ExperimentParams,
        body: CloneBody,
        response: { 201: one, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request, reply) =>
      reply
        .code(201)
        .send(await experiments.clone(actorOf(request), request.params.experiment_id, request.body)),
  );

  app.post(
    `${BASE}/:experiment_id/export`,
    {
      config,
      schema: {
        tags,
        summary: "Export the experiment's runs as CSV",
        description: `${ACCESS} ${EXPORT} ${RUNS}`,
        params: ExperimentParams,
        body: ExportBody,
        response: {
          200: { content: { 'text/csv': { schema: Type.String() } } },
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const result = await experiments.export(actorOf(request), request.params.experiment_id, request.body);
      return reply
        .header('content-type', 'text/csv; charset=utf-8')
        .header('content-disposition', `attachment; filename="${result.filename}"`)
        .send(result.csv);
    },
  );
};
