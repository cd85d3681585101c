-- studio_schedule_next reads the options after a schedule (issue 24: time
-- zones, jitter, deadline; docs/occurrences-overdue.md, docs/schedules.md
-- "Jitter and the start deadline"). Until now it returned NULL for a stored
-- schedule with ` tz ZONE`, ` jitter D` or ` deadline D` after it
-- (jobs.Schedule.String: "cron 0 2 * * * tz Europe/Berlin jitter 10m
-- deadline 5m"), so an orphaned per-cluster duty with any of them was
-- never reported overdue by studio_overdue_jobs (00014), which calls it.
-- Same signature, same meaning; it now:
--
-- - cuts the options off the end, in any order, each at most once (the
--   replicas write tz, jitter, deadline in that order); NULL for an option
--   given twice, a duration that does not parse or an unknown zone;
-- - reads the cron fields on the wall clock of the zone, as the runner
--   does (jobs.Schedule.Next): a local time that occurs twice (clocks go
--   back) at its first occurrence, one that does not occur (clocks go
--   forward) at the first instant after the gap (studio_local_instant:
--   PostgreSQL's `timestamp AT TIME ZONE` takes other instants on those two
--   nights, so its answer is checked and corrected). A zone after `every D`
--   is read (an unknown one is NULL) and ignored, as the runner ignores it;
-- - adds the whole jitter: the runner delays each time by a fixed offset in
--   [0, jitter) from a hash of the job and the cluster, which this helper
--   does not know, so it answers the latest time the runner could take:
--   never before the runner's due time, at most the jitter after the
--   unshifted time (end + every, or the next cron time after end). One
--   case is later: a cron run that ended less than its offset after a cron
--   time is due again at that time plus the offset, and this helper
--   answers the next cron time plus the jitter (a check a period late,
--   never a false one);
-- - ignores the deadline (it does not move due times).
--
-- studio_local_instant(local, zone) and studio_go_duration(text) are new
-- helpers, not interfaces; they read no table and keep EXECUTE for PUBLIC
-- like studio_schedule_next.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE FUNCTION studio_go_duration(p_text text) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
-- A Go duration (time.ParseDuration, as FormatDuration writes it): 1h30m,
-- 90s, 1.5s, 500ms. NULL when it does not parse.
SELECT CASE WHEN p_text ~ '^([0-9]+(\.[0-9]+)?(h|m|s|ms|us|µs|ns))+$' THEN
    (SELECT make_interval(secs => sum(x[1]::double precision *
            CASE x[2] WHEN 'h' THEN 3600 WHEN 'm' THEN 60 WHEN 's' THEN 1 WHEN 'ms' THEN 1e-3
                      WHEN 'us' THEN 1e-6 WHEN 'µs' THEN 1e-6 ELSE 1e-9 END))
     FROM regexp_matches(p_text, '([0-9]+(?:\.[0-9]+)?)(h|ms|m|s|us|µs|ns)', 'g') x)
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_local_instant(p_local timestamp, p_zone text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
-- The instant of local time p_local in zone p_zone, as the runner takes it
-- (jobs.instant): the first of two when the local time occurs twice, the
-- instant the gap ends when it does not occur.
DECLARE
    guess timestamptz := p_local AT TIME ZONE p_zone;
    o1 interval;
    o2 interval;
    c timestamptz;
    best timestamptz;
    lo timestamptz;
    n bigint;
    a bigint;
    b bigint;
    mid bigint;
BEGIN
    -- The offsets a day before and after (zones change at most once in
    -- two days); the same on both sides: no change near, PostgreSQL's
    -- answer is the only one.
    o1 := ((guess - interval '1 day') AT TIME ZONE p_zone) - ((guess - interval '1 day') AT TIME ZONE 'UTC');
    o2 := ((guess + interval '1 day') AT TIME ZONE p_zone) - ((guess + interval '1 day') AT TIME ZONE 'UTC');
    IF o1 = o2 THEN
        RETURN guess;
    END IF;
    FOREACH c IN ARRAY ARRAY[(p_local - o1) AT TIME ZONE 'UTC', (p_local - o2) AT TIME ZONE 'UTC'] LOOP
        IF (c AT TIME ZONE p_zone) = p_local AND (best IS NULL OR c < best) THEN
            best := c;
        END IF;
    END LOOP;
    IF best IS NOT NULL THEN
        RETURN best;
    END IF;
    -- A gap (o2 > o1): the change T is in (local - o2, local - o1]; the
    -- first whole second there whose offset is o2 (zones change on whole
    -- seconds).
    lo := (p_local - o2) AT TIME ZONE 'UTC';
    n := extract(epoch FROM o2 - o1)::bigint;
    a := 0;
    b := n;
    WHILE a < b LOOP
        mid := (a + b) / 2;
        c := lo + make_interval(secs => mid);
        IF (c AT TIME ZONE p_zone) - (c AT TIME ZONE 'UTC') = o2 THEN
            b := mid;
        ELSE
            a := mid + 1;
        END IF;
    END LOOP;
    RETURN lo + make_interval(secs => a);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_schedule_next(p_schedule text, p_end timestamptz, p_until timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s text;
    m text[];
    zone text;
    jitter interval;
    deadline interval;
    every interval;
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
    -- The options, cut off the end: " tz ZONE", " jitter D", " deadline D".
    s := btrim(p_schedule);
    LOOP
        m := regexp_match(s, '^(.*\S)\s+(tz|jitter|deadline)\s+(\S+)$');
        EXIT WHEN m IS NULL;
        CASE m[2]
            WHEN 'tz' THEN
                IF zone IS NOT NULL THEN RETURN NULL; END IF;
                zone := m[3];
            WHEN 'jitter' THEN
                IF jitter IS NOT NULL THEN RETURN NULL; END IF;
                jitter := studio_go_duration(m[3]);
                IF jitter IS NULL THEN RETURN NULL; END IF;
            ELSE
                IF deadline IS NOT NULL THEN RETURN NULL; END IF;
                deadline := studio_go_duration(m[3]);
                IF deadline IS NULL THEN RETURN NULL; END IF;
        END CASE;
        s := m[1];
    END LOOP;
    jitter := coalesce(jitter, interval '0');
    zone := coalesce(zone, 'UTC');
    IF zone <> 'UTC' THEN
        BEGIN
            PERFORM now() AT TIME ZONE zone;
        EXCEPTION WHEN invalid_parameter_value THEN
            RETURN NULL;
        END;
    END IF;
    kind := split_part(s, ' ', 1);
    rest := btrim(substr(s, length(kind) + 1));
    IF kind = 'every' THEN
        every := studio_go_duration(rest);
        RETURN p_end + every + jitter;
    END IF;
    IF kind <> 'cron' OR p_until IS NULL OR NOT isfinite(p_until) THEN
        RETURN NULL;
    END IF;
    -- Five fields or a descriptor, read on the zone's wall clock
    -- (jobs.ParseCron, robfig/cron): the first whole minute after p_end
    -- that matches.
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
    -- Local days from the end's; a local time's instant never decreases as
    -- the local time grows, so the first day with a time after p_end has
    -- the answer, the earliest of its times after p_end.
    d := (p_end AT TIME ZONE zone)::date;
    -- Up to 2,000 days on (a 29 February fires every 4 years).
    last := least((p_until AT TIME ZONE zone)::date + 1, d + 2000);
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
                 LATERAL (SELECT studio_local_instant(d + make_interval(hours => h, mins => mm), zone) AS ts) x
            WHERE x.ts > p_end;
            IF t IS NOT NULL THEN
                t := t + jitter;
                RETURN CASE WHEN t <= p_until THEN t END;
            END IF;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- CREATE OR REPLACE drops a function's SET clauses: as 00013 set them.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_schedule_next(text, timestamptz, timestamptz) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_go_duration(text) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_local_instant(timestamp, text) SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';
-- 00013's function, as it was.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_schedule_next(p_schedule text, p_end timestamptz, p_until timestamptz) RETURNS timestamptz
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
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_schedule_next(text, timestamptz, timestamptz) SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd
DROP FUNCTION studio_local_instant(timestamp, text);
DROP FUNCTION studio_go_duration(text);
