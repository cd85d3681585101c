-- History is read newest first by start time (replicas take run seqs in
-- blocks, so seq order is not time order), and housekeeping prunes by age.

-- +goose Up
CREATE INDEX studio_job_run_job_started ON studio_job_run (job_id, started_at DESC);
CREATE INDEX studio_job_run_started ON studio_job_run (started_at);

-- +goose Down
DROP INDEX studio_job_run_started;
DROP INDEX studio_job_run_job_started;
