-- Backfill (issue 24 part 5; docs/schedules.md, "Backfill"): studioctl
-- jobs backfill JOB --from T --to T asks the replicas to run named past
-- occurrences of an installation job, each with its own nominal time.
--
-- 1. The request is a studio_request row of kind 'job.backfill' (target:
--    the job), written with its studio_audit row (action 'jobs.backfill')
--    in one transaction, as a trigger is: the audit guard of 00005 is
--    extended to the new kind. Any replica hosting the job works on it;
--    the replica that ends its last occurrence marks it done.
-- 2. Its occurrences are studio_backfill rows, one per nominal time,
--    written in the request's transaction (a guard checks it). A replica
--    claims the oldest pending one only while it holds the job's lock, so
--    they run one at a time, oldest first, and never beside a live run.
--    Under the lock the claim also leaves out (outcome 'left_out') an
--    occurrence asked for without --again (again false) that ran
--    meanwhile: a run of the job (not a trigger's) with a nominal time in
--    its slot [nominal_at, slot_until), or another backfill occurrence of
--    it that ran. A nominal time in the future is refused.
-- 3. A run of a backfill occurrence says so: studio_job_run.backfill, and
--    the column backfill of studio_occurrences (jobs occurrences).

-- +goose Up
ALTER TABLE studio_request DROP CONSTRAINT studio_request_kind_check,
    ADD CONSTRAINT studio_request_kind_check CHECK (kind IN ('replica.drain', 'job.trigger', 'job.backfill'));

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_request_audited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.audit_seq IS NULL OR NOT EXISTS (
        SELECT 1 FROM studio_audit a
        WHERE a.seq = NEW.audit_seq
          AND a.xmin = pg_current_xact_id()::xid
          AND a.target = NEW.target
          AND a.action = CASE NEW.kind WHEN 'replica.drain' THEN 'replicas.drain'
                                       WHEN 'job.trigger' THEN 'jobs.trigger'
                                       WHEN 'job.backfill' THEN 'jobs.backfill' END)
    THEN
        RAISE EXCEPTION 'studio_request: a % request for % needs its own studio_audit row, written in the same transaction (audit_seq %)',
            NEW.kind, NEW.target, coalesce(NEW.audit_seq::text, 'missing')
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TABLE studio_backfill (
    request_seq bigint      NOT NULL REFERENCES studio_request (seq) ON DELETE CASCADE,
    job_id      text        NOT NULL,
    nominal_at  timestamptz NOT NULL,
    -- The end of the occurrence's slot (the schedule's next nominal time;
    -- NULL: the cron's last time ever, or not given): a run with a nominal
    -- time in [nominal_at, slot_until) is a run of this occurrence.
    slot_until  timestamptz NULL,
    -- jobs backfill --again: run it even if it ran.
    again       boolean     NOT NULL DEFAULT false,
    -- Set when a replica takes it (under the job's lock), and when its run
    -- ends: outcome is the run's, or 'abandoned' (claimed by a run that
    -- never ended: its replica died; found by the next claim, never run
    -- again without --again), or 'left_out' (it ran elsewhere meanwhile,
    -- found by the claim under the lock).
    claimed_by  text        NULL,
    claimed_at  timestamptz NULL,
    run_seq     bigint      NULL,
    done_at     timestamptz NULL,
    outcome     text        NULL,
    PRIMARY KEY (request_seq, nominal_at),
    CHECK (isfinite(nominal_at)),
    CHECK (slot_until IS NULL OR slot_until > nominal_at),
    CHECK ((claimed_by IS NULL) = (claimed_at IS NULL)),
    CHECK ((done_at IS NULL) = (outcome IS NULL))
);
CREATE INDEX studio_backfill_pending ON studio_backfill (job_id, nominal_at) WHERE done_at IS NULL;

-- +goose StatementBegin
CREATE FUNCTION studio_backfill_requested() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM studio_request q
        WHERE q.seq = NEW.request_seq AND q.kind = 'job.backfill' AND q.target = NEW.job_id
          AND q.xmin = pg_current_xact_id()::xid)
    THEN
        RAISE EXCEPTION 'studio_backfill: an occurrence of % needs its own job.backfill request, written in the same transaction (request %)',
            NEW.job_id, NEW.request_seq
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.nominal_at > now() THEN
        RAISE EXCEPTION 'studio_backfill: occurrence % of % is in the future: a backfill runs past occurrences only',
            NEW.nominal_at, NEW.job_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER studio_backfill_requested BEFORE INSERT ON studio_backfill
    FOR EACH ROW EXECUTE FUNCTION studio_backfill_requested();

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_request_audited() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION studio_backfill_requested() SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd

ALTER TABLE studio_job_run ADD COLUMN backfill boolean NOT NULL DEFAULT false;

-- The view of 00010 with backfill as its last column.
CREATE OR REPLACE VIEW studio_occurrences AS
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
       r.started_at AS recorded_at,
       r.backfill
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
       false, o.recorded_at, false
FROM studio_occurrence o;

-- +goose Down
DROP VIEW studio_occurrences;
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
ALTER TABLE studio_job_run DROP COLUMN backfill;
DROP TABLE studio_backfill;
DROP FUNCTION studio_backfill_requested();
DELETE FROM studio_request WHERE kind = 'job.backfill';
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_request_audited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.audit_seq IS NULL OR NOT EXISTS (
        SELECT 1 FROM studio_audit a
        WHERE a.seq = NEW.audit_seq
          AND a.xmin = pg_current_xact_id()::xid
          AND a.target = NEW.target
          AND a.action = CASE NEW.kind WHEN 'replica.drain' THEN 'replicas.drain'
                                       WHEN 'job.trigger' THEN 'jobs.trigger' END)
    THEN
        RAISE EXCEPTION 'studio_request: a % request for % needs its own studio_audit row, written in the same transaction (audit_seq %)',
            NEW.kind, NEW.target, coalesce(NEW.audit_seq::text, 'missing')
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION studio_request_audited() SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd
ALTER TABLE studio_request DROP CONSTRAINT studio_request_kind_check,
    ADD CONSTRAINT studio_request_kind_check CHECK (kind IN ('replica.drain', 'job.trigger'));
