import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { DeleteOptions, StopOptions } from '../../clusters/operation.ts';
import { filtersApplied, parseListQuery } from '../../clusters/requests.ts';
import { deleteResult, stopResult } from '../../clusters/results.ts';
import { shortView } from '../../clusters/view.ts';
import type { AppContext } from '../../context.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { flatErrors, wrappedErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import {
  Cluster,
  ClusterList,
  ClusterParams,
  ClusterShort,
  CreateClusterBody,
  DeleteBody,
  DeleteResult,
  ListClustersQuery,
  StopBody,
  StopResult,
} from './clusters.schemas.ts';

const tags = ['clusters'];
const ClusterRef = Type.Ref('Cluster');
const ShortRef = Type.Ref('ClusterShort');

const ACCESS =
  "An account sees and changes only its own clusters: another account's cluster id answers 404 " +
  'CLUSTER_NOT_FOUND like an unknown one. Keys need the clusters scope (read for GET, write for the rest); ' +
  "the member's role, grants and shares decide inside the account (403 INSUFFICIENT_PERMISSIONS).";

const CREATE =
  'Designed as RunPod does (the spec does not show it). With template_id, the template supplies the image, ' +
  'env, ports, startup script (as the command) and default sizes; every field of the request wins over the ' +
  "template's (env merged, request keys win; ports united by internal port). Defaults otherwise: gpu_count 1, " +
  'cpu_cores 1, memory_gb 1, storage_gb 10. The scheduler places it at once on the host that fits best ' +
  '(fewest GPUs of the type left free; region = host label; cordoned and unreachable hosts excluded) with ' +
  'concrete GPU indices → status starting, then running when the agent reports the container running. When ' +
  'the capacity exists but is taken, the cluster is created `pending` (status_reason says why) and placed ' +
  'automatically when GPUs free up. Pending clusters queue per GPU type and region, oldest first: a younger ' +
  'request asking for as many GPUs or more never goes ahead of an older pending one; a smaller one may fill ' +
  'gaps it cannot use. The oldest pending cluster of each queue reserves one host: among ready, uncordoned ' +
  'hosts of its region that could fit it, the one whose needed GPUs are expected to free soonest: enough ' +
  'free now counts as now, else the time by which clusters there with expires_at (earliest first) will have ' +
  'freed enough; hosts where that is unknown (clusters without expires_at would have to end) come last, by ' +
  'most free GPUs of its type now (ties: host id); ' +
  'it keeps that host while the host stays ready and big enough. On a reserved host other clusters may take ' +
  'only what the reservation does not need (its GPU count of its type, its CPU, memory and disk stay free), ' +
  'so GPUs freed there wait for it and a large request is not starved by small ones; it is placed as soon as ' +
  'that host or any other fits it. Reservations are stored in the database (they survive restarts and hold ' +
  'on every replica) and count only while their cluster is pending. A stopped or failed cluster started ' +
  'again goes back to the host that holds its volume and only there: while that host is busy it stays ' +
  'pending and reserves that host (over a queue head, which then reserves elsewhere, or a younger restart ' +
  'of that host), so requests arriving later cannot take the GPUs that free there. When no host could ever fit it: 422 ' +
  'INSUFFICIENT_RESOURCES with details {requestedGpuType, availableGpuTypes}. The container gets a volume at ' +
  '/workspace (storage_gb), restart policy "no" (a container that exits puts the cluster in `error` with its ' +
  "exit code; an image that cannot be pulled does too), CPU, memory and PID limits, its account's own " +
  'network, and no port published on the host: ports are reached through the HTTPS proxy, SSH -L and tunnels, ' +
  "and port_mappings.external_port is null unless the host's operator enabled direct ports " +
  '(ANVIL_DIRECT_PORTS_ADDRESS), then it is the port Docker published. storage_gb (volume plus the ' +
  'container\'s files) is measured; over it, a running cluster\'s status_reason says "disk over quota". Billing: hourly_rate = price of gpu_type (operator price ' +
  'table, GET/PUT /v2/admin/gpu-prices) × gpu_count, fixed at placement; a session opens when the cluster ' +
  'is running and closes at stop, delete, expiry or error; total_cost = closed sessions (usage records) + ' +
  'current_session_cost (hourly_rate × hours since the session opened). expires_at: the cluster is deleted ' +
  'automatically at that time (auto-termination; checked from the database, so it survives restarts).';

const IMAGES =
  'Images: docker_image is pulled by the host before every container create, with the credentials of the ' +
  "account's integrations.docker.registries entry whose host matches the image's registry (used while " +
  'integrations.docker.enabled is true; anonymous otherwise), so an image already on the host does not let ' +
  'an account run it. While it is pulled the cluster is `starting` with image_pull {status `pulling`, ' +
  "bytes_done, bytes_total}; a refused or missing image puts the cluster in `error` with the registry's " +
  'reason in status_reason. A snapshot image (anvil-snapshots/<account id>/<cluster id>:<tag>, from stop ' +
  'with save_state or a final snapshot) is usable only by the account that made it (another account gets 403 ' +
  'FORBIDDEN with details.field docker_image); it exists only on the host that made it, so start from it with ' +
  'from_snapshot, which places the cluster there. Images the operator lists as host images on an agent (ANVIL_HOST_IMAGES) run there for ' +
  'every account without a pull. Snapshots: GET /v1/clusters/{id}/snapshots lists them, DELETE ' +
  '/v1/clusters/{id}/snapshots/{snapshot_id} removes one, and from_snapshot starts a cluster from one on the ' +
  'host that holds it. A final snapshot (delete with create_final_snapshot) also keeps /workspace: the ' +
  "volume's files become a layer of the image, and a cluster started from it gets them in its new volume.";

const LIST =
  'Filters: status, gpu_type, region, project_id, template_id (exact), search (case-insensitive substring of ' +
  'name or description, or the exact id), min_gpu_count/max_gpu_count, created_after/created_before (ISO ' +
  '8601, inclusive). sort_by created_at (default), name, status, gpu_count, cost (total_cost); sort_order desc ' +
  '(default) or asc; page (default 1) and limit (default 20, 1-100). include_metrics=true fills each ' +
  "cluster's metrics (null otherwise). Every bad or unknown parameter is reported at once: 400 " +
  'INVALID_PARAMETERS with details {<parameter>: reason}.';

const STOP =
  'Only a running cluster stops (else 400 INVALID_STATE with {current_status, required_status, suggestion}). ' +
  'Billing stops at the moment the stop is accepted (cost_impact). Phases, executed in order and shown in ' +
  "stop_progress and in the cluster's `operation` as they run: notifying_processes (SIGTERM to the " +
  'container; SIGKILL with force), waiting_for_graceful_exit (until the processes exit or ' +
  'grace_period_minutes pass; none with force), creating_snapshot (save_state: `docker commit` of the ' +
  'container to an image on its host, named anvil-snapshots/<account id>/<cluster id>:<snapshot_name>, usable only by this account; snapshot_id is ' +
  'the image id, estimated_size_gb its size), terminating_resources (the container is stopped and ' +
  'removed), cleaning_up (GPUs released; the volume deleted when preserve_data is false), completed → ' +
  'stopped. The volume stays on the host: a later start places the cluster on the same host (pending until ' +
  'its GPUs there are free), as RunPod does. wait_for_completion waits up to timeout_minutes and answers ' +
  '200 with the final state; otherwise 202 at once. timeout_minutes also bounds the waits of each phase. ' +
  "notify_users: ids of members of the cluster's account (anyone else, a removed member or an unknown id: " +
  '400 INVALID_PARAMETERS with details {notify_users, invalid_user_ids}, and nothing changes). When the stop ' +
  'ends, notifications go out: as it completes (outcome `stopped`), or as it fails (outcome `failed`, with a ' +
  'reason: save_state was asked and the snapshot failed, or a delete took over before it completed). Each ' +
  'listed member gets an e-mail when SMTP is configured (ANVIL_SMTP_URL), the member is active and their ' +
  'preferences.emailNotifications is on; the account webhook receives the signed event `cluster.stopped` ' +
  '(data: cluster_id, cluster_name, status, outcome, reason, stop_type, stop_reason, requested_by, ' +
  'stop_initiated_at, completed_at, snapshot, notes, notify_users [{user_id, name, email}]) when ' +
  'notifications.webhook is enabled and lists `cluster.stopped`; the chat webhook gets a message when ' +
  'notifications.slack is enabled with alerts.cluster_events on. The webhook and chat go out for every stop ' +
  '(naming whoever is in notify_users, possibly no one). Every result is kept in `notifications` (here and in ' +
  "the cluster's `operation`): state pending → sending → done, outcome, reason, users [{user_id, name, " +
  'email, status sent|failed|skipped, detail (why skipped, or the error), message_id, at}], webhook and ' +
  'slack {status, detail, delivery_id, at}, sent_at. A failed delivery is recorded, not retried.';

const DELETE =
  'Needs confirm_deletion: "DELETE" (else 400 CONFIRMATION_REQUIRED with {required_field, required_value, ' +
  'cluster_id, cluster_name, warning}). Any status. Billing stops when the delete is accepted ' +
  '(billing_cutoff). Phases, executed in order: stopping_cluster (SIGTERM, up to 30 s for the processes ' +
  'to exit; SIGKILL with force), creating_final_snapshot (create_final_snapshot: docker commit, as for ' +
  'stop), finalizing_billing (the session closed; estimated_final_cost becomes the total of all ' +
  'sessions), cleaning_storage (the volume deleted on the host), cleaning_network (the container and ' +
  'its published ports removed), cleaning_compute (GPUs released; pending clusters may be placed), ' +
  'updating_records (the cluster leaves the resource directory), completed (the cluster is gone: 404 ' +
  'afterwards). Snapshots are images on the host (anvil-snapshots/<account id>/<cluster id>:<tag>, made by stop with ' +
  'save_state and by create_final_snapshot). They are kept by default (preserve_snapshots true, ' +
  'delete_snapshots false). Asking for their removal either way — delete_snapshots true, or ' +
  'preserve_snapshots false — removes the earlier ones in cleaning_storage, through the agent, never ' +
  'forced (an image a container still uses stays); delete_snapshots true wins over the default ' +
  'preserve_snapshots true. The final snapshot made by this same delete is always kept. The outcome is in ' +
  'snapshot_cleanup {requested, done, removed, failed (with error), kept, error}, each image as {image_id, ' +
  "names}. A delete that takes over an unfinished stop sends that stop's notifications (outcome failed; " +
  'see the stop). finalize_billing and cleanup_network_resources are always effectively ' +
  'true: a session is never left open and a container never left behind. wait_for_completion as for stop ' +
  '(timeout_minutes 1-30, default 10).';

/** Body defaults are applied by validation (useDefaults); the domain sees complete options. */
function stopOptions(body: Record<string, unknown>): StopOptions {
  const b = body as Partial<StopOptions> & { snapshot_name?: string; stop_reason?: string };
  return {
    force: b.force ?? false,
    grace_period_minutes: b.grace_period_minutes ?? 5,
    save_state: b.save_state ?? false,
    snapshot_name: b.snapshot_name ?? null,
    preserve_data: b.preserve_data ?? true,
    wait_for_completion: b.wait_for_completion ?? false,
    timeout_minutes: b.timeout_minutes ?? 10,
    stop_reason: b.stop_reason ?? null,
    notify_users: b.notify_users ?? [],
  };
}

function deleteOptions(body: Record<string, unknown>): DeleteOptions {
  const b = body as Partial<DeleteOptions> & { snapshot_name?: string; deletion_reason?: string };
  return {
    force: b.force ?? false,
    create_final_snapshot: b.create_final_snapshot ?? false,
    snapshot_name: b.snapshot_name ?? null,
    preserve_snapshots: b.preserve_snapshots ?? true,
    delete_snapshots: b.delete_snapshots ?? false,
    finalize_billing: b.finalize_billing ?? true,
    cleanup_network_resources: b.cleanup_network_resources ?? true,
    wait_for_completion: b.wait_for_completion ?? false,
    timeout_minutes: b.timeout_minutes ?? 10,
    deletion_reason: b.deletion_reason ?? null,
  };
}

/**
 * Cluster lifecycle: /v1 answers the wrapped envelope ({success, data, meta.request_id}), /v2 the short
 * bare forms (spec: Envelope conventions). Thin: parsing and shaping only; the ClusterService decides.
 */
export const clusterRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const clusters = context.clusters.service;
  app.addSchema(Cluster);
  app.addSchema(ClusterShort);
  const config = { scope: 'clusters' as const };

  for (const version of ['v1', 'v2'] as const) {
    const v1 = version === 'v1';
    const errors = v1 ? wrappedErrors : flatErrors;

    app.post(
      `/${version}/clusters`,
      {
        config,
        schema: {
          tags,
          summary: v1 ? 'Create a GPU cluster' : 'Create a GPU cluster (short form)',
          description: `${CREATE} ${IMAGES} ${ACCESS}`,
          body: CreateClusterBody,
          response: {
            201: v1 ? Envelope(ClusterRef) : ShortRef,
            ...errors(400, 401, 403, 413, 422, 429),
          },
        },
      },
      async (request, reply) => {
        const cluster = await clusters.create(actorOf(request), request.body);
        reply.code(201);
        return v1 ? ok(request, await clusters.view(cluster)) : shortView(cluster);
      },
    );

    app.get(
      `/${version}/clusters`,
      {
        config,
        schema: {
          tags,
          summary: v1
            ? 'List clusters'
            : 'List clusters (short form: a bare array; X-Total-Count has the total)',
          description: `${LIST} ${ACCESS}`,
          querystring: ListClustersQuery,
          response: {
            200: v1 ? Envelope(ClusterList, { response_time_ms: Type.Number() }) : Type.Array(ShortRef),
            ...errors(400, 401, 403, 429),
          },
        },
      },
      async (request, reply) => {
        const started = performance.now();
        const query = parseListQuery(request.query as Record<string, unknown>);
        const { clusters: rows, total } = await clusters.list(actorOf(request), query);
        if (!v1) {
          reply.header('x-total-count', String(total));
          return rows.map(shortView);
        }
        const views = await clusters.views(rows, query.includeMetrics);
        const totalPages = Math.ceil(total / query.limit);
        return ok(
          request,
          {
            clusters: views,
            pagination: {
              current_page: query.page,
              total_pages: totalPages,
              total_count: total,
              per_page: query.limit,
              has_next: query.page < totalPages,
              has_previous: query.page > 1,
            },
            filters_applied: filtersApplied(query),
          },
          { response_time_ms: Math.round((performance.now() - started) * 100) / 100 },
        );
      },
    );

    app.get(
      `/${version}/clusters/:cluster_id`,
      {
        config,
        schema: {
          tags,
          summary: v1 ? 'Get a cluster' : 'Get a cluster (short form)',
          description: `The cluster with its cost so far, port mappings, proxy URL, SSH connection and metrics (null where not available). The operation field shows the stop or delete in progress (or the last one) with the phase being executed. ${ACCESS}`,
          params: ClusterParams,
          response: { 200: v1 ? Envelope(ClusterRef) : ShortRef, ...errors(401, 403, 404, 429) },
        },
      },
      async (request) => {
        const cluster = await clusters.get(actorOf(request), request.params.cluster_id);
        return v1 ? ok(request, await clusters.view(cluster)) : shortView(cluster);
      },
    );

    app.post(
      `/${version}/clusters/:cluster_id/start`,
      {
        config,
        schema: {
          tags,
          summary: v1 ? 'Start a stopped cluster' : 'Start a stopped cluster (short form)',
          description:
            'stopped or error → pending → starting → running. The cluster is placed again on the host that holds ' +
            'its volume, with the GPUs free there now (their indices may differ); it stays pending until they ' +
            'are. Starting a cluster that is already pending, starting or running answers it as it is; stopping ' +
            `and deleting clusters answer 400 INVALID_STATE. ${ACCESS}`,
          params: ClusterParams,
          response: { 200: v1 ? Envelope(ClusterRef) : ShortRef, ...errors(400, 401, 403, 404, 429) },
        },
      },
      async (request) => {
        const cluster = await clusters.start(actorOf(request), request.params.cluster_id);
        return v1 ? ok(request, await clusters.view(cluster)) : shortView(cluster);
      },
    );

    app.post(
      `/${version}/clusters/:cluster_id/stop`,
      {
        config,
        schema: {
          tags,
          summary: 'Stop a running cluster',
          description: `${STOP} ${ACCESS}`,
          params: ClusterParams,
          body: StopBody,
          response: {
            200: v1 ? Envelope(StopResult) : StopResult,
            202: v1 ? Envelope(StopResult) : StopResult,
            ...errors(400, 401, 403, 404, 429),
          },
        },
      },
      async (request, reply) => {
        const options = stopOptions(request.body);
        const id = request.params.cluster_id;
        let cluster = await clusters.stop(actorOf(request), id, options);
        if (options.wait_for_completion)
          cluster = await clusters.waitForOperation(id, options.timeout_minutes * 60_000);
        const data = stopResult(cluster);
        reply.code(cluster.status === 'stopping' ? 202 : 200);
        return v1 ? ok(request, data, { wait_for_completion: options.wait_for_completion }) : data;
      },
    );

    app.delete(
      `/${version}/clusters/:cluster_id`,
      {
        config,
        schema: {
          tags,
          summary: 'Delete a cluster',
          description: `${DELETE} ${ACCESS}`,
          params: ClusterParams,
          body: DeleteBody,
          response: {
            200: v1 ? Envelope(DeleteResult, { wait_for_completion: Type.Boolean() }) : DeleteResult,
            202: v1 ? Envelope(DeleteResult, { wait_for_completion: Type.Boolean() }) : DeleteResult,
            ...errors(400, 401, 403, 404, 429),
          },
        },
      },
      async (request, reply) => {
        const options = deleteOptions(request.body);
        const id = request.params.cluster_id;
        let cluster = await clusters.delete(actorOf(request), id, options, request.body.confirm_deletion);
        if (options.wait_for_completion)
          cluster = await clusters.waitForOperation(id, options.timeout_minutes * 60_000);
        const data = deleteResult(cluster);
        reply.code(cluster.status === 'deleting' ? 202 : 200);
        return v1 ? ok(request, data, { wait_for_completion: options.wait_for_completion }) : data;
      },
    );
  }
};
