package jobstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobstore"
)

const day = 24 * time.Hour

// addRuns inserts n finished runs of job (with cluster, "" for none) in
// outcome, the newest started newest ago, each step older than the one
// before, and returns their seqs, newest first.
func addRuns(t testing.TB, pool *pgxpool.Pool, job, cluster, outcome string, n int, newest, step time.Duration) []int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, finished_at, outcome)
SELECT $1, 'r1', NULLIF($2, ''), now() - make_interval(secs => $4 + i * $5),
  CASE WHEN $3 = 'running' THEN NULL ELSE now() - make_interval(secs => $4 + i * $5) + interval '1 ms' END, $3
FROM generate_series(0, $6 - 1) AS i ORDER BY i
RETURNING seq`, job, cluster, outcome, newest.Seconds(), step.Seconds(), n)
	if err != nil {
		t.Fatalf("insert runs of %s: %v", job, err)
	}
	seqs := []int64{}
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// seqsOf is what is left of job, in the order jobs history shows it.
func seqsOf(t testing.TB, pool *pgxpool.Pool, job string) []int64 {
	t.Helper()
	runs, err := jobstore.History(t.Context(), pool, job, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	out := []int64{}
	for _, r := range runs {
		out = append(out, r.Seq)
	}
	return out
}

// logDeletes records, for each DELETE statement on table from now on, the
// rows it deleted and its transaction; deletes returns them.
func logDeletes(t testing.TB, pool *pgxpool.Pool, table string) (deletes func() (rows []int64, txs int)) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
CREATE TABLE IF NOT EXISTS test_delete_log (tbl text, n bigint, tx xid8);
CREATE OR REPLACE FUNCTION test_log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO test_delete_log SELECT TG_TABLE_NAME, count(*), pg_current_xact_id() FROM old;
  RETURN NULL;
END $$;
CREATE TRIGGER test_log_delete AFTER DELETE ON `+table+` REFERENCING OLD TABLE AS old
  FOR EACH STATEMENT EXECUTE FUNCTION test_log_delete()`)
	if err != nil {
		t.Fatal(err)
	}
	return func() ([]int64, int) {
		rows, err := pool.Query(t.Context(), `SELECT n FROM test_delete_log WHERE tbl = $1 AND n > 0`, table)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ns, count(t, pool, `SELECT count(DISTINCT tx) FROM test_delete_log WHERE tbl = $1 AND n > 0`, table)
	}
}

// small is a retention small enough to see every rule at work.
var small = jobstore.Retention{
	RunsKeptPerJob: 5, FailuresKeptFor: 7 * day, FailuresKeptPerJob: 3, RunsKeptFor: 90 * day,
	EventsKeptFor: day, EventsKept: 1000,
	JobsPerStatement: 2, RowsPerStatement: 4, RowsPerPass: 1_000_000,
}

func TestRetentionKeepsWhatItPromises(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "r1", "ready", 0) // its runs are still going
	cat := func(parts ...[]int64) []int64 { return slices.Concat(parts...) }

	// "often" ran every minute: its newest 5 stay, whatever their age (the
	// old code kept 7 days of them).
	often := addRuns(t, pool, "often", "", "succeeded", 40, time.Minute, time.Minute)
	// "rare" has fewer runs than the count, some old.
	rare := addRuns(t, pool, "rare", "", "succeeded", 3, 10*day, 20*day)
	// "flaky": its newest 5 (two of them failures), then older successes
	// that go, failures of the last 7 days of which the newest 3 stay,
	// failures older than 7 days that go, and a run still going that
	// started long ago, which stays.
	flakyNew := cat(addRuns(t, pool, "flaky", "", "succeeded", 3, time.Minute, time.Minute),
		addRuns(t, pool, "flaky", "", "failed", 2, 4*time.Minute, time.Minute))
	flakyOld := addRuns(t, pool, "flaky", "", "succeeded", 4, time.Hour, time.Minute)
	flakyFailures := cat(addRuns(t, pool, "flaky", "", "timed_out", 2, 2*time.Hour, time.Hour),
		addRuns(t, pool, "flaky", "", "lock_lost", 1, day, 0),
		addRuns(t, pool, "flaky", "", "interrupted", 2, 2*day, day))
	flakyStale := addRuns(t, pool, "flaky", "", "failed", 2, 8*day, day)
	flakyRunning := addRuns(t, pool, "flaky", "", "running", 1, 100*day, 0)
	// A per-cluster job's duties share the job's count, as jobs history
	// shows them together.
	var owned []int64
	for i := range 6 {
		owned = append(owned, addRuns(t, pool, "sweep", []string{"eu-1", "us-1"}[i%2], "succeeded", 1, time.Duration(i+1)*time.Minute, 0)...)
	}
	// "removed" is no longer configured: its runs go once older than
	// RunsKeptFor, failures too.
	removedKept := addRuns(t, pool, "removed", "", "succeeded", 1, 89*day, 0)
	addRuns(t, pool, "removed", "", "succeeded", 2, 91*day, day)
	addRuns(t, pool, "removed", "", "failed", 1, 95*day, 0)
	// Jobs after the first chunks are reached too.
	var last []int64
	for _, j := range []string{"x1", "x2", "x3"} {
		last = append(last, addRuns(t, pool, j, "", "succeeded", 7, time.Minute, time.Minute)[:5]...)
	}

	p, err := small.Housekeep(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{
		"often":   often[:5],
		"rare":    rare,
		"flaky":   cat(flakyNew, flakyFailures[:3], flakyRunning),
		"sweep":   owned[:5],
		"removed": removedKept,
		"x1":      last[0:5], "x2": last[5:10], "x3": last[10:15],
	}
	for job, w := range want {
		if got := seqsOf(t, pool, job); !slices.Equal(got, w) {
			t.Errorf("job %s keeps %v, want %v", job, got, w)
		}
	}
	gone := len(often) - 5 + len(flakyOld) + 2 + len(flakyStale) + 1 + 3 + 3*2
	if p.RunsPruned != int64(gone) || !p.AllJobs || p.Interrupted != 0 {
		t.Errorf("pass = %+v, want %d runs pruned through every job", p, gone)
	}
	if p.MaxRunsPerStmt > int64(small.RowsPerStatement) {
		t.Errorf("a statement deleted %d runs, more than %d", p.MaxRunsPerStmt, small.RowsPerStatement)
	}
	// A second pass finds nothing to delete.
	if p, err := small.Housekeep(t.Context(), pool, ""); err != nil || p.RunsPruned != 0 {
		t.Errorf("second pass = %+v, %v; want nothing pruned", p, err)
	}
}

// The default retention: the newest RunsKeptPerJob runs of a job that
// runs every second, not 7 days of them.
func TestTheDefaultRetentionKeepsTheNewestHundredRunsOfAJob(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	seqs := addRuns(t, pool, "every-second", "", "succeeded", 3*jobstore.RunsKeptPerJob, time.Second, time.Second)
	pruned, _, _, err := jobstore.Housekeep(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(t, pool, "every-second"); pruned != 2*jobstore.RunsKeptPerJob || !slices.Equal(got, seqs[:jobstore.RunsKeptPerJob]) {
		t.Errorf("pruned %d, kept %d runs (%v...), want the newest %d", pruned, len(got), got[:min(3, len(got))], jobstore.RunsKeptPerJob)
	}
}

// A large surplus is deleted in statements of at most RowsPerStatement
// runs, each its own transaction, and a pass stops at its budget; the
// next pass goes on from where it stopped.
func TestPruningALargeSurplusIsBatched(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	for _, j := range []string{"a", "b", "c"} {
		addRuns(t, pool, j, "", "succeeded", 1000, time.Second, time.Second)
	}
	rt := small
	rt.RunsKeptPerJob, rt.JobsPerStatement, rt.RowsPerStatement, rt.RowsPerPass = 10, 2, 100, 1000
	deletes := logDeletes(t, pool, "studio_job_run")
	var passes []jobstore.Pass
	resume := ""
	for {
		p, err := rt.Housekeep(t.Context(), pool, resume)
		if err != nil {
			t.Fatal(err)
		}
		passes = append(passes, p)
		resume = p.ResumeAfter
		if p.RunsPruned < rt.RowsPerPass || len(passes) > 10 {
			break
		}
	}
	ns, txs := deletes()
	total := int64(0)
	for _, n := range ns {
		total += n
		if n > int64(rt.RowsPerStatement) {
			t.Errorf("a statement deleted %d runs, more than %d", n, rt.RowsPerStatement)
		}
	}
	if total != 3*990 || len(passes) != 3 || len(ns) < 30 || txs != len(ns) {
		t.Errorf("%d passes pruned %d runs in %d statements (%d transactions); want 2970 in 3 passes of at least 30 statements, each its own transaction",
			len(passes), total, len(ns), txs)
	}
	for _, p := range passes {
		if p.RunsPruned > rt.RowsPerPass {
			t.Errorf("pass %+v deleted more than a pass may (%d)", p, rt.RowsPerPass)
		}
	}
	if passes[0].AllJobs || passes[1].ResumeAfter != "b" || !passes[2].AllJobs {
		t.Errorf("passes %+v: want the first two to stop at their budget (the second after job b, the chunk of a and b done), the last to go through every job", passes)
	}
	for _, j := range []string{"a", "b", "c"} {
		if n := len(seqsOf(t, pool, j)); n != 10 {
			t.Errorf("job %s keeps %d runs, want 10", j, n)
		}
	}
}

// addEvents inserts n events, the oldest at age, one a millisecond after
// the other.
func addEvents(t testing.TB, pool *pgxpool.Pool, n int, age time.Duration) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO studio_event (at, event, data)
SELECT now() - make_interval(secs => $2) + i * interval '1 ms', 'run', '{}' FROM generate_series(1, $1) AS i ORDER BY i`, n, age.Seconds())
	if err != nil {
		t.Fatal(err)
	}
}

// The event stream keeps the newest EventsKept events and none older than
// EventsKeptFor, deleted by ranges of ids in statements of at most
// RowsPerStatement (the old code deleted them in one statement).
func TestEventPruningIsBatched(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	addEvents(t, pool, 500, 2*day) // too old
	addEvents(t, pool, 500, time.Hour)
	rt := small
	rt.EventsKept, rt.RowsPerStatement = 2000, 100
	deletes := logDeletes(t, pool, "studio_event")
	p, err := rt.Housekeep(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.EventsPruned != 500 || count(t, pool, `SELECT count(*) FROM studio_event WHERE at < now() - interval '1 day'`) != 0 {
		t.Errorf("pass = %+v; want the 500 old events pruned", p)
	}
	addEvents(t, pool, 2500, time.Minute)
	p, err = rt.Housekeep(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	ns, txs := deletes()
	for _, n := range ns {
		if n > 100 {
			t.Errorf("a statement deleted %d events, more than 100", n)
		}
	}
	if len(ns) < 15 || txs != len(ns) {
		t.Errorf("%d event deletes in %d transactions; want at least 15 (1,500 events, 100 a statement), each its own", len(ns), txs)
	}
	var oldest, newest int64
	if err := pool.QueryRow(t.Context(), `SELECT min(id), max(id) FROM studio_event`).Scan(&oldest, &newest); err != nil {
		t.Fatal(err)
	}
	if p.EventsPruned != 1000 || p.MaxEventsPerStmt > 100 || p.EventStmts < 10 || newest-oldest+1 != 2000 ||
		count(t, pool, `SELECT count(*) FROM studio_event`) != 2000 {
		t.Errorf("pass = %+v, ids %d..%d left; want 1000 pruned, at most 100 a statement, the newest 2000 left", p, oldest, newest)
	}
}

// Behind a backlog (more runs than a pass reads per job between the newest
// RunsKeptPerJob and the failures) a pass keeps every failure of the last
// FailuresKeptFor rather than guess which are the newest; the next pass,
// the backlog gone, keeps the newest FailuresKeptPerJob of them.
func TestBehindABacklogFailuresAreKeptUntilTheNextPass(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	kept := addRuns(t, pool, "busy", "", "succeeded", 5, time.Second, time.Second)
	addRuns(t, pool, "busy", "", "succeeded", 3000, time.Minute, time.Second)
	failures := addRuns(t, pool, "busy", "", "failed", 6, 2*time.Hour, time.Minute)
	rt := small
	rt.RowsPerStatement = 1000
	if _, err := rt.Housekeep(t.Context(), pool, ""); err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(t, pool, "busy"); !slices.Equal(got, slices.Concat(kept, failures)) {
		t.Errorf("after the first pass: %d runs kept, want the newest 5 and all 6 failures", len(got))
	}
	if _, err := rt.Housekeep(t.Context(), pool, ""); err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(t, pool, "busy"); !slices.Equal(got, slices.Concat(kept, failures[:3])) {
		t.Errorf("after the second pass: %v kept, want the newest 5 and the newest 3 failures", got)
	}
}
