import {
  couldFitSql,
  type PlacementVariant,
  pickSql,
  TAKE_CAPACITY_CTES,
} from '../scheduler/placement-sql.ts';

/**
 * The create statement: a new cluster registered, inserted and placed in one statement, so one round trip
 * and one commit (its own transaction) per create. It picks a host by the rules of the placement statement
 * (scheduler/placement-sql.ts: the same `pick`, skipping hosts another placement holds at this moment unless
 * the variant waits) and then, in the same snapshot and under the picked rows' locks:
 * - registers the cluster in the resource directory and records its creation for activity reports, as
 *   ResourceDirectory.register does (the caller has checked the role's maxClusters: ResourceDirectory.admit);
 * - inserts the cluster, `starting` on the picked host with its GPU indices, or `pending` (with the status
 *   reason $23) when no host has room now but one could ever fit it;
 * - takes the capacity (TAKE_CAPACITY_CTES), bumps the host's desired generation and inserts the cluster's
 *   workload with the spec $22 whose `gpus` are the picked GPUs with their UUIDs (contract 1: the workload
 *   has the cluster's id), so the agent is told after commit, by whoever pushes the host's desired set.
 * Nothing at all is written when no host could ever fit it (impossible), nor, when $24 requires a placement
 * (a cluster from a snapshot, which lives on one host), when it was not placed: then there is nothing to
 * undo. Data-modifying CTEs see one snapshot, so every row comes from `pick` and the parameters.
 *
 * Parameters: $1..$9 as the placement statement's (cluster id, GPU type, GPU count, CPU cores, memory GB,
 * storage GB, region, pinned host, now); $10 account id, $11 owner (member) id, $12 name, $13 description,
 * $14 project id, $15 template id, $16 docker image, $17 command, $18 env (JSON), $19 ports (JSON),
 * $20 ssh enabled, $21 expires at, $22 the workload spec (JSON, `gpus` filled here), $23 the status reason
 * when pending, $24 whether only a placement may be written, $25 the region the cluster asked for (a
 * cluster pinned to a host places with $7 null), else it gets its host's.
 *
 * Returns one row: `could_fit` (null when placed), the inserted cluster's columns that the placement decided
 * (all null when nothing was written; the rest are the parameters), and `gpu_uuids` in the order of its GPU
 * indices.
 */
function createSql(variant: PlacementVariant): string {
  return `
WITH pick AS MATERIALIZED (${pickSql(variant, { guard: 'true', createdAt: '$9::timestamptz', fifoFrom: '' })}
), verdict AS MATERIALIZED (
  SELECT EXISTS (SELECT 1 FROM pick) AS placed,
         CASE WHEN NOT EXISTS (SELECT 1 FROM pick) THEN ${couldFitSql(variant)} END AS could_fit
), admitted AS MATERIALIZED (
  SELECT p.host_id, p.idx, p.region AS host_region, p.gpu_indices, p.gpu_uuids
    FROM verdict v LEFT JOIN pick p ON true
   WHERE v.placed OR (v.could_fit AND NOT $24::boolean)
), gpus AS MATERIALIZED (
  SELECT jsonb_agg(jsonb_build_object('index', s.i, 'uuid', s.uuid) ORDER BY s.n) AS list,
         array_agg(s.uuid ORDER BY s.n) AS uuids
    FROM (SELECT i.x AS i, i.n, COALESCE(a.gpu_uuids[array_position(a.gpu_indices, i.x)], 'GPU-index-' || i.x) AS uuid
            FROM admitted a CROSS JOIN LATERAL unnest(a.idx) WITH ORDINALITY AS i(x, n)) AS s
), registered AS (
  INSERT INTO resources (id, account_id, type, name, owner_id, created_at)
  SELECT $1::text, $10::text, 'cluster', $12::text, $11::text, $9::timestamptz FROM admitted
), recorded AS (
  INSERT INTO activity_events (account_id, user_id, kind, resource_type, resource_id, created_at)
  SELECT $10::text, $11::text, 'resource_created', 'cluster', $1::text, $9::timestamptz FROM admitted
), inserted AS (
  INSERT INTO clusters (id, account_id, owner_id, name, description, status, status_reason, gpu_type, gpu_count,
                        cpu_cores, memory_gb, storage_gb, region, project_id, template_id, docker_image, command,
                        env, ports, ssh_enabled, expires_at, host_id, gpu_indices, hourly_rate, created_at, updated_at)
  SELECT $1::text, $10::text, $11::text, $12::text, $13::text,
         CASE WHEN a.host_id IS NULL THEN 'pending' ELSE 'starting' END,
         CASE WHEN a.host_id IS NULL THEN $23::text END,
         $2::text, $3::int, $4::int, $5::int, $6::int, COALESCE($25::text, a.host_region), $14::text, $15::text,
         $16::text, $17::text[], $18::jsonb, $19::jsonb, $20::boolean, $21::timestamptz,
         a.host_id, COALESCE(a.idx, '{}'),
         CASE WHEN a.host_id IS NULL THEN 0
              ELSE COALESCE((SELECT g.hourly_rate FROM gpu_prices g WHERE g.gpu_type = $2::text), 0) * $3::int END,
         $9::timestamptz, $9::timestamptz
    FROM admitted a
  RETURNING *
), placed AS (
  SELECT host_id, cpu_cores, memory_gb, storage_gb FROM inserted WHERE host_id IS NOT NULL
), ${TAKE_CAPACITY_CTES}, bumped AS (
  UPDATE hosts h SET desired_generation = h.desired_generation + 1, updated_at = $9::timestamptz
    FROM placed p
   WHERE h.id = p.host_id
  RETURNING h.id, h.desired_generation
), workload AS (
  INSERT INTO workloads (id, host_id, kind, owner_account_id, spec, desired, generation, created_at, updated_at)
  SELECT $1::text, b.id, 'cluster', $10::text, jsonb_set($22::jsonb, '{gpus}', g.list), 'running',
         b.desired_generation, $9::timestamptz, $9::timestamptz
    FROM bumped b CROSS JOIN gpus g
)
SELECT v.could_fit, g.uuids AS gpu_uuids, k.id, k.status, k.status_reason, k.region, k.host_id, k.gpu_indices,
       k.hourly_rate
  FROM verdict v
  LEFT JOIN inserted k ON true
  LEFT JOIN gpus g ON true`;
}

/** The create statement of a variant (see placementStatement), with its prepared-statement name. */
export function createStatement(variant: PlacementVariant): { name: string; text: string } {
  return STATEMENTS[(variant.waitForLocks ? 4 : 0) + (variant.region ? 2 : 0) + (variant.pinned ? 1 : 0)]!;
}

const STATEMENTS = Array.from({ length: 8 }, (_, key) => {
  const variant = { waitForLocks: (key & 4) !== 0, region: (key & 2) !== 0, pinned: (key & 1) !== 0 };
  const name = `anvil_create_${variant.waitForLocks ? 'wait' : 'skip'}${variant.region ? '_region' : ''}${variant.pinned ? '_pinned' : ''}`;
  return { name, text: createSql(variant) };
});
