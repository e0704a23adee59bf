-- Claims a worker's share of an endpoint's queue in one round trip (endpoints/jobs.ts JobQueue.claim).
-- The worker's row lock orders claimers (replicas); the count of its running jobs is a statement after
-- that lock, so in READ COMMITTED it sees what an earlier claimer committed (a single statement would
-- count from a snapshot taken before the wait); the jobs are taken oldest first, SKIP LOCKED. The
-- statuses come from the caller (endpoints/states.ts stays the one state machine).
CREATE FUNCTION anvil_claim_endpoint_jobs(
  p_worker_id text,
  p_endpoint_id text,
  p_max_concurrency integer,
  p_limit integer,
  p_now timestamptz,
  p_replica_id text,
  p_lease_until timestamptz,
  p_from text[],
  p_to text
) RETURNS SETOF endpoint_jobs
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  free integer;
BEGIN
  PERFORM 1 FROM endpoint_workers WHERE id = p_worker_id AND status = 'ready' FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  SELECT p_max_concurrency - count(*)::integer INTO free
    FROM endpoint_jobs WHERE worker_id = p_worker_id AND status = 'IN_PROGRESS';
  IF p_limit IS NOT NULL THEN
    free := LEAST(free, p_limit);
  END IF;
  IF free <= 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
    WITH next AS (
      SELECT id FROM endpoint_jobs
       WHERE endpoint_id = p_endpoint_id AND status = ANY (p_from) AND expires_at > p_now
       ORDER BY queued_at, id
       LIMIT free
       FOR UPDATE SKIP LOCKED)
    UPDATE endpoint_jobs j
       SET status = p_to, worker_id = p_worker_id, dispatched_by = p_replica_id, lease_until = p_lease_until,
           started_at = p_now, attempts = j.attempts + 1, updated_at = p_now
      FROM next WHERE j.id = next.id
    RETURNING j.*;
END
$$;
