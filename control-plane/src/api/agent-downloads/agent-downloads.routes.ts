import { createReadStream } from 'node:fs';
import { AGENT_DOWNLOAD_PATH, TUNNEL_HEADERS } from '@anvil/shared/protocol';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { AppContext } from '../../context.ts';

/** Statuses of a training job whose workers are placed, or about to be: their hosts may fetch its dataset. */
const PLACED = ['pending', 'running', 'stopping'];

/**
 * What agents fetch for their workloads (WorkloadDownload), outside the API: no API key, the host
 * credential instead (`authorization: Bearer`, and the host id header the tunnels use), and only what a
 * workload placed on that host needs. Refusals are bare statuses, as on the tunnel path: 401 for a
 * wrong credential, 404 for anything the host may not have (its existence is not told).
 */
export const agentDownloadRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const refuse = (reply: FastifyReply, status: 401 | 404) => reply.code(status).send();

  app.get<{ Params: { datasetId: string; versionId: string } }>(
    `${AGENT_DOWNLOAD_PATH}/datasets/:datasetId/versions/:versionId`,
    { config: { public: true }, schema: { hide: true } },
    async (request, reply) => {
      const hostId = request.headers[TUNNEL_HEADERS.hostId];
      const credential = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1];
      if (typeof hostId !== 'string' || !credential) return refuse(reply, 401);
      const auth = await context.fleet.hosts.authenticate(hostId, credential);
      if (!auth.ok) return refuse(reply, 401);
      const { datasetId, versionId } = request.params;
      const [placed] = await context.db.sql.query<{ size_bytes: string; checksum: string }>(
        `SELECT v.size_bytes::text AS size_bytes, v.checksum
           FROM dataset_versions v
           JOIN training_jobs j ON j.dataset_id = v.dataset_id
          WHERE v.id = $1 AND v.dataset_id = $2
            AND j.status = ANY($3::text[])
            AND j.placement @> jsonb_build_array(jsonb_build_object('hostId', $4::text))
          LIMIT 1`,
        [versionId, datasetId, PLACED, hostId],
      );
      if (!placed) return refuse(reply, 404);
      const path = context.datasets.storage.versionPath(datasetId, versionId);
      request.log.info(
        { hostId, datasetId, versionId, bytes: Number(placed.size_bytes) },
        'dataset download',
      );
      return reply
        .type('application/octet-stream')
        .header('content-length', placed.size_bytes)
        .header('x-content-sha256', placed.checksum)
        .send(createReadStream(path));
    },
  );
};
