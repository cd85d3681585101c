-- The end of each per-cluster duty's last run, per cluster (issue 22,
-- defect 1 of the adversarial pass): what a missed stretch of the duty
-- counts from when a replica acquires the cluster (docs/occurrences.md).
--
-- The run history cannot say it: housekeeping keeps the newest successful
-- runs per job across all its clusters, so with a dozen clusters a
-- cluster's last run is pruned within minutes, and an outage of the
-- cluster after that was not recorded. This table holds one row per duty
-- and cluster, written by the run store's flush in the statement that
-- writes the runs (a data-modifying CTE: no statement more), and no
-- retention prunes it.
--
-- prev_*: the end before the last one. The new owner's first run starts
-- at once and may be flushed before the acquisition's read; that read
-- takes the newest end whose run started before the acquisition.

-- +goose Up
CREATE TABLE studio_duty_end (
    job_id          text        NOT NULL,
    cluster         text        NOT NULL,
    last_ended_at   timestamptz NOT NULL,
    last_started_at timestamptz NOT NULL,
    last_replica_id text        NOT NULL DEFAULT '',
    last_seq        bigint      NULL,
    prev_ended_at   timestamptz NULL,
    prev_started_at timestamptz NULL,
    PRIMARY KEY (job_id, cluster)
);

-- +goose Down
DROP TABLE studio_duty_end;
