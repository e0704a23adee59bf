import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { wrappedErrors } from '../../http/error-body.ts';
import { actorOf, Nullable } from '../accounts/common.ts';
import { ClusterParams } from './clusters.schemas.ts';

const tags = ['clusters'];

const Snapshot = Type.Object({
  id: Type.String({
    description: 'Image id (sha256:…), as snapshot_creation.snapshot_id of the stop gave it',
  }),
  name: Type.String({
    description:
      'anvil-snapshots/<account id>/<cluster id>:<tag>: pass it as from_snapshot (or docker_image) to create a cluster from it',
  }),
  names: Type.Array(Type.String(), { description: 'Every tag of the image in the cluster repository' }),
  size_bytes: Nullable(Type.Integer()),
  estimated_size_gb: Nullable(Type.Number()),
  created_at: Type.String({ format: 'date-time' }),
  host_id: Type.String({ description: 'The host holding the image: a cluster from it is placed there' }),
});

const ACCESS =
  'Snapshots are the images `docker commit` made of the cluster (stop with save_state, delete with ' +
  'create_final_snapshot), kept on its host and named per account; only the account that made them sees or ' +
  'uses them. They are read from the host each time (so a list is never stale): a host that is not ' +
  'connected answers 409 HOST_NOT_CONNECTED. Key scope clusters (read to list, write to delete); another ' +
  "account's cluster is 404 CLUSTER_NOT_FOUND.";

/** GET/DELETE /v1/clusters/{id}/snapshots: thin; ClusterSnapshots decides. */
export const clusterSnapshotRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const snapshots = context.clusters.snapshots;
  const config = { scope: 'clusters' as const };

  app.get(
    '/v1/clusters/:cluster_id/snapshots',
    {
      config,
      schema: {
        tags,
        summary: "List a cluster's snapshots",
        description: `Oldest first (created_at, then id). A cluster never placed has none. ${ACCESS}`,
        params: ClusterParams,
        response: {
          200: Envelope(Type.Object({ snapshots: Type.Array(Snapshot) })),
          ...wrappedErrors(401, 403, 404, 409, 429, 502, 504),
        },
      },
    },
    async (request) =>
      ok(request, { snapshots: await snapshots.list(actorOf(request), request.params.cluster_id) }),
  );

  app.delete(
    '/v1/clusters/:cluster_id/snapshots/:snapshot_id',
    {
      config,
      schema: {
        tags,
        summary: 'Delete a snapshot',
        description:
          'The agent untags and removes the image from the host (never forced). 404 SNAPSHOT_NOT_FOUND when ' +
          'the cluster has no snapshot with that id; 409 CONFLICT when a container still runs from it ' +
          `(delete or stop that cluster first). Answers the deleted snapshot. ${ACCESS}`,
        params: Type.Object({
          ...ClusterParams.properties,
          snapshot_id: Type.String({ minLength: 1, maxLength: 200, description: 'sha256:<hex>' }),
        }),
        response: {
          200: Envelope(Snapshot),
          ...wrappedErrors(401, 403, 404, 409, 429, 502, 504),
        },
      },
    },
    async (request) =>
      ok(
        request,
        await snapshots.remove(actorOf(request), request.params.cluster_id, request.params.snapshot_id),
      ),
  );
};
