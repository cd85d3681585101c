-- studio_job_run_job_seq (job_id, seq DESC) has served no query since
-- 00002: replicas take run seqs in blocks of 1,000, so seq order is not
-- start order, and jobs history and housekeeping read
-- studio_job_run_job_started (job_id, started_at DESC) instead. Every run
-- still paid an entry in it: one B-tree insertion of the five a history
-- row cost (docs/cost.md). CONCURRENTLY, outside a transaction,
-- so that dropping it never blocks the run store's inserts behind a long
-- read of the table.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS studio_job_run_job_seq;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS studio_job_run_job_seq ON studio_job_run (job_id, seq DESC);
