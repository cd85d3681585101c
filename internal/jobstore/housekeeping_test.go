package jobstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/tasks"
)

// insertRun adds a studio_job_run row started age ago in database time and
// returns its seq.
func insertRun(t testing.TB, pool *pgxpool.Pool, replica, outcome string, age time.Duration) int64 {
	t.Helper()
	var seq int64
	err := pool.QueryRow(t.Context(), `
INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome)
VALUES ('report', $1, now() - make_interval(secs => $3),
  CASE WHEN $2 = 'running' THEN NULL ELSE now() - make_interval(secs => $3) + interval '1 second' END, $2)
RETURNING seq`, replica, outcome, age.Seconds()).Scan(&seq)
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
	return seq
}

// stopReplica marks a replica stopped age ago, its last heartbeat beatAge ago.
func stopReplica(t testing.TB, pool *pgxpool.Pool, id string, age, beatAge time.Duration) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `UPDATE studio_replica SET state = 'stopped', stopped_at = now() - make_interval(secs => $2),
  heartbeat_at = now() - make_interval(secs => $3) WHERE id = $1`, id, age.Seconds(), beatAge.Seconds())
	if err != nil {
		t.Fatal(err)
	}
}

func TestHousekeep(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "live", "ready", 0)
	insertReplica(t, pool, "draining", "draining", 2*time.Second)
	insertReplica(t, pool, "crashed", "ready", time.Minute)           // gone a minute ago
	insertReplica(t, pool, "crashed-long-ago", "ready", 25*time.Hour) // gone for more than a day
	insertReplica(t, pool, "stopped-long-ago", "ready", 0)
	stopReplica(t, pool, "stopped-long-ago", 25*time.Hour, 25*time.Hour)
	insertReplica(t, pool, "stopped-recently", "ready", 0)
	stopReplica(t, pool, "stopped-recently", time.Hour, time.Hour)
	// Stopped an hour ago although its heartbeat is older: stopped_at decides.
	insertReplica(t, pool, "stopped-late", "ready", 0)
	stopReplica(t, pool, "stopped-late", time.Hour, 30*time.Hour)

	statusOf := map[string]bool{}
	for _, r := range []string{"live", "crashed", "crashed-long-ago", "stopped-long-ago", "stopped-recently", "stopped-late"} {
		s := jobstore.NewStore(pool, r, nil)
		s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m"})
		s.PutStatus(jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 10s"})
		mustFlush(t, s)
		statusOf[r] = true
	}

	runs := map[string]int64{
		// Runs of a job with fewer than RunsKeptPerJob stay until RunsKeptFor
		// (retention_test.go has the rest of the rules).
		"too old succeeded":           insertRun(t, pool, "live", "succeeded", jobstore.RunsKeptFor+day),
		"too old failed":              insertRun(t, pool, "crashed", "failed", jobstore.RunsKeptFor+time.Minute),
		"too old interrupted":         insertRun(t, pool, "gone-for-good", "interrupted", jobstore.RunsKeptFor+30*day),
		"old succeeded":               insertRun(t, pool, "live", "succeeded", 8*day),
		"old failed":                  insertRun(t, pool, "crashed", "failed", 7*day+time.Minute),
		"six days old":                insertRun(t, pool, "live", "succeeded", 6*day),
		"old but running on live":     insertRun(t, pool, "live", "running", jobstore.RunsKeptFor+day),
		"running on live":             insertRun(t, pool, "live", "running", time.Minute),
		"running on draining":         insertRun(t, pool, "draining", "running", time.Minute),
		"running on crashed":          insertRun(t, pool, "crashed", "running", 2*time.Minute),
		"running on stopped":          insertRun(t, pool, "stopped-recently", "running", 2*time.Hour),
		"running on missing":          insertRun(t, pool, "never-registered", "running", time.Minute),
		"finished on crashed":         insertRun(t, pool, "crashed", "succeeded", time.Hour),
		"running on crashed long ago": insertRun(t, pool, "crashed-long-ago", "running", 26*time.Hour),
	}

	pruned, interrupted, dropped, err := jobstore.Housekeep(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if pruned != 3 || interrupted != 4 || dropped != 2 {
		t.Errorf("Housekeep = pruned %d, interrupted %d, dropped %d; want 3, 4, 2", pruned, interrupted, dropped)
	}

	outcome := func(seq int64) (string, bool, string) {
		var o, e string
		var finished bool
		err := pool.QueryRow(t.Context(), `SELECT outcome, finished_at IS NOT NULL, coalesce(error, '') FROM studio_job_run WHERE seq = $1`, seq).Scan(&o, &finished, &e)
		if err != nil {
			return "pruned", false, ""
		}
		return o, finished, e
	}
	want := map[string]string{
		"too old succeeded":           "pruned",
		"too old failed":              "pruned",
		"too old interrupted":         "pruned",
		"old succeeded":               "succeeded",
		"old failed":                  "failed",
		"six days old":                "succeeded",
		"old but running on live":     "running",
		"running on live":             "running",
		"running on draining":         "running",
		"running on crashed":          "interrupted",
		"running on stopped":          "interrupted",
		"running on missing":          "interrupted",
		"finished on crashed":         "succeeded",
		"running on crashed long ago": "interrupted",
	}
	for name, seq := range runs {
		got, finished, msg := outcome(seq)
		if got != want[name] {
			t.Errorf("run %q: %s, want %s", name, got, want[name])
		}
		if got == "interrupted" && (!finished || msg == "") {
			t.Errorf("run %q: interrupted without finished_at (%v) or error (%q)", name, finished, msg)
		}
	}
	if _, _, msg := outcome(runs["running on crashed"]); msg != "replica crashed is gone: the run was interrupted" {
		t.Errorf("error of an interrupted run = %q", msg)
	}

	var replicas []string
	rows, err := pool.Query(t.Context(), `SELECT id FROM studio_replica ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, id)
	}
	rows.Close()
	wantReplicas := []string{"crashed", "draining", "live", "stopped-late", "stopped-recently"}
	if !slices.Equal(replicas, wantReplicas) {
		t.Errorf("replicas left = %v, want %v", replicas, wantReplicas)
	}
	for r := range statusOf {
		n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE replica_id = $1`, r)
		gone := r == "crashed-long-ago" || r == "stopped-long-ago"
		if gone && n != 0 {
			t.Errorf("%d status rows of dropped replica %s, want 0", n, r)
		}
		if !gone && n != 2 {
			t.Errorf("%d status rows of replica %s, want 2 (kept)", n, r)
		}
	}

	// A second pass finds nothing more to do.
	pruned, interrupted, dropped, err = jobstore.Housekeep(t.Context(), pool)
	if err != nil || pruned != 0 || interrupted != 0 || dropped != 0 {
		t.Errorf("second Housekeep = %d, %d, %d, %v; want nothing", pruned, interrupted, dropped, err)
	}
}

func TestTheBuiltInHousekeepingJob(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertRun(t, pool, "nobody", "running", time.Minute)
	j := jobstore.Housekeeping(pool)
	if j.ID != "studio-housekeeping" || j.Scope != jobs.ScopeInstallation || j.Schedule.String() != "every 1m" || !j.Builtin || j.Task == nil {
		t.Errorf("Housekeeping() = %+v", j)
	}
	res := j.Task.Run(context.Background(), tasks.Env{})
	if res.Err != nil || res.Output != "pruned 0 runs, marked 1 runs interrupted, dropped 0 replicas" {
		t.Errorf("housekeeping run = %+v", res)
	}
}

func TestHousekeepDropsOldStatusRowsOfReplicasThatHaveNoRow(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	// "forgotten" was removed with `replicas forget` (which deletes only the
	// replica row) two days ago; "new" writes its first status just now.
	for replica, age := range map[string]time.Duration{"forgotten": 48 * time.Hour, "new": 0} {
		s := jobstore.NewStore(pool, replica, nil)
		s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", UpdatedAt: dbNow(t, pool).Add(-age)})
		mustFlush(t, s)
	}
	if _, _, _, err := jobstore.Housekeep(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE replica_id = 'new'`); n != 1 {
		t.Errorf("%d status rows of a replica that just wrote one, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE replica_id = 'forgotten'`); n != 0 {
		t.Errorf("%d status rows of a replica forgotten two days ago, want 0", n)
	}
}

// A run that housekeeping marks interrupted reaches the event stream as a
// run event, like a run the store flushes (docs/events.md), and old
// events are pruned.
func TestHousekeepWritesTheEventsOfTheRunsItInterrupts(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "crashed", "ready", time.Minute)
	seq := insertRun(t, pool, "crashed", "running", time.Minute)
	if _, _, _, err := jobstore.Housekeep(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	var outcome, finished string
	var gotSeq int64
	if err := pool.QueryRow(t.Context(), `SELECT (data->>'seq')::bigint, data->>'outcome', coalesce(data->>'finished_at', '') FROM studio_event WHERE event = 'run'`).Scan(&gotSeq, &outcome, &finished); err != nil {
		t.Fatalf("the interrupted run's event: %v", err)
	}
	if gotSeq != seq || outcome != "interrupted" || finished == "" {
		t.Fatalf("event of run %d: outcome %q, finished_at %q; want run %d interrupted, with its end", gotSeq, outcome, finished, seq)
	}
	// Pruning: an event older than EventRetention goes.
	if _, err := pool.Exec(t.Context(), `UPDATE studio_event SET at = now() - make_interval(secs => $1) - interval '1 minute'`, jobstore.EventRetention.Seconds()); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := jobstore.Housekeep(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM studio_event WHERE event = 'run'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d old run events left (%v), want 0", left, err)
	}
}
