-- Pause with a reason and an end (issue 24, part 6; docs/schedules.md,
-- "Pause with a reason and an end").
--
-- 1. studio_job_setting gains paused_by, paused_reason and paused_until
--    (NULL: none; paused_until NULL is a pause without an end, as every
--    pause before this migration). Older replicas read the columns they
--    know (job_id, schedule, paused, updated_at, updated_by) and see the
--    job paused until a replica of this version, or an operator, writes
--    the resume; they do not know the end.
-- 2. A setting that is not paused has none of the three: a trigger clears
--    them on every write that leaves paused false, so a resume by an
--    older studioctl, or by hand, cannot leave a stale end that a later
--    pause would inherit.
-- 3. studio_end_pauses(p_actor): the resume of every pause whose end has
--    passed (paused_until <= now()), in one statement: the conditional
--    UPDATE and one jobs.resume audit row per job it resumed, with
--    reason 'its pause ended' and the pause it ended in the detail. Of
--    replicas that call it at once, the first resumes and writes the
--    audit row; the others wait for its row lock, find the row no longer
--    paused, and write nothing. A pause changed meanwhile (a new end) is
--    read as changed, for the same reason. It runs as its owner (SECURITY
--    DEFINER): the replica role needs no UPDATE on the settings nor INSERT
--    on the audit; EXECUTE is revoked from PUBLIC and docs/roles.sql
--    grants it to studio_replica.
-- 4. studio_overdue_jobs keeps its signature and columns (an interface);
--    a pause whose end passed counts as over, written or not (every
--    replica may have been down at the end), and such a job's due time is
--    then at the earliest the pause's end.

-- +goose Up
SET LOCAL lock_timeout = '5s';

ALTER TABLE studio_job_setting
    ADD COLUMN paused_by text NULL,
    ADD COLUMN paused_reason text NULL,
    ADD COLUMN paused_until timestamptz NULL;

-- +goose StatementBegin
CREATE FUNCTION studio_job_setting_pause_columns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT NEW.paused THEN
        NEW.paused_by := NULL;
        NEW.paused_reason := NULL;
        NEW.paused_until := NULL;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER studio_job_setting_pause_columns BEFORE INSERT OR UPDATE ON studio_job_setting
    FOR EACH ROW EXECUTE FUNCTION studio_job_setting_pause_columns();

-- +goose StatementBegin
CREATE FUNCTION studio_end_pauses(p_actor text)
RETURNS TABLE (job_id text, paused_until timestamptz)
LANGUAGE sql VOLATILE SECURITY DEFINER AS $$
WITH ended AS (
    UPDATE studio_job_setting g SET paused = false, updated_at = now(), updated_by = p_actor
    FROM studio_job_setting o
    WHERE o.job_id = g.job_id AND g.paused AND g.paused_until <= now()
    RETURNING g.job_id, o.paused_until, o.paused_by, o.paused_reason, coalesce(g.schedule, '') AS schedule
),
audited AS (
    INSERT INTO studio_audit (at, actor, action, target, reason, detail)
    SELECT now(), p_actor, 'jobs.resume', e.job_id, 'its pause ended',
           jsonb_build_object('pause_ended', true, 'paused_before', true, 'paused_after', false,
                              'schedule_before', e.schedule, 'schedule_after', e.schedule,
                              'paused_until_before', e.paused_until, 'paused_by_before', e.paused_by,
                              'paused_reason_before', e.paused_reason)
    FROM ended e
    RETURNING target
)
SELECT e.job_id, e.paused_until FROM ended e JOIN audited a ON a.target = e.job_id
ORDER BY e.job_id
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION studio_end_pauses(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_overdue_jobs(p_grace interval DEFAULT interval '1 minute')
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
      AND isfinite(s.next_fire_at)
),
-- The units (job, scope key) for which a live replica has an
-- expectation: only its rows count there.
live_units AS (
    SELECT DISTINCT d.kind, d.job_id, d.scope_key FROM declared d WHERE d.live
),
-- The expectations whose time and grace have passed (few, normally).
-- A pause whose end passed counts as over (issue 24, part 6), written or
-- not: the due time is then the later of the row's and the pause's end.
late AS (
    SELECT d.kind, d.job_id, d.scope_key, greatest(d.next_fire_at, p.ended) AS next_fire_at,
           d.last_started_at, d.live, d.state
    FROM declared d
    CROSS JOIN anylive
    LEFT JOIN studio_job_setting g ON g.job_id = d.job_id
    CROSS JOIN LATERAL (SELECT CASE WHEN g.paused AND isfinite(g.paused_until) THEN g.paused_until END AS ended) p
    WHERE greatest(d.next_fire_at, p.ended) + p_grace < now()
      AND NOT coalesce(g.paused AND (g.paused_until IS NULL OR g.paused_until > now()), false)
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
            AND x.started_at > coalesce(CASE WHEN isfinite(e.last_started_at) THEN e.last_started_at END, '-infinity'::timestamptz)
            AND CASE e.kind
                  WHEN 'duty' THEN x.cluster = e.scope_key
                  WHEN 'instance' THEN x.replica_id = e.scope_key AND x.cluster IS NULL
                  ELSE x.cluster IS NULL
                END)
),
-- Per-cluster duties whose cluster's owner does not run them: the owner
-- is NULL, or has no row of job@cluster with a due time.
duty_rows AS (
    SELECT left(s.job_id, strpos(s.job_id, '@') - 1) AS job_id, substr(s.job_id, strpos(s.job_id, '@') + 1) AS cluster,
           s.schedule, s.updated_at,
           CASE WHEN isfinite(s.last_finished_at) THEN s.last_finished_at END AS last_finished_at
    FROM studio_job_status s
    JOIN studio_replica r ON r.id = s.replica_id
    WHERE strpos(s.job_id, '@') > 0
      AND r.heartbeat_at > now() - interval '7 days'
      AND r.heartbeat_at <= now() + interval '5 seconds'
),
orphans AS (
    SELECT d.job_id, d.cluster,
           max(d.last_finished_at) AS row_end,
           max(CASE WHEN isfinite(d.updated_at) THEN d.updated_at END) AS seen_at,
           (array_agg(d.schedule ORDER BY d.updated_at DESC))[1] AS schedule
    FROM duty_rows d
    JOIN cluster_lease l ON l.cluster = d.cluster
    WHERE NOT EXISTS (
          SELECT 1 FROM studio_job_status o
          WHERE o.replica_id = l.owner AND o.job_id = d.job_id || '@' || d.cluster
            AND o.next_fire_at IS NOT NULL AND isfinite(o.next_fire_at))
      AND NOT EXISTS (SELECT 1 FROM studio_job_setting g WHERE g.job_id = d.job_id AND g.paused
                      AND (g.paused_until IS NULL OR g.paused_until > now()))
    GROUP BY d.job_id, d.cluster
),
-- MATERIALIZED: studio_schedule_next once per unit, not once per use.
orphan_due AS MATERIALIZED (
    SELECT o.job_id, o.cluster, e.last_end,
           studio_schedule_next(coalesce((SELECT g.schedule FROM studio_job_setting g WHERE g.job_id = o.job_id), o.schedule),
                                e.last_end, now() - p_grace) AS due
    FROM orphans o
    CROSS JOIN LATERAL (
        SELECT coalesce(greatest(o.row_end, (
                   SELECT max(x.finished_at) FROM studio_job_run x
                   WHERE x.job_id = o.job_id AND x.cluster = o.cluster AND isfinite(x.finished_at))),
               o.seen_at) AS last_end) e
),
orphan_unmet AS (
    SELECT o.job_id, o.cluster AS scope_key, greatest(o.due, p.ended) AS next_fire_at FROM orphan_due o
    CROSS JOIN LATERAL (SELECT (SELECT g.paused_until FROM studio_job_setting g
                                WHERE g.job_id = o.job_id AND g.paused AND isfinite(g.paused_until)) AS ended) p
    WHERE o.due IS NOT NULL AND isfinite(o.due) AND greatest(o.due, p.ended) + p_grace < now()
      AND NOT EXISTS (
          SELECT 1 FROM studio_job_run x
          WHERE x.job_id = o.job_id AND x.cluster = o.cluster AND x.started_at > o.last_end)
)
SELECT u.job_id, u.scope_key, min(u.next_fire_at),
       extract(epoch FROM now() - min(u.next_fire_at))::double precision
FROM (SELECT * FROM unmet UNION ALL SELECT * FROM orphan_unmet) u
GROUP BY u.job_id, u.scope_key
ORDER BY u.job_id, u.scope_key
$$;
-- +goose StatementEnd

-- The tables whatever the caller's search_path (CREATE OR REPLACE drops a
-- function's SET clauses), and no JIT, as in 00013.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_overdue_jobs(interval) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_end_pauses(text) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_job_setting_pause_columns() SET search_path = %I, pg_temp', current_schema());
    ALTER FUNCTION studio_overdue_jobs(interval) SET jit = off;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';
-- 00013's function, as it was.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_overdue_jobs(p_grace interval DEFAULT interval '1 minute')
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
      AND isfinite(s.next_fire_at)
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
            AND x.started_at > coalesce(CASE WHEN isfinite(e.last_started_at) THEN e.last_started_at END, '-infinity'::timestamptz)
            AND CASE e.kind
                  WHEN 'duty' THEN x.cluster = e.scope_key
                  WHEN 'instance' THEN x.replica_id = e.scope_key AND x.cluster IS NULL
                  ELSE x.cluster IS NULL
                END)
),
-- Per-cluster duties whose cluster's owner does not run them: the owner
-- is NULL, or has no row of job@cluster with a due time.
duty_rows AS (
    SELECT left(s.job_id, strpos(s.job_id, '@') - 1) AS job_id, substr(s.job_id, strpos(s.job_id, '@') + 1) AS cluster,
           s.schedule, s.updated_at,
           CASE WHEN isfinite(s.last_finished_at) THEN s.last_finished_at END AS last_finished_at
    FROM studio_job_status s
    JOIN studio_replica r ON r.id = s.replica_id
    WHERE strpos(s.job_id, '@') > 0
      AND r.heartbeat_at > now() - interval '7 days'
      AND r.heartbeat_at <= now() + interval '5 seconds'
),
orphans AS (
    SELECT d.job_id, d.cluster,
           max(d.last_finished_at) AS row_end,
           max(CASE WHEN isfinite(d.updated_at) THEN d.updated_at END) AS seen_at,
           (array_agg(d.schedule ORDER BY d.updated_at DESC))[1] AS schedule
    FROM duty_rows d
    JOIN cluster_lease l ON l.cluster = d.cluster
    WHERE NOT EXISTS (
          SELECT 1 FROM studio_job_status o
          WHERE o.replica_id = l.owner AND o.job_id = d.job_id || '@' || d.cluster
            AND o.next_fire_at IS NOT NULL AND isfinite(o.next_fire_at))
      AND NOT EXISTS (SELECT 1 FROM studio_job_setting g WHERE g.job_id = d.job_id AND g.paused)
    GROUP BY d.job_id, d.cluster
),
-- MATERIALIZED: studio_schedule_next once per unit, not once per use.
orphan_due AS MATERIALIZED (
    SELECT o.job_id, o.cluster, e.last_end,
           studio_schedule_next(coalesce((SELECT g.schedule FROM studio_job_setting g WHERE g.job_id = o.job_id), o.schedule),
                                e.last_end, now() - p_grace) AS due
    FROM orphans o
    CROSS JOIN LATERAL (
        SELECT coalesce(greatest(o.row_end, (
                   SELECT max(x.finished_at) FROM studio_job_run x
                   WHERE x.job_id = o.job_id AND x.cluster = o.cluster AND isfinite(x.finished_at))),
               o.seen_at) AS last_end) e
),
orphan_unmet AS (
    SELECT o.job_id, o.cluster AS scope_key, o.due AS next_fire_at FROM orphan_due o
    WHERE o.due IS NOT NULL AND isfinite(o.due) AND o.due + p_grace < now()
      AND NOT EXISTS (
          SELECT 1 FROM studio_job_run x
          WHERE x.job_id = o.job_id AND x.cluster = o.cluster AND x.started_at > o.last_end)
)
SELECT u.job_id, u.scope_key, min(u.next_fire_at),
       extract(epoch FROM now() - min(u.next_fire_at))::double precision
FROM (SELECT * FROM unmet UNION ALL SELECT * FROM orphan_unmet) u
GROUP BY u.job_id, u.scope_key
ORDER BY u.job_id, u.scope_key
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_overdue_jobs(interval) SET search_path = %I, pg_temp', current_schema());
    ALTER FUNCTION studio_overdue_jobs(interval) SET jit = off;
END
$$;
-- +goose StatementEnd
DROP FUNCTION studio_end_pauses(text);
DROP TRIGGER studio_job_setting_pause_columns ON studio_job_setting;
DROP FUNCTION studio_job_setting_pause_columns();
ALTER TABLE studio_job_setting
    DROP COLUMN paused_until,
    DROP COLUMN paused_reason,
    DROP COLUMN paused_by;
