-- studio_job_run_job_seq (job_id, seq DESC) has served no query since
-- 00002: replicas take run seqs in blocks of 1,000, so seq order is not
-- start order, and jobs history and housekeeping read
-- studio_job_run_job_started (job_id, started_at DESC) instead. Every run
-- still paid an entry in it: one B-tree insertion of the five a history
-- row cost (docs/cost.md). CONCURRENTLY, outside a transaction,
-- so that dropping it never blocks the run store's inserts behind a long
-- read of the table.
--
-- studio_job_status is updated at every run of every job (a 1 s job's row
-- every second). With pages packed full, one update in five found no room
-- on its page and wrote a new primary-key entry (HOT 0.80 at 10,000 jobs);
-- with 30 % of each page left free, 0.996 of them are HOT. The setting
-- applies to pages written from now on; it takes a lock that blocks no
-- reads or writes.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS studio_job_run_job_seq;
ALTER TABLE studio_job_status SET (fillfactor = 70);

-- +goose Down
ALTER TABLE studio_job_status RESET (fillfactor);
CREATE INDEX CONCURRENTLY IF NOT EXISTS studio_job_run_job_seq ON studio_job_run (job_id, seq DESC);
