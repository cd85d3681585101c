-- Least-privilege roles for studioctl (docs/roles.md explains each grant).
--
-- Run as the owner of the studio tables (the role that ran `studioctl migrate
-- up`), in the studio database, with psql:
--
--     psql "$OWNER_URL" -v ON_ERROR_STOP=1 -f docs/roles.sql
--
-- and again after every `studioctl migrate up` that adds a table. It is
-- idempotent. The role that runs it needs CREATEROLE (or is a superuser):
-- it creates roles and makes studio_operator a member of studio_inspector.
-- An owner without CREATEROLE fails at the first CREATE ROLE ("permission
-- denied to create role") and nothing is granted: have an administrator
-- run it as a superuser, or give the owner CREATEROLE for it.
--
-- It creates four group roles without LOGIN; give them to login roles
-- with, for example:
--
--     CREATE ROLE alice LOGIN PASSWORD '...' IN ROLE studio_operator;
--     CREATE ROLE web   LOGIN PASSWORD '...' IN ROLE studio_replica;
--     CREATE ROLE web_jobs LOGIN PASSWORD '...' IN ROLE studio_sql_job;
--
-- Roles belong to the whole server; the grants belong to this database.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'studio_inspector') THEN
        CREATE ROLE studio_inspector NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'studio_operator') THEN
        CREATE ROLE studio_operator NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'studio_replica') THEN
        CREATE ROLE studio_replica NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'studio_sql_job') THEN
        CREATE ROLE studio_sql_job NOLOGIN;
    END IF;
END
$$;

-- Every role finds the tables in the schema that holds them.
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO studio_inspector, studio_operator, studio_replica',
                   (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = 'studio_replica'::regclass));
END
$$;

-- The inspector: every list, show and status command, with SELECT only.
GRANT SELECT ON shedlock, studio_replica, cluster_lease, studio_job_status, studio_job_run,
    studio_job_setting, studio_audit, studio_request, studio_job_schedule, studio_event, goose_db_version,
    studio_occurrence, studio_occurrences, studio_duty_end, studio_fence, studio_backfill, studio_job_definition
    TO studio_inspector;
-- jobs overdue, doctor's overdue_jobs, a monitor's query (migration 00011):
-- it runs with the caller's rights and reads only the tables above (so
-- a role without them, studio_sql_job, gets "permission denied").
GRANT EXECUTE ON FUNCTION studio_overdue_jobs(interval) TO studio_inspector;

-- The operator: the inspector, plus the writes its commands make.
GRANT studio_inspector TO studio_operator;
-- locks release: a compare-and-set on lock_until (never a DELETE). A
-- trigger (migration 00009) lets the operator only lower it, to now at the
-- latest, with its locks.release audit row.
GRANT UPDATE (lock_until) ON shedlock TO studio_operator;
-- every change writes its audit row; drain and trigger are request rows.
GRANT INSERT ON studio_audit, studio_request TO studio_operator;
GRANT USAGE ON SEQUENCE studio_audit_seq_seq, studio_request_seq_seq TO studio_operator;
-- jobs backfill: the occurrences of its request, in the request's
-- transaction (a trigger of migration 00016 checks it).
GRANT INSERT ON studio_backfill TO studio_operator;
-- jobs pause, resume, set.
GRANT INSERT, UPDATE ON studio_job_setting TO studio_operator;
-- replicas forget.
GRANT DELETE ON studio_replica TO studio_operator;
-- jobs forget: the status rows replicas that no longer run a job left, and
-- its setting once none is left.
GRANT DELETE ON studio_job_status, studio_job_setting TO studio_operator;
-- leases add, remove, release (an UPDATE that only sets owner to NULL and
-- raises the generation).
GRANT INSERT, DELETE ON cluster_lease TO studio_operator;
GRANT UPDATE (owner, acquired_at, renewed_at, generation) ON cluster_lease TO studio_operator;
-- Each of these writes needs the command's studio_audit row in the same
-- transaction: triggers of migration 00009 refuse it otherwise, for every
-- role that may not register a replica.

-- The replica: `studioctl run` with database.migrate: off (the owner migrates).
GRANT SELECT, INSERT, UPDATE ON shedlock TO studio_replica;
GRANT SELECT, INSERT, UPDATE, DELETE ON studio_replica, studio_job_status, studio_job_run, cluster_lease
    TO studio_replica;
-- A replica claims a request by setting done_at and done_by, nothing else
-- (a trigger also refuses reopening a claimed one); housekeeping prunes.
GRANT SELECT, DELETE ON studio_request TO studio_replica;
GRANT UPDATE (done_at, done_by) ON studio_request TO studio_replica;
-- the installation-wide schedule (one row per installation job).
GRANT SELECT, INSERT, UPDATE ON studio_job_schedule TO studio_replica;
GRANT SELECT ON studio_job_setting, studio_audit, goose_db_version TO studio_replica;
-- the event stream (/v1/events): its triggers and studio_event_runs (the
-- run store's flush) write it as its owner; a replica reads it for its
-- clients and housekeeping prunes it.
GRANT SELECT, DELETE ON studio_event TO studio_replica;
GRANT EXECUTE ON FUNCTION studio_event_runs(jsonb[], text[]) TO studio_replica;
GRANT USAGE ON SEQUENCE studio_job_run_seq_seq TO studio_replica;
-- occurrences (migration 00010): a replica records skips and misses (the
-- insert's trigger writes their events as its owner) and housekeeping
-- prunes them.
GRANT SELECT, INSERT, DELETE ON studio_occurrence TO studio_replica;
GRANT SELECT ON studio_occurrences TO studio_replica;
GRANT USAGE ON SEQUENCE studio_occurrence_id_seq TO studio_replica;
-- each duty's last end per cluster (migration 00012), written by the run
-- store's flush; never pruned.
GRANT SELECT, INSERT, UPDATE ON studio_duty_end TO studio_replica;
-- each lock's fencing token (migration 00017), advanced in the statement
-- that takes the lock.
GRANT SELECT, INSERT, UPDATE ON studio_fence TO studio_replica;
-- each replica's job definitions (migration 00015): replaced at each
-- start; housekeeping removes those of gone replicas.
GRANT SELECT, INSERT, UPDATE, DELETE ON studio_job_definition TO studio_replica;
-- studio_job_overdue_seconds (/metrics): the overdue jobs, as the
-- inspector reads them (its tables are granted above).
GRANT EXECUTE ON FUNCTION studio_overdue_jobs(interval) TO studio_replica;
-- backfill occurrences (migration 00016): a replica claims one and ends
-- it; the rows go with their request (housekeeping prunes requests).
GRANT SELECT ON studio_backfill TO studio_replica;
GRANT UPDATE (claimed_by, claimed_at, run_seq, done_at, outcome) ON studio_backfill TO studio_replica;
-- a pause's end (migration 00014): a replica writes the resume of the
-- pauses whose end passed, with their audit rows, through this function
-- only (it runs as its owner; the role gets no UPDATE on the settings).
GRANT EXECUTE ON FUNCTION studio_end_pauses(text) TO studio_replica;

-- The role sql: jobs run as (database.sql_url, docs/jobs-sql.md): nothing
-- of studioctl's. It cannot write run history or call the event writer,
-- nor lock or change any studio table; grant it what its jobs need of your
-- own tables (GRANT DELETE ON sessions TO studio_sql_job).
REVOKE ALL ON shedlock, studio_replica, cluster_lease, studio_job_status, studio_job_run, studio_job_setting,
    studio_audit, studio_request, studio_job_schedule, studio_event, studio_backfill FROM studio_sql_job;
REVOKE EXECUTE ON FUNCTION studio_event_runs(jsonb[], text[]), studio_event_add(text, jsonb) FROM studio_sql_job;
