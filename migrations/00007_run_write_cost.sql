-- studio_job_run_job_seq (job_id, seq DESC) has served no query since
-- 00002: replicas take run seqs in blocks of 1,000, so seq order is not
-- start order, and jobs history and housekeeping read
-- studio_job_run_job_started (job_id, started_at DESC) instead. Every run
-- still paid an entry in it: one B-tree insertion of the five a history
-- row cost (docs/cost.md).
--
-- studio_job_status is updated at every run of every job (a 1 s job's row
-- every second). With pages packed full, one update in five found no room
-- on its page and wrote a new primary-key entry (HOT 0.80 at 10,000 jobs);
-- with 30 % of each page left free, 0.996 of them are HOT. The setting
-- applies to pages written from now on.
--
-- One transaction, and a bounded wait: DROP INDEX takes the table's
-- ACCESS EXCLUSIVE lock for as long as the catalog change takes (the index
-- files go at commit, whatever their size), but it must wait for every
-- transaction reading studio_job_run. lock_timeout bounds that wait to 5 s
-- (the run store's inserts queue behind it meanwhile): behind a long
-- transaction, the migration fails with "canceling statement due to lock
-- timeout", rolls back whole, and runs again at the next start or
-- `migrate up`. (DROP INDEX CONCURRENTLY would not block the inserts, but
-- it cannot run in a transaction and would wait without bound, holding the
-- migration lock that every other starting replica waits for.)

-- +goose Up
SET LOCAL lock_timeout = '5s';
DROP INDEX IF EXISTS studio_job_run_job_seq;
ALTER TABLE studio_job_status SET (fillfactor = 70);

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE studio_job_status RESET (fillfactor);
CREATE INDEX IF NOT EXISTS studio_job_run_job_seq ON studio_job_run (job_id, seq DESC);
