-- The event stream of /v1/events (issue 12, docs/events.md).
--
-- studio_event holds what happened in the installation, one row per event,
-- with an id that orders events installation-wide. Triggers write the rows:
-- a run started or finished (studio_job_run), a replica's state changed
-- (studio_replica), a lease changed owner or a cluster was added or removed
-- (cluster_lease), an operator action was audited (studio_audit; a lock
-- release also gives a lock event). No trigger touches shedlock, which Java
-- nodes share.
--
-- Why a table and not the seqs of runs and audit rows: state changes and
-- lease moves have no history row, and one id across all kinds needs one
-- sequence. Ids are handed out in commit order, so a reader that has seen
-- id N has seen every committed event below N and will never see a later
-- one below it:
--   - the triggers are deferred constraint triggers, so they run at commit,
--     after every row lock of the transaction has been taken;
--   - each takes one transaction-level advisory lock (key 1937012068,
--     'stud') before it takes an id, and holds it until the commit ends.
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
    data  jsonb       NOT NULL
);
CREATE INDEX studio_event_at ON studio_event (at);

-- +goose StatementBegin
CREATE FUNCTION studio_event_add(p_event text, p_data jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1937012068);
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

-- +goose StatementBegin
CREATE FUNCTION studio_event_run() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM studio_event_add('run', jsonb_strip_nulls(jsonb_build_object(
        'seq', NEW.seq, 'job_id', NEW.job_id, 'replica_id', NEW.replica_id,
        'cluster', coalesce(NEW.cluster, ''), 'outcome', NEW.outcome,
        'started_at', studio_event_time(NEW.started_at),
        'finished_at', studio_event_time(NEW.finished_at),
        'duration_seconds', round(extract(epoch FROM NEW.finished_at - NEW.started_at)::numeric, 3),
        'error', NEW.error)));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_event_replica() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
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
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
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
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
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

-- Deferred: they run at commit, after every row lock (see above).
CREATE CONSTRAINT TRIGGER studio_event_run_insert AFTER INSERT ON studio_job_run
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION studio_event_run();
CREATE CONSTRAINT TRIGGER studio_event_run_update AFTER UPDATE ON studio_job_run
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.finished_at IS DISTINCT FROM NEW.finished_at)
    EXECUTE FUNCTION studio_event_run();
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

-- Only the triggers write events: no role may call the functions directly.
REVOKE EXECUTE ON FUNCTION studio_event_add(text, jsonb), studio_event_run(), studio_event_replica(),
    studio_event_lease(), studio_event_audit() FROM PUBLIC;

-- +goose Down
DROP TRIGGER studio_event_audit_insert ON studio_audit;
DROP TRIGGER studio_event_lease_delete ON cluster_lease;
DROP TRIGGER studio_event_lease_update ON cluster_lease;
DROP TRIGGER studio_event_lease_insert ON cluster_lease;
DROP TRIGGER studio_event_replica_delete ON studio_replica;
DROP TRIGGER studio_event_replica_update ON studio_replica;
DROP TRIGGER studio_event_replica_insert ON studio_replica;
DROP TRIGGER studio_event_run_update ON studio_job_run;
DROP TRIGGER studio_event_run_insert ON studio_job_run;
DROP FUNCTION studio_event_audit();
DROP FUNCTION studio_event_lease();
DROP FUNCTION studio_event_replica();
DROP FUNCTION studio_event_run();
DROP FUNCTION studio_event_time(timestamptz);
DROP FUNCTION studio_event_add(text, jsonb);
DROP TABLE studio_event;
