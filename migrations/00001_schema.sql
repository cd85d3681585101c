-- The whole schema of SPEC §3. Later migrations only add to it.

-- +goose Up

-- ShedLock's documented PostgreSQL table. It is created only if absent: a
-- table made by a Java installation (TIMESTAMP(3) or TIMESTAMPTZ columns) is
-- used as it is.
CREATE TABLE IF NOT EXISTS shedlock (
    name       VARCHAR(64)  NOT NULL,
    lock_until TIMESTAMP    NOT NULL,
    locked_at  TIMESTAMP    NOT NULL,
    locked_by  VARCHAR(255) NOT NULL,
    PRIMARY KEY (name)
);

CREATE TABLE studio_replica (
    id           text        PRIMARY KEY,
    incarnation  uuid        NOT NULL,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    version      text        NOT NULL,
    http_addr    text        NOT NULL DEFAULT '',
    state        text        NOT NULL CHECK (state IN ('starting', 'ready', 'draining', 'stopped')),
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz NULL
);

CREATE TABLE cluster_lease (
    cluster     text        PRIMARY KEY,
    owner       text        NULL,
    acquired_at timestamptz NULL,
    renewed_at  timestamptz NULL,
    generation  bigint      NOT NULL DEFAULT 0
);

CREATE TABLE studio_job_status (
    replica_id                text        NOT NULL,
    job_id                    text        NOT NULL,
    scope                     text        NOT NULL CHECK (scope IN ('installation', 'instance')),
    schedule                  text        NOT NULL DEFAULT '',
    next_fire_at              timestamptz NULL,
    running                   boolean     NOT NULL DEFAULT false,
    last_started_at           timestamptz NULL,
    last_finished_at          timestamptz NULL,
    last_outcome              text        NULL,
    last_error                text        NULL,
    last_success_at           timestamptz NULL,
    last_skipped_elsewhere_at timestamptz NULL,
    runs                      bigint      NOT NULL DEFAULT 0,
    failures                  bigint      NOT NULL DEFAULT 0,
    timeouts                  bigint      NOT NULL DEFAULT 0,
    lock_lost                 bigint      NOT NULL DEFAULT 0,
    overruns                  bigint      NOT NULL DEFAULT 0,
    skipped_elsewhere         bigint      NOT NULL DEFAULT 0,
    invalid_schedule          text        NULL,
    paused                    boolean     NOT NULL DEFAULT false,
    updated_at                timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replica_id, job_id)
);

CREATE TABLE studio_job_run (
    seq         bigserial   PRIMARY KEY,
    job_id      text        NOT NULL,
    replica_id  text        NOT NULL,
    cluster     text        NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed', 'timed_out', 'lock_lost', 'interrupted')),
    error       text        NULL,
    output_tail text        NULL
);
CREATE INDEX studio_job_run_job_seq ON studio_job_run (job_id, seq DESC);
CREATE INDEX studio_job_run_running ON studio_job_run (replica_id) WHERE outcome = 'running';

CREATE TABLE studio_job_setting (
    job_id     text        PRIMARY KEY,
    schedule   text        NULL,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL DEFAULT ''
);

CREATE TABLE studio_audit (
    seq    bigserial   PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL,
    reason text        NOT NULL DEFAULT '',
    detail jsonb       NOT NULL DEFAULT '{}'::jsonb
);

-- +goose Down
DROP TABLE studio_audit;
DROP TABLE studio_job_setting;
DROP TABLE studio_job_run;
DROP TABLE studio_job_status;
DROP TABLE cluster_lease;
DROP TABLE studio_replica;
-- shedlock is left in place: it may belong to a Java installation.
