-- Overdue jobs, second version (issue 22's adversarial pass, defects 2
-- and 6; docs/occurrences-overdue.md). studio_overdue_jobs(p_grace) keeps
-- its signature, its columns and their meaning (an interface; CREATE OR
-- REPLACE keeps its grants, its search_path and jit settings are set
-- again below). Two changes:
--
-- 1. A per-cluster duty whose cluster's owner does not run it is watched.
--    When a cluster's lease passes to a replica that does not declare the
--    duty (configurations that differ), or to no replica at all (every
--    replica stopped cleanly and released its leases), the old owner's
--    status row of job@cluster has next_fire_at NULL and the new owner has
--    none: 00011 found no expectation and listed nothing. Now, for each
--    duty (job, cluster) declared by a status row of a replica seen in the
--    last 7 days, of a cluster in cluster_lease whose owner is NULL or has
--    no status row of job@cluster with a due time (next_fire_at NULL or
--    not finite), the due time is computed from the tables:
--      - the cluster's last end: the latest of the finished_at of the
--        duty's runs for that cluster (studio_job_run) and the
--        last_finished_at of every declared row of job@cluster (kept when
--        the history is pruned); with neither, the newest row's
--        updated_at (the last time a replica hosted the duty);
--      - the schedule: the job's override (studio_job_setting.schedule)
--        when set, else the newest declared row's schedule;
--      - due_at = the schedule's next time after the last end:
--        `every D`: last end + D; `cron EXPR`: the first minute after the
--        last end that EXPR matches, in UTC, as the replicas' cron
--        library reads it (studio_schedule_next below).
--    It is overdue when due_at + p_grace has passed and no run of the
--    duty for that cluster started after the last end (a run in progress
--    meets it). A paused job is not. Such a unit and the rows of 00011
--    may both give a due time; due_at is the earliest.
-- 2. Timestamps that are not finite ('infinity', '-infinity': no replica
--    writes them; a hostile or corrupt row) no longer make the function
--    fail for every job ("cannot subtract infinite timestamps"): a
--    next_fire_at that is not finite counts as no expectation (the row is
--    read as if next_fire_at were NULL), and a last start, last end or
--    run time that is not finite is left out.
--
-- studio_schedule_next(schedule, end, until) is a helper, not an
-- interface: the next due time after a run that ended at `end` by the
-- stored schedule (jobs.Schedule.String: "every 1m30s", "cron 0 2 * * *"),
-- NULL when the schedule does not parse or (cron) it does not fall due by
-- `until`. It never raises for a bad schedule. It reads no table;
-- EXECUTE stays with PUBLIC, so every role that may call
-- studio_overdue_jobs (the inspector, the replica) may call it.
--
-- Cost: the duty units are read from the status rows of per-cluster jobs
-- (job_id containing '@') joined to cluster_lease and the owner's row by
-- primary key; the runs are probed only for units whose owner does not
-- run them (normally none).

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE FUNCTION studio_cron_field(p_field text, p_lo int, p_hi int, p_names text[]) RETURNS int[]
LANGUAGE plpgsql IMMUTABLE AS $$
-- The values one cron field allows (NULL: the field does not parse):
-- lists of *, ?, N, N-M, each with an optional /STEP; names (JAN, MON)
-- stand for their numbers, the first name for p_lo.
DECLARE
    part text;
    m text[];
    a int;
    b int;
    step int;
    out int[] := '{}';
BEGIN
    p_field := upper(p_field);
    IF p_names IS NOT NULL THEN
        FOR i IN 1 .. array_length(p_names, 1) LOOP
            p_field := replace(p_field, p_names[i], (p_lo + i - 1)::text);
        END LOOP;
    END IF;
    FOREACH part IN ARRAY string_to_array(p_field, ',') LOOP
        m := regexp_match(part, '^(\*|\?|([0-9]{1,2})(-([0-9]{1,2}))?)(/([0-9]{1,2}))?$');
        IF m IS NULL THEN
            RETURN NULL;
        END IF;
        IF m[1] IN ('*', '?') THEN
            a := p_lo;
            b := p_hi;
        ELSE
            a := m[2]::int;
            -- N/STEP is N-max/STEP
            b := coalesce(m[4]::int, CASE WHEN m[6] IS NOT NULL THEN p_hi ELSE a END);
        END IF;
        step := coalesce(m[6]::int, 1);
        IF a < p_lo OR b > p_hi OR a > b OR step < 1 THEN
            RETURN NULL;
        END IF;
        out := out || ARRAY(SELECT generate_series(a, b, step));
    END LOOP;
    RETURN out;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_schedule_next(p_schedule text, p_end timestamptz, p_until timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    kind text;
    rest text;
    f text[];
    mi int[];
    hr int[];
    dm int[];
    mo int[];
    dw int[];
    domstar boolean;
    dowstar boolean;
    dayok boolean;
    d date;
    last date;
    t timestamptz;
BEGIN
    IF p_schedule IS NULL OR p_end IS NULL OR NOT isfinite(p_end) THEN
        RETURN NULL;
    END IF;
    kind := split_part(btrim(p_schedule), ' ', 1);
    rest := btrim(substr(btrim(p_schedule), length(kind) + 1));
    IF kind = 'every' THEN
        -- A Go duration (time.ParseDuration): 1h30m, 90s, 1.5s, 500ms.
        IF rest !~ '^([0-9]+(\.[0-9]+)?(h|m|s|ms|us|µs|ns))+$' THEN
            RETURN NULL;
        END IF;
        RETURN p_end + (SELECT make_interval(secs => sum(x[1]::double precision *
                CASE x[2] WHEN 'h' THEN 3600 WHEN 'm' THEN 60 WHEN 's' THEN 1 WHEN 'ms' THEN 1e-3
                          WHEN 'us' THEN 1e-6 WHEN 'µs' THEN 1e-6 ELSE 1e-9 END))
            FROM regexp_matches(rest, '([0-9]+(?:\.[0-9]+)?)(h|ms|m|s|us|µs|ns)', 'g') x);
    END IF;
    IF kind <> 'cron' OR p_until IS NULL OR NOT isfinite(p_until) THEN
        RETURN NULL;
    END IF;
    -- Five fields or a descriptor, read in UTC (jobs.ParseCron,
    -- robfig/cron): the first whole minute after p_end that matches.
    rest := CASE lower(rest)
        WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *'
        WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
        WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
        WHEN '@hourly' THEN '0 * * * *' ELSE rest END;
    f := regexp_split_to_array(rest, '\s+');
    IF array_length(f, 1) IS DISTINCT FROM 5 THEN
        RETURN NULL;
    END IF;
    mi := studio_cron_field(f[1], 0, 59, NULL);
    hr := studio_cron_field(f[2], 0, 23, NULL);
    dm := studio_cron_field(f[3], 1, 31, NULL);
    mo := studio_cron_field(f[4], 1, 12, ARRAY['JAN','FEB','MAR','APR','MAY','JUN','JUL','AUG','SEP','OCT','NOV','DEC']);
    dw := studio_cron_field(f[5], 0, 6, ARRAY['SUN','MON','TUE','WED','THU','FRI','SAT']);
    IF mi IS NULL OR hr IS NULL OR dm IS NULL OR mo IS NULL OR dw IS NULL THEN
        RETURN NULL;
    END IF;
    -- robfig/cron: when either day field is * (or ?, without a step),
    -- a day must match both; otherwise either.
    domstar := f[3] ~ '(^|,)[*?](/0*1)?(,|$)';
    dowstar := f[5] ~ '(^|,)[*?](/0*1)?(,|$)';
    d := (p_end AT TIME ZONE 'UTC')::date;
    -- Up to 2,000 days on (a 29 February fires every 4 years).
    last := least((p_until AT TIME ZONE 'UTC')::date, d + 2000);
    WHILE d <= last LOOP
        dayok := extract(day FROM d)::int = ANY (dm);
        IF domstar OR dowstar THEN
            dayok := dayok AND extract(dow FROM d)::int = ANY (dw);
        ELSE
            dayok := dayok OR extract(dow FROM d)::int = ANY (dw);
        END IF;
        IF dayok AND extract(month FROM d)::int = ANY (mo) THEN
            SELECT min(x.ts) INTO t
            FROM unnest(hr) h, unnest(mi) mm,
                 LATERAL (SELECT (d + make_interval(hours => h, mins => mm)) AT TIME ZONE 'UTC' AS ts) x
            WHERE x.ts > p_end;
            IF t IS NOT NULL THEN
                RETURN CASE WHEN t <= p_until THEN t END;
            END IF;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

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

-- As 00011 (CREATE OR REPLACE drops a function's SET clauses): the tables
-- whatever the caller's search_path, and no JIT.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_overdue_jobs(interval) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_schedule_next(text, timestamptz, timestamptz) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_cron_field(text, int, int, text[]) SET search_path = %I, pg_temp', current_schema());
    ALTER FUNCTION studio_overdue_jobs(interval) SET jit = off;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';
-- 00011's function, as it was.
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
-- CREATE OR REPLACE dropped its settings: as 00011 set them.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_overdue_jobs(interval) SET search_path = %I, pg_temp', current_schema());
    ALTER FUNCTION studio_overdue_jobs(interval) SET jit = off;
END
$$;
-- +goose StatementEnd
DROP FUNCTION studio_schedule_next(text, timestamptz, timestamptz);
DROP FUNCTION studio_cron_field(text, int, int, text[]);
