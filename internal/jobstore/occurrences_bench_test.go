package jobstore_test

import (
	"os"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/jobstore"
)

// occurrenceBenchFixture is 10,000 installation jobs and 200 instance jobs
// on two replicas, each installation job with 100 runs carrying a nominal
// time (1,000,000 rows: what retention keeps) and 20 skips or misses
// (200,000 rows, one every 500 minutes back to a week, inserted oldest
// first as time would), and each instance job 100 skips per replica.
const occurrenceBenchFixture = eventCheckWorkaround + `
INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES
  ('web-1', gen_random_uuid(), 'h1', 1, 'v', 'ready'), ('web-2', gen_random_uuid(), 'h2', 2, 'v', 'ready');
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule)
  SELECT r, 'job-' || j, 'installation', 'every 1m' FROM generate_series(1, 10000) j, unnest(ARRAY['web-1', 'web-2']) r;
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule)
  SELECT r, 'inst-' || j, 'instance', 'every 1m' FROM generate_series(1, 200) j, unnest(ARRAY['web-1', 'web-2']) r;
ALTER TABLE studio_job_run SET (autovacuum_enabled = false);
INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key)
  SELECT 'job-' || j, 'web-1', now() - make_interval(mins => k) + interval '1 second', now() - make_interval(mins => k) + interval '2 seconds',
         CASE WHEN k % 17 = 0 THEN 'lock_lost' ELSE 'succeeded' END, now() - make_interval(mins => k), ''
  FROM generate_series(1, 10000) j, generate_series(1, 100) k;
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id, count, last_nominal_at, recorded_at)
  SELECT 'job-' || j, '', now() - make_interval(mins => 100 + k * 500),
         CASE WHEN k % 5 = 0 THEN 'missed' ELSE 'skipped' END, CASE WHEN k % 5 = 0 THEN 'down' ELSE 'paused' END, 'web-1',
         CASE WHEN k % 5 = 0 THEN 3 ELSE 1 END, CASE WHEN k % 5 = 0 THEN now() - make_interval(mins => 100 + k * 500 - 2) END,
         now() - make_interval(mins => 100 + k * 500 - 3)
  FROM generate_series(20, 1, -1) k, generate_series(1, 10000) j;
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id, recorded_at)
  SELECT 'inst-' || j, r, now() - make_interval(mins => k * 100), 'skipped', 'overrun', r, now() - make_interval(mins => k * 100)
  FROM generate_series(100, 1, -1) k, generate_series(1, 200) j, unnest(ARRAY['web-1', 'web-2']) r;
ANALYZE studio_job_status; ANALYZE studio_job_run; ANALYZE studio_occurrence; ANALYZE studio_replica;
`

// BenchmarkOccurrenceSummaries10k measures what jobs list adds at 10,000
// jobs: one statement for every job's last occurrence and 24 h counts. It
// logs the plan's scans: index probes per job, no sequential scan of
// studio_job_run or studio_occurrence.
//
//	go test -run '^$' -bench OccurrenceSummaries10k -benchtime 10x ./internal/jobstore
func BenchmarkOccurrenceSummaries10k(b *testing.B) {
	pool, _ := newPool(b)
	ctx := b.Context()
	if _, err := pool.Exec(ctx, occurrenceBenchFixture); err != nil {
		b.Fatalf("fixture: %v", err)
	}
	if os.Getenv("STUDIO_BENCH_LOST_INDEX") == "1" {
		// The partial index proposed for the lost runs of 24 h.
		if _, err := pool.Exec(ctx, `CREATE INDEX studio_job_run_not_ended ON studio_job_run (job_id, started_at) WHERE outcome IN ('lock_lost', 'interrupted', 'running'); ANALYZE studio_job_run`); err != nil {
			b.Fatal(err)
		}
	}
	rows, now, err := jobstore.ReadStatus(ctx, pool, "")
	if err != nil {
		b.Fatal(err)
	}
	views := jobstore.Merge(rows, now)
	if len(views) != 10200 {
		b.Fatalf("%d views, want 10200", len(views))
	}
	sums, err := jobstore.OccurrenceSummaries(ctx, pool, views)
	if err != nil {
		b.Fatal(err)
	}
	if s := sums["job-1"]; s.Last == nil || s.Last.Outcome != "ran" || s.Skipped24h != 2 || s.Missed24h != 5 {
		b.Fatalf("job-1: %+v (last %+v)", s, s.Last)
	}
	var plan strings.Builder
	ids, jobIDs, scopes, clusters := jobstore.OccurrenceSummaryArgs(views)
	tx, err := pool.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil { // as OccurrenceSummaries does
		b.Fatal(err)
	}
	prows, err := tx.Query(ctx, explainSQL()+jobstore.OccurrenceSummarySQL, ids, jobIDs, scopes, clusters, jobstore.OccurrenceWindow.Seconds())
	if err != nil {
		b.Fatal(err)
	}
	for prows.Next() {
		var line string
		if err := prows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	prows.Close()
	if err := prows.Err(); err != nil {
		b.Fatal(err)
	}
	if strings.Contains(plan.String(), "Seq Scan on studio_job_run") || strings.Contains(plan.String(), "Seq Scan on studio_occurrence") {
		b.Errorf("a sequential scan per job:\n%s", plan.String())
	}
	if f := os.Getenv("STUDIO_BENCH_PLAN"); f != "" {
		if err := os.WriteFile(f, []byte(plan.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := jobstore.OccurrenceSummaries(ctx, pool, views); err != nil {
			b.Fatal(err)
		}
	}
}

// explainSQL is the EXPLAIN of the benchmark's plan: with timing per node
// when STUDIO_BENCH_PLAN_TIMING=1 (slower).
func explainSQL() string {
	if os.Getenv("STUDIO_BENCH_PLAN_TIMING") == "1" {
		return `EXPLAIN (ANALYZE, BUFFERS) `
	}
	return `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) `
}
