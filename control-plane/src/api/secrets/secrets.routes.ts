import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { wrappedErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import {
  ClusterParams,
  CreateSecretBody,
  DeletedSecret,
  GetQuery,
  ListQuery,
  Secret,
  SecretList,
  SecretParams,
  UpdateSecretBody,
} from './secrets.schemas.ts';

const tags = ['cluster secrets'];
const SecretRef = Type.Ref('ClusterSecret');

const ACCESS =
  "Metadata needs read on the cluster, changes need write (another account's cluster answers 404 " +
  'CLUSTER_NOT_FOUND). Values are never returned unless asked for: include_value(s)=true needs the ' +
  'elevated permission manage_security (scope security; by default only the owner holds it, others get it ' +
  'through a custom role or a grant) and, when the secret lists allowed_users or allowed_roles, the ' +
  "caller's user id or role among them; otherwise 403 INSUFFICIENT_PERMISSIONS. Each value revealed " +
  'counts in usage_statistics.';

/** /v1/clusters/{cluster_id}/secrets: thin HTTP over the secrets domain (wrapped envelope). */
export const secretRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const secrets = context.secrets;
  app.addSchema(Secret);
  const config = { scope: 'clusters' as const };

  app.get(
    '/v1/clusters/:cluster_id/secrets',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) =>
          (request.query as { include_values?: boolean }).include_values === true ? 'secret reveal' : null,
      },
      schema: {
        tags,
        summary: "The cluster's secrets",
        description:
          `${ACCESS} Filters: type and category match exactly, search is a case-insensitive substring of ` +
          'name or description, or an exact tag. Sorted by name; no pagination. With include_values=true, ' +
          'secrets whose allowed_users/allowed_roles exclude the caller are listed without value.',
        params: ClusterParams,
        querystring: ListQuery,
        response: { 200: Envelope(SecretList), ...wrappedErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) =>
      ok(request, await secrets.list(actorOf(request), request.params.cluster_id, request.query)),
  );

  app.get(
    '/v1/clusters/:cluster_id/secrets/:secret_name',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) =>
          (request.query as { include_value?: boolean }).include_value === true ? 'secret reveal' : null,
      },
      schema: {
        tags,
        summary: 'One secret',
        description: `${ACCESS} 404 SECRET_NOT_FOUND for an unknown name.`,
        params: SecretParams,
        querystring: GetQuery,
        response: { 200: Envelope(SecretRef), ...wrappedErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) =>
      ok(
        request,
        await secrets.get(
          actorOf(request),
          request.params.cluster_id,
          request.params.secret_name,
          request.query.include_value === true,
        ),
      ),
  );

  app.post(
    '/v1/clusters/:cluster_id/secrets',
    {
      config,
      schema: {
        tags,
        summary: 'Create a secret',
        description:
          'Answers 201 with the secret (without its value). The name is unique within the cluster (409 ' +
          'SECRET_ALREADY_EXISTS); two secrets of a cluster cannot share environment_variable or file_path ' +
          '(409 CONFLICT). The secret reaches the container when it next starts: as environment_variable ' +
          '(set at container creation) and/or as a file at file_path with file_mode (written before every ' +
          'start; read_only, the default, clears its write bits). category defaults to null, permissions to ' +
          '{read_only: true, allowed_users: [], allowed_roles: [], file_mode: "0400"}, rotation to disabled. ' +
          'Rotation is tracked, not performed: next_rotation = (last_rotation or created_at) + ' +
          'rotation_interval_days. Needs write on the cluster.',
        params: ClusterParams,
        body: CreateSecretBody,
        response: { 201: Envelope(SecretRef), ...wrappedErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const secret = await secrets.create(actorOf(request), request.params.cluster_id, request.body);
      return reply.code(201).send(ok(request, secret));
    },
  );

  app.put(
    '/v1/clusters/:cluster_id/secrets/:secret_name',
    {
      config,
      schema: {
        tags,
        summary: 'Change a secret',
        description:
          'Any of the fields of create except name; permissions and rotation_policy merge with the current ' +
          'ones, null clears a nullable field (rotation_policy: null disables rotation). A new value is ' +
          'sealed again and counts as a rotation: last_rotation = now and next_rotation = now + ' +
          'rotation_interval_days. The running container keeps the old value until it next starts (the ' +
          'file is rewritten before every start, the variable when the container is created again). ' +
          'Answers the secret without its value. Needs write on the cluster.',
        params: SecretParams,
        body: UpdateSecretBody,
        response: { 200: Envelope(SecretRef), ...wrappedErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) =>
      ok(
        request,
        await secrets.update(
          actorOf(request),
          request.params.cluster_id,
          request.params.secret_name,
          request.body,
        ),
      ),
  );

  app.delete(
    '/v1/clusters/:cluster_id/secrets/:secret_name',
    {
      config,
      schema: {
        tags,
        summary: 'Delete a secret',
        description:
          'Deletes it for good and answers {id, name, deleted: true, deleted_at}. A running container keeps ' +
          'what it was given until it next starts. Needs write on the cluster.',
        params: SecretParams,
        response: { 200: Envelope(DeletedSecret), ...wrappedErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) =>
      ok(
        request,
        await secrets.delete(actorOf(request), request.params.cluster_id, request.params.secret_name),
      ),
  );
};
