-- The installation-wide schedule of issue 9: one row per installation job
-- with the end of its last run anywhere, in database time (now() of the
-- replica that ran it). Every replica takes the job's next due time from
-- it: `every` after last_ended_at, or the next cron time. Java nodes do not
-- write it: their runs are guarded by the ShedLock lock alone, which this
-- does not change.
--
-- clock_offset_seconds is database time minus the replica's clock, as its
-- heartbeat last measured it (round trip taken into account).

-- +goose Up
CREATE TABLE studio_job_schedule (
    job_id          text        PRIMARY KEY,
    last_ended_at   timestamptz NOT NULL,
    last_started_at timestamptz NULL,
    last_replica_id text        NOT NULL DEFAULT '',
    last_seq        bigint      NULL,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE studio_replica ADD COLUMN clock_offset_seconds double precision NULL;

-- +goose Down
ALTER TABLE studio_replica DROP COLUMN clock_offset_seconds;
DROP TABLE studio_job_schedule;
