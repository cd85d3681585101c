-- Configuration drift between replicas (issue 24 part 7,
-- docs/schedules.md "Drift between replicas"). Each replica publishes, at
-- the start of its runner, the effective definition of every job its
-- configuration declares: one row per (replica, job) with the
-- definition's fields (scope, schedule, zone, timeout, task, lock, ...;
-- secrets scrubbed) and their digest. A definition does not change while
-- the process runs (the configuration is read once), so the rows are
-- written once per start, in one transaction that replaces the replica
-- id's earlier rows, and never at a run: the run store's flush is
-- unchanged.
--
-- A per-cluster job (clusters: owned) is published under its own id,
-- whether or not this replica owns a cluster, so that the job's
-- definition is compared, not which replica holds which lease.
--
-- jobs list (drift), jobs diff and doctor's config_drift compare the rows
-- of live replicas. A live replica with no row at all (a replica older
-- than this migration) is unknown and left out of the comparison; a live
-- replica with rows but none of a job that another live replica declares
-- has that job "absent" (defined: absent), which is drift. builtin rows
-- (studio-housekeeping, declared in code) are published but not compared:
-- they differ between versions, not between configurations.
--
-- Rows of replicas that are gone stay until the replica id starts again
-- or housekeeping's status retention removes them; readers join
-- studio_replica and compare live replicas only.

-- +goose Up
CREATE TABLE studio_job_definition (
    replica_id   text        NOT NULL,
    job_id       text        NOT NULL,
    digest       text        NOT NULL,
    definition   jsonb       NOT NULL,
    builtin      boolean     NOT NULL DEFAULT false,
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replica_id, job_id)
);

-- +goose Down
DROP TABLE studio_job_definition;
