-- Requests are audited and claimed once, whatever role writes them (issue 7,
-- the adversarial pass). A role that may INSERT into studio_request (the
-- operator) could write a drain with no audit row, or one that points at
-- an old audit row; a role that may UPDATE it (the replica) could reopen a
-- claimed request or rewrite who asked. These triggers make both
-- impossible: a request needs its own studio_audit row, for the same kind
-- and target, written in the same transaction; a claim only sets done_at
-- and done_by, once.
-- (00004 is left to the shared-schedule migration of issue 9.)

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION studio_request_audited() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE FUNCTION studio_request_claimed_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Pruning the audit log sets audit_seq to NULL (ON DELETE SET NULL):
    -- the one other change allowed.
    IF NEW.audit_seq IS NULL AND OLD.audit_seq IS NOT NULL
       AND (NEW.done_at, NEW.done_by) IS NOT DISTINCT FROM (OLD.done_at, OLD.done_by)
       AND (NEW.kind, NEW.target, NEW.replica_id, NEW.incarnation, NEW.requested_at, NEW.requested_by, NEW.reason, NEW.expires_at)
           IS NOT DISTINCT FROM (OLD.kind, OLD.target, OLD.replica_id, OLD.incarnation, OLD.requested_at, OLD.requested_by, OLD.reason, OLD.expires_at)
    THEN
        RETURN NEW;
    END IF;
    IF OLD.done_at IS NOT NULL OR NEW.done_at IS NULL OR NEW.done_by IS NULL
       OR (NEW.kind, NEW.target, NEW.replica_id, NEW.incarnation, NEW.requested_at, NEW.requested_by, NEW.reason, NEW.audit_seq, NEW.expires_at)
          IS DISTINCT FROM (OLD.kind, OLD.target, OLD.replica_id, OLD.incarnation, OLD.requested_at, OLD.requested_by, OLD.reason, OLD.audit_seq, OLD.expires_at)
    THEN
        RAISE EXCEPTION 'studio_request %: a request is claimed once, and a claim sets only done_at and done_by', OLD.seq
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER studio_request_audited BEFORE INSERT ON studio_request
    FOR EACH ROW EXECUTE FUNCTION studio_request_audited();
CREATE TRIGGER studio_request_claimed_once BEFORE UPDATE ON studio_request
    FOR EACH ROW EXECUTE FUNCTION studio_request_claimed_once();

-- +goose Down
DROP TRIGGER studio_request_claimed_once ON studio_request;
DROP TRIGGER studio_request_audited ON studio_request;
DROP FUNCTION studio_request_claimed_once();
DROP FUNCTION studio_request_audited();
