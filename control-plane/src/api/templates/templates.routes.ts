import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { flatErrors, wrappedErrors } from '../../http/error-body.ts';
import { shortTemplateView } from '../../templates/view.ts';
import { actorOf } from '../accounts/common.ts';
import {
  CreateTemplateBody,
  DeletedTemplate,
  ListTemplatesQuery,
  ShortTemplateList,
  Template,
  TemplateList,
  TemplateParams,
  TemplateVersions,
  UpdateTemplateBody,
} from './templates.schemas.ts';

const tags = ['cluster templates'];
const TemplateRef = Type.Ref('ClusterTemplate');

const ACCESS =
  'Visible: the official templates (seeded at start-up, read-only: changing one answers 403 ' +
  "INSUFFICIENT_PERMISSIONS) and the caller's account's own; another account's template id answers " +
  '400 TEMPLATE_NOT_FOUND like an unknown one. `is_public: true` and a non-empty `required_packages` are ' +
  'refused with 400 NOT_SUPPORTED (templates are not shared across accounts; Anvil installs no packages: ' +
  'they belong in docker_image); official templates list the packages their image holds. Anvil has no ' +
  'template ratings, so usage_statistics carries no average_rating and sort_by has no rating. Reading needs read on clusters, changing needs write on clusters (key scope clusters).';

const LIST =
  'Filters match exactly (category, framework, gpu_compatible, official, project_id); search is a ' +
  'case-insensitive substring of name, description or docker_image, or an exact tag. Deprecated templates ' +
  'are left out unless include_deprecated=true. sort_by: name (default, ascending), created_at, usage_count ' +
  '(usage_statistics.total_deployments); ' +
  'sort_order asc|desc (default asc for name, desc otherwise). No pagination: every matching template.';

const VERSIONING =
  'Every successful PUT publishes a new version: `version` when given (MAJOR.MINOR.PATCH, strictly ' +
  'greater than the current one, else 400 VALIDATION_ERROR), otherwise the current version with the patch ' +
  'number raised. `version_notes` describe that version (null when not given). The content of each ' +
  'version is kept: GET /v1/clusters/templates/{template_id}/versions. Clusters already created keep the ' +
  'configuration they were created with.';

/**
 * /v1/clusters/templates (wrapped envelope) and the /v2 short list. Static segments: fastify's router
 * prefers `/v1/clusters/templates` over `/v1/clusters/:cluster_id`, so the two never collide.
 */
export const templateRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const templates = context.templates;
  app.addSchema(Template);
  const config = { scope: 'clusters' as const };

  app.get(
    '/v1/clusters/templates',
    {
      config,
      schema: {
        tags,
        summary: 'Cluster templates available to the account',
        description: `${LIST} ${ACCESS}`,
        querystring: ListTemplatesQuery,
        response: { 200: Envelope(TemplateList), ...wrappedErrors(400, 401, 403, 429) },
      },
    },
    async (request) => ok(request, await templates.list(actorOf(request), request.query)),
  );

  app.get(
    '/v2/clusters/templates',
    {
      config,
      schema: {
        tags,
        summary: 'Cluster templates, short form',
        description: `The same list as /v1 in the short form. ${LIST} ${ACCESS}`,
        querystring: ListTemplatesQuery,
        response: { 200: ShortTemplateList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const list = await templates.list(actorOf(request), request.query);
      return { templates: list.templates.map(shortTemplateView) };
    },
  );

  app.get(
    '/v1/clusters/templates/:template_id',
    {
      config,
      schema: {
        tags,
        summary: 'One cluster template',
        description: ACCESS,
        params: TemplateParams,
        response: { 200: Envelope(TemplateRef), ...wrappedErrors(400, 401, 403, 429) },
      },
    },
    async (request) => ok(request, await templates.get(actorOf(request), request.params.template_id)),
  );

  app.get(
    '/v1/clusters/templates/:template_id/versions',
    {
      config,
      schema: {
        tags,
        summary: "A template's version history, newest first",
        description: `${VERSIONING} ${ACCESS}`,
        params: TemplateParams,
        response: { 200: Envelope(TemplateVersions), ...wrappedErrors(400, 401, 403, 429) },
      },
    },
    async (request) => ok(request, await templates.versions(actorOf(request), request.params.template_id)),
  );

  app.post(
    '/v1/clusters/templates',
    {
      config,
      schema: {
        tags,
        summary: 'Create a cluster template',
        description:
          'name, description, category, docker_image and default_configuration are required. min_resources ' +
          'and max_resources are stored as resource_limits; min may not exceed max and the default ' +
          'configuration must lie within them (400 VALIDATION_ERROR). The first version is `version` ' +
          `(default 1.0.0). ${ACCESS}`,
        body: CreateTemplateBody,
        response: { 201: Envelope(TemplateRef), ...wrappedErrors(400, 401, 403, 409, 429) },
      },
    },
    async (request, reply) => {
      const created = await templates.create(actorOf(request), request.body);
      return reply.code(201).send(ok(request, created));
    },
  );

  app.put(
    '/v1/clusters/templates/:template_id',
    {
      config,
      schema: {
        tags,
        summary: 'Change a template (publishes a new version)',
        description:
          `Fields given change, others stay; is_deprecated marks it deprecated (hidden from lists unless ` +
          `include_deprecated=true, still usable by id). ${VERSIONING} 409 CONFLICT when another update ` +
          `published a version meanwhile. ${ACCESS}`,
        params: TemplateParams,
        body: UpdateTemplateBody,
        response: { 200: Envelope(TemplateRef), ...wrappedErrors(400, 401, 403, 409, 429) },
      },
    },
    async (request) =>
      ok(request, await templates.update(actorOf(request), request.params.template_id, request.body)),
  );

  app.delete(
    '/v1/clusters/templates/:template_id',
    {
      config,
      schema: {
        tags,
        summary: 'Delete a template',
        description:
          'Removes it from lists and from cluster creation (TEMPLATE_NOT_FOUND afterwards); its name may be ' +
          `reused. Clusters created from it keep running with their configuration. ${ACCESS}`,
        params: TemplateParams,
        response: { 200: Envelope(DeletedTemplate), ...wrappedErrors(400, 401, 403, 429) },
      },
    },
    async (request) => ok(request, await templates.delete(actorOf(request), request.params.template_id)),
  );
};
