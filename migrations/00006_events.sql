-- The event stream of /v1/events (issue 12, docs/events.md).
--
-- studio_event holds what happened in the installation, one row per event,
-- with an id that orders events installation-wide:
--   - runs that started or ended: the run store's flush writes them in one
--     statement per flush (studio_event_runs, below), with the data built
--     by the store, and so does housekeeping when it marks a gone
--     replica's runs interrupted. A trigger per run row, or building the
--     data in SQL, cost the database two to three times its CPU at 10,000
--     jobs (docs/benchmarks.md, "Event stream");
--   - triggers write the rest, which is rare: a replica's state changed
--     (studio_replica), a lease changed owner or a cluster was added or
--     removed (cluster_lease), an operator action was audited (studio_audit;
--     a lock release also gives a lock event).
-- No trigger touches shedlock, which Java nodes share.
--
-- Why a table and not the seqs of runs and audit rows: state changes and
-- lease moves have no history row, and one id across all kinds needs one
-- sequence. Ids are handed out in commit order, so a reader that has seen
-- id N has seen every committed event below N and will never see a later
-- one below it: every writer locks the one row of studio_event_writer
-- before it takes an id, and holds the lock until its commit ends. Not an
-- advisory lock: any role that can connect may take any advisory lock, so
-- a read-only role could have stalled every writer of the installation;
-- this row can be locked only by its owner, through the functions below.
-- The lock is taken after the writer's row locks:
--   - the triggers are deferred constraint triggers, so they run at commit;
--   - studio_event_runs is the last statement of a flush but the status
--     upsert of the flush's own rows (no other writer takes those locks),
--     and housekeeping's one statement locks its rows first.
-- A transaction that wrote events sends ONE notification on the bus, a
-- frame without data (truncated) naming its first id: readers read the
-- table after the last id they have, so a run store flush of a thousand
-- runs is one NOTIFY, a lost notification loses nothing, and a forged one
-- (any role can NOTIFY) shows nothing that is not in the table.
-- Housekeeping prunes the table (internal/jobstore).

-- +goose Up
CREATE TABLE studio_event (
    id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at    timestamptz NOT NULL DEFAULT now(),
    event text        NOT NULL CHECK (event IN ('run', 'replica', 'lease', 'lock', 'audit')),
    data  jsonb       NOT NULL CHECK (jsonb_typeof(data) = 'object')
);
-- The lock that orders ids (see above). No role has any privilege on it.
CREATE TABLE studio_event_writer (
    one boolean PRIMARY KEY DEFAULT true CHECK (one)
);
INSERT INTO studio_event_writer VALUES (true);
REVOKE ALL ON studio_event_writer FROM PUBLIC;
-- For pruning by age; ids follow time, so a BRIN index is enough and costs
-- next to nothing per insert.
CREATE INDEX studio_event_at ON studio_event USING brin (at);

-- +goose StatementBegin
CREATE FUNCTION studio_event_add(p_event text, p_data jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Deferred triggers call this at commit; a writer that SET
    -- CONSTRAINTS ALL IMMEDIATE calls it at once and could then sit in its
    -- transaction holding the lock below: as in studio_event_runs, the
    -- server ends such a session after 10 s idle.
    PERFORM set_config('idle_in_transaction_session_timeout', '10s', true);
    PERFORM 1 FROM studio_event_writer FOR UPDATE;
    INSERT INTO studio_event (event, data) VALUES (p_event, p_data) RETURNING id INTO v_id;
    IF current_setting('studio.event_notified', true) IS DISTINCT FROM '1' THEN
        PERFORM set_config('studio.event_notified', '1', true);
        PERFORM pg_notify('studio', json_build_object('v', 1, 'type', 'frame', 'stream', 'events',
            'id', v_id::text, 'event', p_event, 'truncated', true)::text);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_event_time(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
-- +goose StatementEnd

-- A run's event data, as the run store builds it too (internal/jobstore
-- runEventData): housekeeping uses it for the runs it interrupts.
-- +goose StatementBegin
CREATE FUNCTION studio_event_run_data(r studio_job_run) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'seq', r.seq, 'job_id', r.job_id, 'replica_id', r.replica_id,
        'cluster', coalesce(r.cluster, ''), 'outcome', r.outcome,
        'started_at', studio_event_time(r.started_at),
        'finished_at', studio_event_time(r.finished_at),
        'duration_seconds', round(extract(epoch FROM r.finished_at - r.started_at)::numeric, 3),
        'error', r.error))
$$;
-- +goose StatementEnd

-- The run events of one flush, given as data (the store builds it, so the
-- database only stores it), and the flush's seqs batch, in one statement.
-- +goose StatementBegin
CREATE FUNCTION studio_event_runs(p_data jsonb[], p_notify text[] DEFAULT '{}') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_first bigint;
    v_payload text;
BEGIN
    IF cardinality(p_data) > 0 THEN
        -- The caller commits after one more statement. If it stops before
        -- (kill -STOP, a paused VM) it would hold the lock below, and so
        -- stall every event writer of the installation, for as long as it
        -- stays stopped: end such a session after 10 s idle, for this
        -- transaction only (replicas pin the setting to 0 otherwise).
        PERFORM set_config('idle_in_transaction_session_timeout', '10s', true);
        PERFORM 1 FROM studio_event_writer FOR UPDATE;
        WITH ins AS (
            INSERT INTO studio_event (event, data)
            SELECT 'run', t.d FROM unnest(p_data) WITH ORDINALITY AS t(d, i) ORDER BY t.i
            RETURNING id)
        SELECT min(id) INTO v_first FROM ins;
        IF current_setting('studio.event_notified', true) IS DISTINCT FROM '1' THEN
            PERFORM set_config('studio.event_notified', '1', true);
            PERFORM pg_notify('studio', json_build_object('v', 1, 'type', 'frame', 'stream', 'events',
                'id', v_first::text, 'event', 'run', 'truncated', true)::text);
        END IF;
    END IF;
    FOREACH v_payload IN ARRAY coalesce(p_notify, '{}') LOOP
        PERFORM pg_notify('studio', v_payload);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_event_replica() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM studio_event_add('replica', jsonb_build_object('id', OLD.id, 'state', 'forgotten',
            'previous_state', OLD.state, 'host', OLD.host));
    ELSE
        PERFORM studio_event_add('replica', jsonb_strip_nulls(jsonb_build_object('id', NEW.id, 'state', NEW.state,
            'previous_state', CASE WHEN TG_OP = 'UPDATE' AND OLD.incarnation = NEW.incarnation THEN OLD.state END,
            'incarnation', NEW.incarnation, 'host', NEW.host, 'pid', NEW.pid)));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_event_lease() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM studio_event_add('lease', jsonb_build_object('cluster', OLD.cluster, 'owner', NULL,
            'previous_owner', OLD.owner, 'generation', OLD.generation, 'removed', true));
    ELSE
        PERFORM studio_event_add('lease', jsonb_build_object('cluster', NEW.cluster, 'owner', NEW.owner,
            'previous_owner', CASE WHEN TG_OP = 'UPDATE' THEN OLD.owner END, 'generation', NEW.generation,
            'added', TG_OP = 'INSERT'));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_event_audit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM studio_event_add('audit', jsonb_build_object('seq', NEW.seq, 'at', studio_event_time(NEW.at),
        'actor', NEW.actor, 'action', NEW.action, 'target', NEW.target, 'reason', NEW.reason));
    IF NEW.action LIKE 'locks.%' THEN
        PERFORM studio_event_add('lock', jsonb_build_object('name', NEW.target,
            'action', substr(NEW.action, length('locks.') + 1), 'actor', NEW.actor, 'reason', NEW.reason,
            'audit_seq', NEW.seq));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The functions run as the tables' owner, so each gets a search_path of
-- the studio schema and then pg_temp, set here. pg_temp must be named,
-- and last: a search_path that does not name it (as SET search_path FROM
-- CURRENT gives) searches the caller's temporary tables first, so an
-- operator could have shadowed studio_event with a temporary table of its
-- own, hiding the events of its own audited actions, or shadowed
-- studio_event_writer and broken the order of ids.
-- The request guards of migration 00005 get the same: they run as the
-- caller, and an operator's temporary studio_audit passed the check that a
-- request has its own audit row (a drain could point at an old audit row
-- of another action).
-- +goose StatementBegin
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['studio_event_add(text, jsonb)', 'studio_event_runs(jsonb[], text[])',
                             'studio_event_replica()', 'studio_event_lease()', 'studio_event_audit()',
                             'studio_request_audited()', 'studio_request_claimed_once()'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Deferred: they run at commit, after every row lock (see above).
CREATE CONSTRAINT TRIGGER studio_event_replica_insert AFTER INSERT ON studio_replica
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_event_replica();
CREATE CONSTRAINT TRIGGER studio_event_replica_update AFTER UPDATE ON studio_replica
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.incarnation IS DISTINCT FROM NEW.incarnation)
    EXECUTE FUNCTION studio_event_replica();
CREATE CONSTRAINT TRIGGER studio_event_replica_delete AFTER DELETE ON studio_replica
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_event_replica();
CREATE CONSTRAINT TRIGGER studio_event_lease_insert AFTER INSERT ON cluster_lease
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_event_lease();
CREATE CONSTRAINT TRIGGER studio_event_lease_update AFTER UPDATE ON cluster_lease
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.owner IS DISTINCT FROM NEW.owner)
    EXECUTE FUNCTION studio_event_lease();
CREATE CONSTRAINT TRIGGER studio_event_lease_delete AFTER DELETE ON cluster_lease
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_event_lease();
CREATE CONSTRAINT TRIGGER studio_event_audit_insert AFTER INSERT ON studio_audit
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_event_audit();

-- Only the triggers, the run store and housekeeping write events: no role
-- may call the functions directly; docs/roles.sql grants studio_event_runs
-- to the replica role, which writes the runs it describes anyway.
REVOKE EXECUTE ON FUNCTION studio_event_add(text, jsonb), studio_event_runs(jsonb[], text[]), studio_event_replica(),
    studio_event_lease(), studio_event_audit() FROM PUBLIC;

-- +goose Down
ALTER FUNCTION studio_request_claimed_once() RESET search_path;
ALTER FUNCTION studio_request_audited() RESET search_path;
DROP TRIGGER studio_event_audit_insert ON studio_audit;
DROP TRIGGER studio_event_lease_delete ON cluster_lease;
DROP TRIGGER studio_event_lease_update ON cluster_lease;
DROP TRIGGER studio_event_lease_insert ON cluster_lease;
DROP TRIGGER studio_event_replica_delete ON studio_replica;
DROP TRIGGER studio_event_replica_update ON studio_replica;
DROP TRIGGER studio_event_replica_insert ON studio_replica;
DROP FUNCTION studio_event_audit();
DROP FUNCTION studio_event_lease();
DROP FUNCTION studio_event_replica();
DROP FUNCTION studio_event_runs(jsonb[], text[]);
DROP FUNCTION studio_event_run_data(studio_job_run);
DROP FUNCTION studio_event_time(timestamptz);
DROP FUNCTION studio_event_add(text, jsonb);
DROP TABLE studio_event_writer;
DROP TABLE studio_event;
