-- Overdue jobs, computed by the database alone (issue 22,
-- docs/occurrences-overdue.md): what `studioctl jobs overdue`, doctor's
-- overdue_jobs, the replicas' studio_job_overdue_seconds and a monitor
-- that has only database access all read, so that a job that nobody runs
-- is seen when every replica is dead.
--
-- studio_overdue_jobs(p_grace) is an interface:
--
--   SELECT job_id, scope_key, due_at, overdue_seconds
--   FROM studio_overdue_jobs(interval '1 minute');
--
-- one row per job and scope key (the occurrence scope: '' for an
-- installation job, the replica id for an instance job, the cluster for a
-- per-cluster duty) whose next due time plus p_grace has passed with no
-- run started; due_at is that due time, overdue_seconds is now() - due_at
-- (so always more than the grace). Ordered by job_id, scope_key. STABLE:
-- it reads the tables and writes nothing.
--
-- Which rows it reads:
--   - declared: a status row (studio_job_status) of a replica whose
--     studio_replica row has a heartbeat within the last 7 days (and not
--     more than 5 s ahead of now(), as liveness.FutureTolerance). A job
--     stays watched after every replica stopped, cleanly or not, until no
--     replica that declares it has been up for 7 days. A replica that
--     starts again without the job in its configuration removes its row
--     (RetireUndeclared); `studioctl replicas forget` removes the replica
--     row, and so its declarations; so does `jobs forget`. Housekeeping
--     of a live replica drops a replica gone for 24 h with its rows
--     (jobstore.ForgetStoppedAfter), which ends the watch of what only it
--     declared sooner;
--   - paused: a job whose setting (studio_job_setting) is paused is not
--     overdue, whatever the status rows say;
--   - instance jobs (scope key: the replica id) of a replica that crashed
--     (not live, state not 'stopped') are watched; those of a replica that
--     stopped cleanly only while no replica at all is live (a clean stop
--     with others live is a scale-down; with none live, the dead man's
--     switch covers everything);
--   - per-cluster duties (job@cluster rows; scope key: the cluster) only
--     while the cluster is in cluster_lease (`leases remove` ends the
--     watch);
--   - expectations: a row's next_fire_at is the latest time by which its
--     replica expects the next run to start (NULL: none). For each job and
--     scope key the rows of live replicas with an expectation are used
--     when there are any; otherwise every declared row's (the most recent
--     knowledge of replicas now dead or stopped);
--   - a row's expectation is met by any run of the job in the scope
--     (studio_job_run: installation runs anywhere, an instance job's runs
--     on that replica, a duty's runs for that cluster) that started after
--     the row's own last start (last_started_at): a later run, on time or
--     late, made the row's knowledge stale, and the replica that ran it
--     has a row of its own with the next expectation. A stale next_fire_at
--     of a replica long dead, and the fallback timer of a replica that
--     lost the lock, are therefore met by the runs of the others.
-- A job's row is overdue when one of its expectations is not met and its
-- next_fire_at plus p_grace is before now(); due_at is the earliest such.
--
-- Cost: one pass over studio_job_status joined to studio_replica, and an
-- index probe of studio_job_run (job_id, started_at) per late row only;
-- 100-300 ms at 10,000 jobs on 3 replicas (30,000 status rows) on a
-- 2-core machine at load 11, none or 300 of them late
-- (docs/occurrences-overdue.md). Replicas call it every 15 s.
--
-- Runs of Java nodes (ShedLock alone) are not in studio_job_run: a job
-- that only Java nodes run while every replica is down is listed.
--
-- Also: the `occurrence` event of 00010 was refused by studio_event's
-- check of event kinds (it named the kinds of 00006); the check now names
-- it. Written so that it holds whether or not 00010 made the same change.

-- +goose Up
SET LOCAL lock_timeout = '5s';


-- +goose StatementBegin
CREATE FUNCTION studio_overdue_jobs(p_grace interval DEFAULT interval '1 minute')
RETURNS TABLE (job_id text, scope_key text, due_at timestamptz, overdue_seconds double precision)
LANGUAGE sql STABLE AS $$
WITH anylive AS (
    SELECT EXISTS (
        SELECT 1 FROM studio_replica r
        WHERE r.state <> 'stopped' AND r.heartbeat_at > now() - interval '15 seconds'
          AND r.heartbeat_at <= now() + interval '5 seconds') AS v
),
declared AS (
    SELECT CASE WHEN d.at > 0 THEN left(s.job_id, d.at - 1) ELSE s.job_id END AS job_id,
           CASE WHEN d.at > 0 THEN 'duty' WHEN s.scope = 'instance' THEN 'instance' ELSE 'installation' END AS kind,
           CASE WHEN d.at > 0 THEN substr(s.job_id, d.at + 1)
                WHEN s.scope = 'instance' THEN s.replica_id ELSE '' END AS scope_key,
           s.next_fire_at, s.last_started_at,
           (r.state <> 'stopped' AND r.heartbeat_at > now() - interval '15 seconds'
             AND r.heartbeat_at <= now() + interval '5 seconds') AS live,
           r.state
    FROM studio_job_status s
    JOIN studio_replica r ON r.id = s.replica_id
    CROSS JOIN LATERAL (SELECT strpos(s.job_id, '@') AS at) d
    WHERE r.heartbeat_at > now() - interval '7 days'
      AND r.heartbeat_at <= now() + interval '5 seconds'
      AND s.next_fire_at IS NOT NULL
),
-- The units (job, scope key) for which a live replica has an
-- expectation: only its rows count there.
live_units AS (
    SELECT DISTINCT d.kind, d.job_id, d.scope_key FROM declared d WHERE d.live
),
-- The expectations whose time and grace have passed (few, normally).
late AS (
    SELECT d.* FROM declared d, anylive
    WHERE d.next_fire_at + p_grace < now()
      AND NOT EXISTS (SELECT 1 FROM studio_job_setting g WHERE g.job_id = d.job_id AND g.paused)
      AND (d.kind <> 'duty' OR EXISTS (SELECT 1 FROM cluster_lease l WHERE l.cluster = d.scope_key))
      AND (d.kind <> 'instance' OR d.live OR NOT EXISTS (
          SELECT 1 FROM declared o WHERE o.kind = 'instance' AND o.job_id = d.job_id AND o.live))
      AND (d.live OR NOT EXISTS (
          SELECT 1 FROM live_units u WHERE u.kind = d.kind AND u.job_id = d.job_id AND u.scope_key = d.scope_key))
),
unmet AS (
    SELECT e.job_id, e.scope_key, e.next_fire_at FROM late e
    WHERE NOT EXISTS (
          SELECT 1 FROM studio_job_run x
          WHERE x.job_id = e.job_id
            AND x.started_at > coalesce(e.last_started_at, '-infinity'::timestamptz)
            AND CASE e.kind
                  WHEN 'duty' THEN x.cluster = e.scope_key
                  WHEN 'instance' THEN x.replica_id = e.scope_key AND x.cluster IS NULL
                  ELSE x.cluster IS NULL
                END)
)
SELECT u.job_id, u.scope_key, min(u.next_fire_at),
       extract(epoch FROM now() - min(u.next_fire_at))::double precision
FROM unmet u
GROUP BY u.job_id, u.scope_key
ORDER BY u.job_id, u.scope_key
$$;
-- +goose StatementEnd

-- Callers find the tables whatever their search_path (a monitor's session
-- may not name the studio schema); pg_temp last, as in 00006. Invoker's
-- rights: the caller needs SELECT on what it reads (docs/roles.sql grants
-- it to the inspector and the replica), so EXECUTE stays granted to
-- PUBLIC, as for any function: it shows no caller more than its own
-- SELECTs do.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_overdue_jobs(interval) SET search_path = %I, pg_temp', current_schema());
    -- The planner's estimate at thousands of jobs passes jit_above_cost,
    -- and compiling took seconds on a loaded machine where the query takes
    -- a tenth of that (as housekeeping's noJIT).
    ALTER FUNCTION studio_overdue_jobs(interval) SET jit = off;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION studio_overdue_jobs(interval);
