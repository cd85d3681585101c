-- Occurrences (issue 22): what became of every time a job fell due.
--
-- An occurrence is keyed by job, scope key and nominal time:
--   - job_id: the job's id (a per-cluster duty's job id, not job@cluster);
--   - scope_key: '' for an installation job, the replica id for an
--     instance job, the cluster for a per-cluster duty;
--   - nominal_at: the due time in database time, truncated to
--     milliseconds, so that it prints the same as STUDIO_SCHEDULED_AT and
--     STUDIO_OCCURRENCE_KEY (jobs.OccurrenceKey) on every replica.
--
-- Shape, chosen for a small write cost (docs/occurrences.md):
--   - an occurrence that ran is its run row: studio_job_run gains
--     nominal_at, scope_key and triggered, written in the same INSERT as
--     before (three more array parameters, no more statements, no new
--     index);
--   - skips and misses, which have no run, are rows of studio_occurrence,
--     one per occurrence (UNIQUE: every replica that fires at the same due
--     time writes the same key, and only the first insert counts); a
--     stretch of due times missed while no replica hosted the job is one
--     row, count and last_nominal_at say how many and until when;
--   - studio_occurrences, a view, is both (the interface the commands and
--     other readers use).
-- Each skip or miss inserted goes on the event stream as an `occurrence`
-- event, in the inserting transaction (a trigger; docs/events.md).
--
-- Adding nullable columns and a column with a constant default is a
-- catalog change only; lock_timeout bounds the wait for the table's lock,
-- as in 00007 and 00008.

-- +goose Up
SET LOCAL lock_timeout = '5s';

ALTER TABLE studio_job_run
    ADD COLUMN nominal_at timestamptz NULL,
    ADD COLUMN scope_key  text        NULL,
    ADD COLUMN triggered  boolean     NOT NULL DEFAULT false;

CREATE TABLE studio_occurrence (
    id              bigserial   PRIMARY KEY,
    job_id          text        NOT NULL,
    scope_key       text        NOT NULL DEFAULT '',
    nominal_at      timestamptz NOT NULL,
    outcome         text        NOT NULL CHECK (outcome IN ('skipped', 'missed')),
    reason          text        NOT NULL CHECK (reason IN ('paused', 'held-elsewhere', 'overrun', 'invalid-schedule', 'deadline', 'down', 'lost')),
    -- The replica that recorded a skip or a miss; for missed/lost, the
    -- run's replica.
    replica_id      text        NOT NULL DEFAULT '',
    -- missed/lost: the run that did not end.
    seq             bigint      NULL,
    -- held-elsewhere: the lock's locked_by, and whether it names a
    -- registered replica.
    holder          text        NULL,
    holder_known    boolean     NULL,
    -- paused: the setting's updated_by.
    paused_by       text        NULL,
    -- missed/down: how many due times the stretch holds, and the last one
    -- (nominal_at is the first).
    count           integer     NOT NULL DEFAULT 1 CHECK (count >= 1),
    last_nominal_at timestamptz NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, scope_key, nominal_at)
);
-- For retention by age (recorded_at follows time; BRIN costs next to
-- nothing per insert).
CREATE INDEX studio_occurrence_recorded ON studio_occurrence USING brin (recorded_at);

-- The event stream takes the new kind. The old check is replaced by one
-- that is not validated: every existing row satisfies it (the list only
-- grows), and validating would scan the events under the table's lock.
ALTER TABLE studio_event DROP CONSTRAINT studio_event_event_check,
    ADD CONSTRAINT studio_event_event_check
        CHECK (event IN ('run', 'replica', 'lease', 'lock', 'audit', 'occurrence')) NOT VALID;

-- +goose StatementBegin
CREATE FUNCTION studio_occurrence_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM studio_event_add('occurrence', jsonb_strip_nulls(jsonb_build_object(
        'job_id', NEW.job_id, 'scope_key', NEW.scope_key,
        'nominal_at', studio_event_time(NEW.nominal_at),
        'outcome', NEW.outcome, 'reason', NEW.reason,
        'replica_id', nullif(NEW.replica_id, ''), 'seq', NEW.seq,
        'holder', NEW.holder, 'holder_known', NEW.holder_known,
        'paused_by', NEW.paused_by, 'count', NEW.count,
        'last_nominal_at', studio_event_time(NEW.last_nominal_at),
        'occurrence_key', NEW.job_id || '/' || NEW.scope_key || '/'
            || to_char(NEW.nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- As 00006's event functions: it runs as the tables' owner, with the
-- studio schema and then pg_temp as its search_path (a caller's temporary
-- table cannot shadow studio_event), and deferred to commit, after every
-- row lock of the inserting transaction: two flushes that insert the same
-- occurrence key wait on each other's unique index entry, never on the
-- event writer's lock while holding one.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_occurrence_event() SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER studio_occurrence_event AFTER INSERT ON studio_occurrence
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_occurrence_event();

-- The runs that became missed/lost (lock_lost, interrupted, or running
-- while their replica is dead), for jobs list's count of the last 24 h and
-- the view: a partial index, so a run that ends as most do (succeeded,
-- failed, timed_out) leaves no entry once it has ended.
CREATE INDEX studio_job_run_unended ON studio_job_run (job_id, started_at)
    WHERE outcome IN ('lock_lost', 'interrupted', 'running');

-- The occurrences: runs that carry a nominal time, and the skips and
-- misses. A run counts as missed/lost when it lost its lock, was
-- interrupted (its replica died, or stopped before the run ended), or is
-- still marked running while its replica is not live.
CREATE VIEW studio_occurrences AS
SELECT r.job_id,
       coalesce(r.scope_key, '') AS scope_key,
       r.nominal_at,
       CASE WHEN l.lost THEN 'missed' ELSE 'ran' END AS outcome,
       CASE WHEN l.lost THEN 'lost' END AS reason,
       r.replica_id,
       r.seq,
       r.outcome AS run_outcome,
       r.started_at,
       r.finished_at,
       extract(epoch FROM r.started_at - r.nominal_at)::double precision AS lateness_seconds,
       NULL::text AS holder,
       NULL::boolean AS holder_known,
       NULL::text AS paused_by,
       1 AS count,
       NULL::timestamptz AS last_nominal_at,
       r.triggered,
       r.started_at AS recorded_at
FROM studio_job_run r
CROSS JOIN LATERAL (SELECT r.outcome IN ('lock_lost', 'interrupted')
    OR (r.outcome = 'running' AND NOT EXISTS (
        SELECT 1 FROM studio_replica p WHERE p.id = r.replica_id AND p.state <> 'stopped'
          AND p.heartbeat_at > now() - interval '15 seconds' AND p.heartbeat_at <= now() + interval '5 seconds')) AS lost) l
WHERE r.nominal_at IS NOT NULL
UNION ALL
SELECT o.job_id, o.scope_key, o.nominal_at, o.outcome, o.reason,
       nullif(o.replica_id, ''), o.seq, NULL, NULL, NULL, NULL,
       o.holder, o.holder_known, o.paused_by, o.count, o.last_nominal_at,
       false, o.recorded_at
FROM studio_occurrence o;

-- +goose Down
DROP INDEX studio_job_run_unended;
DROP VIEW studio_occurrences;
DROP TABLE studio_occurrence;
DROP FUNCTION studio_occurrence_event();
DELETE FROM studio_event WHERE event = 'occurrence';
ALTER TABLE studio_event DROP CONSTRAINT studio_event_event_check,
    ADD CONSTRAINT studio_event_event_check
        CHECK (event IN ('run', 'replica', 'lease', 'lock', 'audit')) NOT VALID;
ALTER TABLE studio_job_run
    DROP COLUMN nominal_at,
    DROP COLUMN scope_key,
    DROP COLUMN triggered;
