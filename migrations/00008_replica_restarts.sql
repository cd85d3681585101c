-- A crash followed by a restart under the same replica id (issue 20): the
-- new process takes the row over, and with it the only trace that the
-- previous incarnation died without a recorded stop. Registration now keeps
-- that trace here, so doctor's crashed_replicas counts the crash for 24h
-- although the replica is live again (internal/replicas, Register).
--
-- last_crash_at is the last heartbeat of the incarnation that ended
-- without a recorded stop, last_crash_incarnation that incarnation; both
-- stay until the next such restart (or the row is forgotten).
--
-- Adding a nullable column is a catalog change only, but it takes the
-- table's ACCESS EXCLUSIVE lock, and every heartbeat queues behind a wait
-- for it: as in 00007, lock_timeout bounds that wait to 5 s (well inside
-- the 15 s after which a replica counts as gone); behind a long
-- transaction the migration fails, rolls back whole and runs again at the
-- next start or `migrate up`.

-- studio_job_status.timeout_ms is the job's timeout in force, written by
-- the replica with each status row, so that jobs list and the status page
-- judge a run in progress by it, as doctor does with the configuration
-- (0: unknown, the schedule's default; a constant default adds no rewrite).

-- +goose Up
SET LOCAL lock_timeout = '5s';
ALTER TABLE studio_replica
    ADD COLUMN last_crash_at          timestamptz NULL,
    ADD COLUMN last_crash_incarnation uuid        NULL;
ALTER TABLE studio_job_status
    ADD COLUMN timeout_ms bigint NOT NULL DEFAULT 0;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE studio_job_status DROP COLUMN timeout_ms;
ALTER TABLE studio_replica
    DROP COLUMN last_crash_incarnation,
    DROP COLUMN last_crash_at;
