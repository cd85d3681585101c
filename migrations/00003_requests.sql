-- Control requests (issue 7): a drain or a trigger is a row that the
-- operator command writes in the same transaction as its studio_audit row.
-- The bus signal only wakes replicas; a replica acts on a pending row
-- alone, and claims it with a conditional UPDATE so it is acted on once.
-- NOTIFY needs no privilege; INSERT on this table does.

-- +goose Up
CREATE TABLE studio_request (
    seq          bigserial   PRIMARY KEY,
    kind         text        NOT NULL CHECK (kind IN ('replica.drain', 'job.trigger')),
    -- The replica id of a drain, the job id of a trigger.
    target       text        NOT NULL,
    -- The one replica that may claim the row, and the incarnation (the
    -- process) it had when the request was made: a drain, and a trigger of
    -- an instance job (one row per replica hosting it). NULL for the trigger
    -- of an installation job, which any replica hosting the job may claim.
    replica_id   text        NULL,
    incarnation  uuid        NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    requested_by text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    audit_seq    bigint      NULL REFERENCES studio_audit (seq) ON DELETE SET NULL,
    -- A request not claimed by then is void.
    expires_at   timestamptz NOT NULL,
    done_at      timestamptz NULL,
    done_by      text        NULL,
    CHECK ((replica_id IS NULL) = (incarnation IS NULL)),
    CHECK (kind <> 'replica.drain' OR replica_id = target),
    CHECK ((done_at IS NULL) = (done_by IS NULL))
);
CREATE INDEX studio_request_pending ON studio_request (kind, target) WHERE done_at IS NULL;
CREATE INDEX studio_request_requested ON studio_request (requested_at);

-- +goose Down
DROP TABLE studio_request;
