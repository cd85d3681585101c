-- Writes that bypassed the audit, and an event writer that any caller could
-- stall or feed (issue 21, the second adversarial pass).
--
-- 1. The event writer (00006) takes one row lock that orders event ids,
--    and holds it until its caller commits. A caller in a long statement
--    after it (`select studio_event_runs(...); select pg_sleep(45)`) held
--    it for that long, and every other writer waited: `jobs resume` took
--    42 s. Now:
--      - both writer functions wait for that lock at most 10 s
--        (lock_timeout, a SET clause of the function, so it applies to
--        their own statements only); past it the writer's statement fails
--        with SQLSTATE 55P03 and its transaction rolls back (an audited
--        command fails and says so, a run store flush is retried);
--      - the guard against a caller that stops between the writer and its
--        commit (idle_in_transaction_session_timeout) is 5 s, less than
--        that bound, so a stopped caller never makes another writer fail:
--        the server ends it first;
--      - studio_event_runs writes only events that describe run rows the
--        calling transaction wrote itself: seq, job_id, replica_id,
--        cluster and outcome must match a studio_job_run row whose xmin is
--        the caller's transaction. The run store's flush, housekeeping and
--        registration all write the rows first, in the same transaction.
--        A role that may not write studio_job_run (the studio_sql_job role
--        of docs/roles.sql) can therefore write no run event at all, and
--        one that may (the replica role) describes only runs that are in
--        the table.
-- 2. studio_audit records the database role that wrote each row
--    (db_user, set by a trigger to current_user whatever the insert says;
--    NULL for the rows written before this migration).
-- 3. Operator changes need their audit row, in the same transaction, as
--    studio_request does since 00005: a deferred check at commit on
--    studio_job_setting (jobs pause/resume/set/forget), the DELETE of
--    studio_job_status (jobs forget) and of studio_replica (replicas
--    forget), and cluster_lease (leases add/remove/release; an operator's
--    UPDATE may only release: owner NULL, generation raised). The checks
--    bind the roles that may not register a replica (no INSERT on
--    studio_replica): the operator, the inspector, a sql job's role. The
--    replica role and the owner write these tables in their own work and
--    are not checked; the owner could drop the triggers anyway.
-- 4. shedlock: an operator's UPDATE may only lower lock_until, to now at
--    the latest (1 s of slack for a timestamp(3) column's rounding), with
--    its locks.release audit row. The check binds only roles without
--    INSERT on the table, so ShedLock's own role (Java or a replica) is
--    never checked and never sees a difference; no column is added. It is
--    created only when the table is shedlock, owned by the migrating role
--    (a table a Java installation owns is left as it is; docs/locks.md).
--
-- One transaction, and a bounded wait for the tables' locks, as in 00007.

-- +goose Up
SET LOCAL lock_timeout = '5s';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_event_add(p_event text, p_data jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_id bigint;
BEGIN
    -- Deferred triggers call this at commit; a writer that SET
    -- CONSTRAINTS ALL IMMEDIATE calls it at once and could then sit in its
    -- transaction holding the lock below: the server ends such a session
    -- after 5 s idle, within the 10 s any other writer waits for the lock.
    PERFORM set_config('idle_in_transaction_session_timeout', '5s', true);
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
CREATE OR REPLACE FUNCTION studio_event_runs(p_data jsonb[], p_notify text[] DEFAULT '{}') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    v_first bigint;
    v_payload text;
    v_bad jsonb;
BEGIN
    IF cardinality(p_data) > 0 THEN
        -- Each event must describe a run row this transaction wrote.
        SELECT t.d INTO v_bad FROM unnest(p_data) AS t(d)
        WHERE NOT EXISTS (
            SELECT 1 FROM studio_job_run r
            WHERE r.seq = CASE WHEN jsonb_typeof(t.d) = 'object' AND jsonb_typeof(t.d->'seq') = 'number'
                                    AND t.d->>'seq' ~ '^[0-9]{1,18}$'
                               THEN (t.d->>'seq')::bigint END
              AND r.xmin = pg_current_xact_id()::xid
              AND r.job_id = t.d->>'job_id' AND r.replica_id = t.d->>'replica_id'
              AND r.outcome = t.d->>'outcome' AND coalesce(r.cluster, '') = coalesce(t.d->>'cluster', ''))
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'studio_event_runs: the event % describes no run row this transaction wrote (seq, job_id, replica_id, cluster and outcome must match one)',
                left(coalesce(v_bad::text, 'null'), 120)
                USING ERRCODE = 'check_violation';
        END IF;
        -- The caller commits after one more statement. If it stops before
        -- (kill -STOP, a paused VM) it would hold the lock below, and so
        -- stall every event writer of the installation, for as long as it
        -- stays stopped: end such a session after 5 s idle, for this
        -- transaction only (replicas pin the setting to 0 otherwise),
        -- within the 10 s any other writer waits for the lock.
        PERFORM set_config('idle_in_transaction_session_timeout', '5s', true);
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

-- The audit row of an operator change, written in this transaction.
-- studio_audit_target finds a target's rows without reading the table.
CREATE INDEX studio_audit_target ON studio_audit (target);

-- +goose StatementBegin
CREATE FUNCTION studio_audited_here(p_actions text[], p_target text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM studio_audit a
                   WHERE a.target = p_target AND a.action = ANY(p_actions)
                     AND a.xmin = pg_current_xact_id()::xid)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_audit_db_user() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.db_user := current_user;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION studio_operator_write_audited() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_row record;
    v_ok boolean;
    v_what text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_row := OLD;
    ELSE
        v_row := NEW;
    END IF;
    CASE TG_TABLE_NAME
    WHEN 'studio_job_setting' THEN
        v_what := 'the setting of job ' || v_row.job_id;
        v_ok := studio_audited_here(ARRAY['jobs.pause', 'jobs.resume', 'jobs.set', 'jobs.forget'], v_row.job_id);
    WHEN 'studio_job_status' THEN
        -- A per-cluster job's rows are its duties' (job@cluster).
        v_what := 'the status row of ' || v_row.job_id || ' on ' || v_row.replica_id;
        v_ok := studio_audited_here(ARRAY['jobs.forget'], v_row.job_id)
             OR studio_audited_here(ARRAY['jobs.forget'], split_part(v_row.job_id, '@', 1));
    WHEN 'studio_replica' THEN
        v_what := 'the row of replica ' || v_row.id;
        v_ok := studio_audited_here(ARRAY['replicas.forget'], v_row.id);
    WHEN 'cluster_lease' THEN
        v_what := 'the lease of cluster ' || v_row.cluster;
        v_ok := CASE TG_OP
            WHEN 'INSERT' THEN studio_audited_here(ARRAY['leases.add'], NEW.cluster)
            WHEN 'DELETE' THEN studio_audited_here(ARRAY['leases.remove'], OLD.cluster)
            ELSE NEW.cluster = OLD.cluster AND NEW.owner IS NULL AND NEW.generation > OLD.generation
                 AND studio_audited_here(ARRAY['leases.release'], NEW.cluster) END;
    ELSE
        -- shedlock (see above): only lower lock_until, to now at the latest.
        v_what := 'lock ' || NEW.name;
        v_ok := NEW.lock_until <= OLD.lock_until
            AND CASE WHEN pg_typeof(NEW.lock_until) = 'timestamp with time zone'::regtype
                     THEN NEW.lock_until::timestamptz <= clock_timestamp() + interval '1 second'
                     ELSE NEW.lock_until::timestamp <= timezone('utc', clock_timestamp()) + interval '1 second' END
            AND studio_audited_here(ARRAY['locks.release'], NEW.name);
    END CASE;
    IF NOT v_ok THEN
        RAISE EXCEPTION '%: % of % by role % needs its own studio_audit row, written in the same transaction, by the studioctl command that makes this change (docs/roles.md)',
            TG_TABLE_NAME, lower(TG_OP), v_what, current_user
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The guards run as the caller: a search_path of the studio schema, then
-- pg_temp last, so no temporary studio_audit can pass them (00006).
-- +goose StatementBegin
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['studio_event_add(text, jsonb)', 'studio_event_runs(jsonb[], text[])',
                             'studio_audited_here(text[], text)', 'studio_audit_db_user()',
                             'studio_operator_write_audited()'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION studio_event_add(text, jsonb) SET lock_timeout = '10s';
ALTER FUNCTION studio_event_runs(jsonb[], text[]) SET lock_timeout = '10s';

ALTER TABLE studio_audit ADD COLUMN db_user text NULL;
ALTER TABLE studio_audit ALTER COLUMN db_user SET DEFAULT current_user;
CREATE TRIGGER studio_audit_db_user BEFORE INSERT OR UPDATE ON studio_audit
    FOR EACH ROW EXECUTE FUNCTION studio_audit_db_user();

-- Checked at commit, when the command's audit row is written whatever the
-- order of its statements; only for roles that may not register a replica.
CREATE CONSTRAINT TRIGGER studio_job_setting_audited AFTER INSERT OR UPDATE OR DELETE ON studio_job_setting
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NOT has_table_privilege('studio_replica'::regclass, 'INSERT'))
    EXECUTE FUNCTION studio_operator_write_audited();
CREATE CONSTRAINT TRIGGER studio_job_status_audited AFTER DELETE ON studio_job_status
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NOT has_table_privilege('studio_replica'::regclass, 'INSERT'))
    EXECUTE FUNCTION studio_operator_write_audited();
CREATE CONSTRAINT TRIGGER studio_replica_audited AFTER DELETE ON studio_replica
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NOT has_table_privilege('studio_replica'::regclass, 'INSERT'))
    EXECUTE FUNCTION studio_operator_write_audited();
CREATE CONSTRAINT TRIGGER cluster_lease_audited AFTER INSERT OR UPDATE OR DELETE ON cluster_lease
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NOT has_table_privilege('studio_replica'::regclass, 'INSERT'))
    EXECUTE FUNCTION studio_operator_write_audited();

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_class c
               WHERE c.oid = to_regclass('shedlock') AND c.relkind = 'r'
                 AND pg_has_role(current_user, c.relowner, 'USAGE'))
       AND (SELECT count(*) FROM pg_attribute
            WHERE attrelid = 'shedlock'::regclass AND NOT attisdropped
              AND attname IN ('name', 'lock_until')) = 2
    THEN
        CREATE CONSTRAINT TRIGGER shedlock_operator_audited AFTER UPDATE ON shedlock
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
            WHEN (NOT has_table_privilege('shedlock'::regclass, 'INSERT'))
            EXECUTE FUNCTION studio_operator_write_audited();
    ELSE
        RAISE NOTICE 'shedlock is not a table of this role: no check on operators'' updates of it (docs/locks.md)';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'shedlock_operator_audited' AND tgrelid = to_regclass('shedlock')) THEN
        DROP TRIGGER shedlock_operator_audited ON shedlock;
    END IF;
END
$$;
-- +goose StatementEnd
DROP TRIGGER cluster_lease_audited ON cluster_lease;
DROP TRIGGER studio_replica_audited ON studio_replica;
DROP TRIGGER studio_job_status_audited ON studio_job_status;
DROP TRIGGER studio_job_setting_audited ON studio_job_setting;
DROP TRIGGER studio_audit_db_user ON studio_audit;
ALTER TABLE studio_audit DROP COLUMN db_user;
DROP FUNCTION studio_operator_write_audited();
DROP FUNCTION studio_audit_db_user();
DROP FUNCTION studio_audited_here(text[], text);
DROP INDEX studio_audit_target;

-- 00006's bodies. CREATE OR REPLACE keeps the grants but not the SET
-- clauses: search_path is set again below, as 00006 does, and lock_timeout
-- is gone with the replaced definitions.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION studio_event_add(p_event text, p_data jsonb) RETURNS void
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
CREATE OR REPLACE FUNCTION studio_event_runs(p_data jsonb[], p_notify text[] DEFAULT '{}') RETURNS void
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
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['studio_event_add(text, jsonb)', 'studio_event_runs(jsonb[], text[])'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd
