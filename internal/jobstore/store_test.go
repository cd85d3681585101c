package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// usec is a time PostgreSQL stores exactly (microseconds), in a zone that is
// not UTC so that any conversion shows.
func usec(t testing.TB, s string) time.Time {
	t.Helper()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02T15:04:05.999999", s, la)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// statusText renders every stored field of a status, times in UTC, so two
// statuses compare as text and differ readably.
func statusText(s jobs.Status) string {
	tm := func(p *time.Time) string {
		if p == nil {
			return "nil"
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("replica=%s job=%s scope=%s schedule=%q next=%s running=%v started=%s finished=%s outcome=%s error=%q success=%s skipped_at=%s runs=%d failures=%d timeouts=%d lock_lost=%d overruns=%d skipped=%d invalid=%q paused=%v updated=%s",
		s.ReplicaID, s.JobID, s.Scope, s.Schedule, tm(s.NextFireAt), s.Running, tm(s.LastStartedAt), tm(s.LastFinishedAt),
		s.LastOutcome, s.LastError, tm(s.LastSuccessAt), tm(s.LastSkippedElsewhereAt), s.Runs, s.Failures, s.Timeouts, s.LockLost,
		s.Overruns, s.SkippedElsewhere, s.InvalidSchedule, s.Paused, tm(&s.UpdatedAt))
}

// runRow reads one studio_job_run row.
func runRow(t testing.TB, pool *pgxpool.Pool, seq int64) jobs.Run {
	t.Helper()
	var r jobs.Run
	var outcome string
	err := pool.QueryRow(t.Context(), `SELECT seq, job_id, replica_id, coalesce(cluster, ''), started_at, finished_at, outcome,
  coalesce(error, ''), coalesce(output_tail, '') FROM studio_job_run WHERE seq = $1`, seq).
		Scan(&r.Seq, &r.JobID, &r.ReplicaID, &r.Cluster, &r.StartedAt, &r.FinishedAt, &outcome, &r.Error, &r.OutputTail)
	if err != nil {
		t.Fatalf("read run %d: %v", seq, err)
	}
	r.Outcome = jobs.Outcome(outcome)
	return r
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func mustFlush(t testing.TB, s *jobstore.Store) {
	t.Helper()
	if err := s.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func mustSeq(t testing.TB, s *jobstore.Store) int64 {
	t.Helper()
	n, err := s.NextSeq(t.Context())
	if err != nil {
		t.Fatalf("NextSeq: %v", err)
	}
	return n
}

func TestNextSeqGivesIncreasingUniqueSeqsAcrossBlocks(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	q := &countingQuerier{Querier: pool}
	s := jobstore.NewStore(q, "replica-1", nil)
	var prev int64
	for i := range 2500 {
		n := mustSeq(t, s)
		if n <= prev {
			t.Fatalf("seq %d = %d after %d: not increasing", i, n, prev)
		}
		prev = n
	}
	if n, texts, _ := q.calls(); n != 3 {
		t.Errorf("2500 seqs took %d statements, want 3 (blocks of 1000): %q", n, texts)
	}
	// The sequence moved past every seq handed out, so a plain insert does
	// not collide with them.
	var next int64
	if err := pool.QueryRow(t.Context(), `INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome)
VALUES ('j', 'r', now(), 'running') RETURNING seq`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next <= prev {
		t.Errorf("the sequence gave %d after NextSeq gave %d", next, prev)
	}
}

func TestNextSeqFromTwoStoresConcurrentlyGivesNoDuplicates(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	stores := []*jobstore.Store{jobstore.NewStore(pool, "replica-1", nil), jobstore.NewStore(pool, "replica-2", nil)}
	const workers, each = 4, 80 // per store: 320 seqs, more than three blocks
	var (
		mu   sync.Mutex
		seen = map[int64]int{}
		wg   sync.WaitGroup
		errs = make(chan error, 2*workers)
	)
	for si, s := range stores {
		for range workers {
			wg.Go(func() {
				var prev int64
				for range each {
					n, err := s.NextSeq(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if n <= prev {
						errs <- fmt.Errorf("store %d: seq %d after %d on one goroutine", si, n, prev)
						return
					}
					prev = n
					mu.Lock()
					seen[n]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != 2*workers*each {
		var dups []int64
		for n, c := range seen {
			if c > 1 {
				dups = append(dups, n)
			}
		}
		t.Errorf("%d distinct seqs of %d handed out; duplicates: %v", len(seen), 2*workers*each, dups)
	}
}

func TestPutRunTwiceInOneFlushWritesTheFinalRow(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	seq := mustSeq(t, s)
	started := usec(t, "2026-11-30T01:00:00.123456")
	finished := started.Add(1500 * time.Millisecond)
	s.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", Cluster: "eu-1", StartedAt: started, Outcome: jobs.OutcomeRunning})
	s.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", Cluster: "eu-1", StartedAt: started, FinishedAt: &finished,
		Outcome: jobs.OutcomeFailed, Error: "exit status 3", OutputTail: "line 1\nline 2\n"})
	mustFlush(t, s)

	r := runRow(t, pool, seq)
	if r.JobID != "report" || r.ReplicaID != "replica-1" || r.Cluster != "eu-1" || !r.StartedAt.Equal(started) ||
		r.FinishedAt == nil || !r.FinishedAt.Equal(finished) || r.Outcome != jobs.OutcomeFailed ||
		r.Error != "exit status 3" || r.OutputTail != "line 1\nline 2\n" {
		t.Errorf("run row = %+v (finished %v), want the final version (failed at %s)", r, r.FinishedAt, finished)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_run`); n != 1 {
		t.Errorf("%d run rows, want 1", n)
	}
}

func TestAFinishedRunIsNotOverwrittenBackToRunning(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	seq := mustSeq(t, s)
	started := usec(t, "2026-11-30T01:00:00")
	finished := started.Add(time.Second)
	running := jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: started, Outcome: jobs.OutcomeRunning}
	done := running
	done.FinishedAt, done.Outcome = &finished, jobs.OutcomeSucceeded

	s.PutRun(running)
	mustFlush(t, s)
	if r := runRow(t, pool, seq); r.Outcome != jobs.OutcomeRunning || r.FinishedAt != nil {
		t.Fatalf("after the first flush: %+v, want running", r)
	}
	s.PutRun(done)
	mustFlush(t, s)
	s.PutRun(running) // a stale version, as from a retried flush
	mustFlush(t, s)
	if r := runRow(t, pool, seq); r.Outcome != jobs.OutcomeSucceeded || r.FinishedAt == nil || !r.FinishedAt.Equal(finished) {
		t.Errorf("after a stale running version: %+v, want it still succeeded at %s", r, finished)
	}
}

// A run that housekeeping marked interrupted (its replica looked gone) is
// not put back to running by a stale version, nor taken over by another
// replica's write of the same seq; the replica's own final outcome, when it
// comes back from a pause, replaces the guess (store.go upsertRunsSQL).
func TestARunMarkedInterruptedByHousekeeping(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	// replica-1 has no studio_replica row: housekeeping takes it for gone.
	s := jobstore.NewStore(pool, "replica-1", nil)
	seq := mustSeq(t, s)
	started := usec(t, "2026-11-30T01:00:00")
	running := jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: started, Outcome: jobs.OutcomeRunning}
	s.PutRun(running)
	mustFlush(t, s)
	if _, interrupted, _, err := jobstore.Housekeep(t.Context(), pool); err != nil || interrupted != 1 {
		t.Fatalf("Housekeep = %d interrupted, %v; want 1", interrupted, err)
	}
	isInterrupted := func(when string) {
		t.Helper()
		if r := runRow(t, pool, seq); r.Outcome != jobs.OutcomeInterrupted || r.OutputTail != "" || r.FinishedAt == nil ||
			r.Error != "replica replica-1 is gone: the run was interrupted" {
			t.Fatalf("%s: run row = %+v, want it interrupted by housekeeping", when, r)
		}
	}
	isInterrupted("after housekeeping")

	s.PutRun(running)
	mustFlush(t, s)
	isInterrupted("after a stale running version")

	finished := started.Add(time.Minute)
	other := jobstore.NewStore(pool, "replica-2", nil)
	other.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-2", StartedAt: started, FinishedAt: &finished,
		Outcome: jobs.OutcomeSucceeded, OutputTail: "not mine"})
	mustFlush(t, other)
	isInterrupted("after another replica's finish of the same seq")

	s.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: started, FinishedAt: &finished,
		Outcome: jobs.OutcomeSucceeded, OutputTail: "late"})
	mustFlush(t, s)
	if r := runRow(t, pool, seq); r.Outcome != jobs.OutcomeSucceeded || r.OutputTail != "late" || r.Error != "" ||
		r.FinishedAt == nil || !r.FinishedAt.Equal(finished) {
		t.Errorf("after the replica's own late finish: run row = %+v, want its succeeded outcome", r)
	}
}

// fullStatus has every stored column set to a value of its own.
func fullStatus(t testing.TB, job string, n int64) jobs.Status {
	base := usec(t, "2026-11-30T01:02:03.456789")
	at := func(sec int) *time.Time { return ptr(base.Add(time.Duration(sec) * time.Second)) }
	return jobs.Status{
		ReplicaID: "replica-1", JobID: job, Scope: jobs.ScopeInstallation, Schedule: "every 30s",
		NextFireAt: at(30), Running: true, LastStartedAt: at(-10), LastFinishedAt: at(-5),
		LastOutcome: jobs.OutcomeTimedOut, LastError: "context deadline exceeded", LastSuccessAt: at(-60),
		LastSkippedElsewhereAt: at(-2), Runs: n, Failures: n + 1, Timeouts: n + 2, LockLost: n + 3, Overruns: n + 4,
		SkippedElsewhere: n + 5, InvalidSchedule: `cron "x": expected exactly 5 fields`, Paused: true, UpdatedAt: *at(1),
	}
}

func TestPutStatusCoalescesAndFlushWritesOneRowPerJobWithEveryColumn(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	for i := range int64(5) {
		s.PutStatus(fullStatus(t, "report", i))
	}
	s.PutStatus(fullStatus(t, "reaper", 100))
	empty := jobs.Status{ReplicaID: "replica-1", JobID: "fresh", Scope: jobs.ScopeInstance, Schedule: "cron 0 2 * * *", UpdatedAt: usec(t, "2026-11-30T00:00:00")}
	s.PutStatus(empty)
	mustFlush(t, s)

	if flushes, statements := s.Stats(); flushes != 1 || statements != 3 {
		t.Errorf("Stats = %d flushes, %d statements; want 1 flush of 3 statements (BEGIN, status upsert, COMMIT)", flushes, statements)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status`); n != 3 {
		t.Errorf("%d status rows, want 3 (one per job)", n)
	}
	got, err := s.LoadStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []jobs.Status{fullStatus(t, "report", 4), fullStatus(t, "reaper", 100), empty} {
		if g, w := statusText(got[want.JobID]), statusText(want); g != w {
			t.Errorf("LoadStatus[%s]:\n got %s\nwant %s", want.JobID, g, w)
		}
	}
	// Times come back in UTC.
	if st := got["report"]; st.NextFireAt.Location() != time.UTC || st.UpdatedAt.Location() != time.UTC {
		t.Errorf("LoadStatus times are in %s and %s, want UTC", st.NextFireAt.Location(), st.UpdatedAt.Location())
	}

	// A later flush replaces the row (an upsert, not a second row).
	s.PutStatus(fullStatus(t, "report", 7))
	mustFlush(t, s)
	got, err = s.LoadStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got["report"].Runs != 7 || len(got) != 3 {
		t.Errorf("after a second flush: runs %d, %d jobs; want 7, 3", got["report"].Runs, len(got))
	}
}

func TestLoadStatusReturnsOnlyThisReplicasRows(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	a, b := jobstore.NewStore(pool, "replica-a", nil), jobstore.NewStore(pool, "replica-b", nil)
	a.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 1})
	b.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 2})
	b.PutStatus(jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 10s", Runs: 3})
	mustFlush(t, a)
	mustFlush(t, b)

	got, err := a.LoadStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["report"].Runs != 1 || got["report"].ReplicaID != "replica-a" {
		t.Errorf("LoadStatus of replica-a = %+v, want only its own report row", got)
	}
	got, err = b.LoadStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["report"].Runs != 2 || got["cache"].Runs != 3 {
		t.Errorf("LoadStatus of replica-b = %+v, want its two rows", got)
	}
}

func TestFlushSendsOneSeqsMessageWithTheFlushedSeqs(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	s := jobstore.NewStore(pool, "replica-1", nil)
	started := usec(t, "2026-11-30T01:00:00")
	var want []int64
	for range 3 {
		seq := mustSeq(t, s)
		want = append(want, seq)
		s.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: started, Outcome: jobs.OutcomeRunning})
		s.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: started, FinishedAt: &started, Outcome: jobs.OutcomeSucceeded})
	}
	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m"})
	mustFlush(t, s)

	m := nextMessage(t, conn)
	got := slices.Clone(m.Seqs)
	slices.Sort(got)
	if m.Type != bus.TypeSeqs || !slices.Equal(got, want) {
		t.Errorf("bus message = %+v, want seqs %v", m, want)
	}
	expectNoMessage(t, pool, conn)

	// A flush of status only announces no run.
	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 1})
	mustFlush(t, s)
	expectNoMessage(t, pool, conn)
}

// switchQuerier sends everything to the querier in q, which a test swaps;
// onBegin runs before each Begin.
type switchQuerier struct {
	mu      sync.Mutex
	q       jobstore.Querier
	onBegin func()
}

func (s *switchQuerier) get() jobstore.Querier {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q
}

func (s *switchQuerier) set(q jobstore.Querier, onBegin func()) {
	s.mu.Lock()
	s.q, s.onBegin = q, onBegin
	s.mu.Unlock()
}

func (s *switchQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return s.get().Exec(ctx, sql, args...)
}

func (s *switchQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return s.get().Query(ctx, sql, args...)
}

func (s *switchQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.get().QueryRow(ctx, sql, args...)
}

func (s *switchQuerier) Begin(ctx context.Context) (pgx.Tx, error) {
	s.mu.Lock()
	q, hook := s.q, s.onBegin
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return q.Begin(ctx)
}

func TestAFailedFlushKeepsThePendingItemsForTheNextFlush(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	closed := openPool(t, url)
	closed.Close()
	sq := &switchQuerier{q: closed}
	s := jobstore.NewStore(sq, "replica-1", nil)

	started := usec(t, "2026-11-30T01:00:00")
	s.PutRun(jobs.Run{Seq: 41, JobID: "report", ReplicaID: "replica-1", StartedAt: started, Outcome: jobs.OutcomeRunning})
	s.PutRun(jobs.Run{Seq: 42, JobID: "report", ReplicaID: "replica-1", StartedAt: started, FinishedAt: &started, Outcome: jobs.OutcomeSucceeded})
	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 1})
	s.PutStatus(jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 10s", Runs: 1})

	// While the failing flush is in flight, newer versions of one run and
	// one status arrive: they must win over the ones put back.
	finished := started.Add(time.Second)
	sq.set(closed, func() {
		s.PutRun(jobs.Run{Seq: 41, JobID: "report", ReplicaID: "replica-1", StartedAt: started, FinishedAt: &finished, Outcome: jobs.OutcomeFailed, Error: "newer"})
		s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 2})
	})
	if err := s.Flush(t.Context()); err == nil {
		t.Fatal("Flush through a closed pool succeeded, want an error")
	} else if !strings.Contains(err.Error(), "write job history") {
		t.Errorf("Flush error = %v, want it to say write job history", err)
	}
	if n := count(t, pool, `SELECT (SELECT count(*) FROM studio_job_run) + (SELECT count(*) FROM studio_job_status)`); n != 0 {
		t.Fatalf("a failed flush wrote %d rows", n)
	}
	if flushes, _ := s.Stats(); flushes != 0 {
		t.Errorf("Stats counts %d flushes after a failed one, want 0", flushes)
	}

	sq.set(pool, nil)
	mustFlush(t, s)
	if r := runRow(t, pool, 41); r.Outcome != jobs.OutcomeFailed || r.Error != "newer" {
		t.Errorf("run 41 = %+v, want the newer failed version", r)
	}
	if r := runRow(t, pool, 42); r.Outcome != jobs.OutcomeSucceeded {
		t.Errorf("run 42 = %+v, want the kept succeeded version", r)
	}
	got, err := s.LoadStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["report"].Runs != 2 || got["cache"].Runs != 1 {
		t.Errorf("status after the retry = %+v, want report runs 2 (the newer) and cache runs 1", got)
	}
	// Nothing is left over.
	mustFlush(t, s)
	if flushes, _ := s.Stats(); flushes != 1 {
		t.Errorf("Stats = %d flushes, want 1 (an empty Flush writes nothing)", flushes)
	}
}

func TestFlushingAThousandRunsAndStatusesTakesABoundedNumberOfStatements(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	resetStatements(t, pool)

	const n = 1000
	started := usec(t, "2026-11-30T01:00:00")
	seqs := make([]int64, n)
	for i := range seqs {
		seqs[i] = mustSeq(t, s)
	}
	put := func(outcome jobs.Outcome, runs int64) {
		for i, seq := range seqs {
			r := jobs.Run{Seq: seq, JobID: fmt.Sprintf("job-%04d", i), ReplicaID: "replica-1", StartedAt: started, Outcome: outcome}
			if outcome != jobs.OutcomeRunning {
				r.FinishedAt = &started
			}
			s.PutRun(r)
			s.PutStatus(jobs.Status{JobID: r.JobID, Scope: jobs.ScopeInstance, Schedule: "every 1m", Runs: runs, Running: outcome == jobs.OutcomeRunning})
		}
	}
	put(jobs.OutcomeRunning, 0)
	mustFlush(t, s)
	put(jobs.OutcomeSucceeded, 1)
	mustFlush(t, s)

	// Per flush: BEGIN, one upsert of runs, one pg_notify of their seqs, one
	// upsert of status, COMMIT.
	if flushes, statements := s.Stats(); flushes != 2 || statements != 10 {
		t.Errorf("Stats = %d flushes, %d statements; want 2 flushes of 5 statements", flushes, statements)
	}
	if got := count(t, pool, `SELECT count(*) FROM studio_job_run WHERE outcome = 'succeeded' AND finished_at IS NOT NULL`); got != n {
		t.Errorf("%d succeeded runs, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE runs = 1 AND NOT running`); got != n {
		t.Errorf("%d status rows with runs = 1, want %d", got, n)
	}

	// Each flush wrote an event per run it changed (docs/events.md).
	if got := count(t, pool, `SELECT count(*) FROM studio_event WHERE event = 'run'`); got != 2*n {
		t.Errorf("%d run events, want %d (a start and an end per run)", got, 2*n)
	}

	// The server agrees: pg_stat_statements saw each writing statement twice.
	calls, ok := statementCalls(t, pool)
	if !ok {
		return
	}
	for _, w := range []struct {
		prefix string
		calls  int64
	}{
		{"INSERT INTO studio_job_run", 2},
		{"INSERT INTO studio_job_status", 2},
		{"SELECT studio_event_runs", 2}, // the runs' events and the bus messages, in one statement
		{"SELECT nextval", 1},           // 1,000 seqs are one block
	} {
		if got := calls[w.prefix]; got != w.calls {
			t.Errorf("pg_stat_statements: %q ran %d times, want %d (all: %v)", w.prefix, got, w.calls, calls)
		}
	}
}

// resetStatements clears pg_stat_statements of this database, if available.
func resetStatements(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
	if err != nil {
		t.Logf("pg_stat_statements unavailable, counting with Store.Stats only: %v", err)
	}
}

// statementCalls sums pg_stat_statements calls of this database by the first
// words of the statement.
func statementCalls(t testing.TB, pool *pgxpool.Pool) (map[string]int64, bool) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT query, calls FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		t.Logf("pg_stat_statements unavailable: %v", err)
		return nil, false
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var q string
		var c int64
		if err := rows.Scan(&q, &c); err != nil {
			t.Fatal(err)
		}
		for _, prefix := range []string{"INSERT INTO studio_job_run", "INSERT INTO studio_job_status", "SELECT pg_notify", "SELECT studio_event_runs", "SELECT nextval"} {
			if strings.HasPrefix(strings.TrimSpace(q), prefix) {
				out[prefix] += c
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out, true
}

func TestTheWriterFlushesOnItsOwnAndStopFlushesWhatIsLeft(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()

	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 1})
	deadline := time.Now().Add(waitFor)
	for count(t, pool, `SELECT count(*) FROM studio_job_status WHERE runs = 1`) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the writer did not flush within %s", waitFor)
		}
		time.Sleep(pollEvery)
	}

	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Runs: 2})
	s.PutRun(jobs.Run{Seq: 7, JobID: "report", ReplicaID: "replica-1", StartedAt: time.Now(), Outcome: jobs.OutcomeRunning})
	s.Stop()
	stopped = true
	if got := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE runs = 2`) + count(t, pool, `SELECT count(*) FROM studio_job_run WHERE seq = 7`); got != 2 {
		t.Errorf("after Stop: %d of the 2 pending rows written", got)
	}
	s.Stop() // safe to call twice
}

func TestStopWithoutStartFlushes(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m"})
	s.Stop()
	s.Stop()
	if got := count(t, pool, `SELECT count(*) FROM studio_job_status`); got != 1 {
		t.Errorf("after Stop: %d status rows, want 1", got)
	}
}

func TestAFlushThatFailsRollsBackEverything(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	started := usec(t, "2026-11-30T01:00:00")
	s.PutRun(jobs.Run{Seq: 1, JobID: "report", ReplicaID: "replica-1", StartedAt: started, Outcome: jobs.OutcomeRunning})
	// A scope the table's CHECK refuses makes the status upsert fail after
	// the runs were written in the same transaction.
	s.PutStatus(jobs.Status{JobID: "report", Scope: "cluster", Schedule: "every 1m"})
	err := s.Flush(t.Context())
	if err == nil || !strings.Contains(err.Error(), "write job status") {
		t.Fatalf("Flush = %v, want a write job status error", err)
	}
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "23514" {
		t.Errorf("Flush error %v does not wrap the check violation", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_run`); n != 0 {
		t.Errorf("%d run rows after a failed flush, want 0 (one transaction)", n)
	}
}

func TestOneUnstorableRunDoesNotBlockTheWriter(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	started := usec(t, "2026-11-30T01:00:00")
	// Output with a NUL byte and invalid UTF-8, as a command may print.
	s.PutRun(jobs.Run{Seq: 1, JobID: "report", ReplicaID: "replica-1", StartedAt: started, FinishedAt: &started,
		Outcome: jobs.OutcomeFailed, Error: "bad \xff\xfe", OutputTail: "binary\x00output"})
	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", LastError: "bad \xff\xfe"})
	s.PutStatus(jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 10s", Runs: 1})
	if err := s.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status`); n != 2 {
		t.Errorf("%d status rows, want 2", n)
	}
	if r := runRow(t, pool, 1); r.Outcome != jobs.OutcomeFailed {
		t.Errorf("run = %+v, want it stored as failed", r)
	}
}

// Every column of studio_job_status round-trips through the one column
// list: a value written by the upsert reads back the same.
func TestAStatusRowRoundTripsEveryColumn(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	at := func(sec int) *time.Time { v := time.Date(2026, 1, 2, 3, 4, sec, 0, time.UTC); return &v }
	want := jobs.Status{
		ReplicaID: "replica-1", JobID: "all-columns", Scope: jobs.ScopeInstallation, Schedule: "every 30s",
		NextFireAt: at(1), Running: true, LastStartedAt: at(2), LastFinishedAt: at(3), LastOutcome: jobs.OutcomeFailed,
		LastError: "boom", LastSuccessAt: at(4), LastSkippedElsewhereAt: at(5), Runs: 6, Failures: 7, Timeouts: 8,
		LockLost: 9, Overruns: 10, SkippedElsewhere: 11, InvalidSchedule: "bad cron", Paused: true, UpdatedAt: *at(12),
	}
	s.PutStatus(want)
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got["all-columns"], want) {
		t.Fatalf("read back\n %+v\nwant\n %+v", got["all-columns"], want)
	}
	// Empty text is stored as NULL and read back as "".
	want.LastOutcome, want.LastError, want.InvalidSchedule = "", "", ""
	s.PutStatus(want)
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var nulls int
	if err := pool.QueryRow(t.Context(), `SELECT num_nulls(last_outcome, last_error, invalid_schedule) FROM studio_job_status WHERE job_id = 'all-columns'`).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 3 {
		t.Errorf("%d of the empty text columns are NULL, want 3", nulls)
	}
	if got, err = s.LoadStatus(t.Context()); err != nil || !reflect.DeepEqual(got["all-columns"], want) {
		t.Fatalf("read back %+v, %v", got["all-columns"], err)
	}
}

// A started store takes the next block of run seqs in the background once
// half of the current one is handed out, so a run does not wait for the
// round trip (docs/cost.md); the seqs still increase across blocks.
func TestAStartedStorePrefetchesTheNextSeqBlock(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	q := &countingQuerier{Querier: pool}
	s := jobstore.NewStore(q, "replica-1", nil)
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	blocks := 0
	countBlocks := func() int {
		_, texts, _ := q.calls()
		for _, sql := range texts {
			if strings.Contains(sql, "nextval") {
				blocks++
			}
		}
		return blocks
	}
	waitBlocks := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for countBlocks() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d blocks taken after 20 s; want %d", blocks, n)
			}
			time.Sleep(2 * time.Millisecond) // a poll, not a synchronisation
		}
	}
	var prev int64
	take := func(k int) {
		t.Helper()
		for range k {
			n := mustSeq(t, s)
			if n <= prev {
				t.Fatalf("seq %d after %d: not increasing", n, prev)
			}
			prev = n
		}
	}
	take(499)
	if n := countBlocks(); n != 1 {
		t.Fatalf("%d blocks taken with 501 seqs left; want the first only", n)
	}
	take(2) // 499 left: the next block is taken in the background
	waitBlocks(2)
	take(1000) // into the prefetched block, which is followed by another
	waitBlocks(3)
	if n := countBlocks(); n != 3 {
		t.Fatalf("%d blocks taken for 1,501 seqs; want 3", n)
	}
}

// TestAStoreOnAPooledPoolWritesRunsAndStatus: behind a pooler in
// transaction mode the replica's pool is in pgx's exec mode
// (db.ForPooler), where pgx picks each parameter's type from its Go type.
// The flush's allocation-free arrays have none it knows, and every flush
// failed with "unable to encode ... for unknown type (OID 0)" (found by
// the pooler tests after the cost work); the store gives pgx plain slices
// there.
func TestAStoreOnAPooledPoolWritesRunsAndStatus(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db.ForPoolerPool(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pool, err := db.OpenConfig(ctx, cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := jobstore.NewStore(pool, "replica-1", nil)
	started := usec(t, "2026-11-30T01:00:00")
	for i := range 3 {
		r := jobs.Run{Seq: mustSeq(t, s), JobID: fmt.Sprintf("job-%d", i), ReplicaID: "replica-1", Cluster: "c1",
			StartedAt: started, FinishedAt: &started, Outcome: jobs.OutcomeSucceeded, OutputTail: "ok"}
		s.PutRun(r)
		s.PutStatus(jobs.Status{JobID: r.JobID, Scope: jobs.ScopeInstance, Schedule: "every 1m", Runs: 1})
	}
	mustFlush(t, s)
	if got := count(t, pool, `SELECT count(*) FROM studio_job_run WHERE outcome = 'succeeded' AND output_tail = 'ok' AND cluster = 'c1'`); got != 3 {
		t.Errorf("%d runs written, want 3", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE runs = 1 AND next_fire_at IS NULL`); got != 3 {
		t.Errorf("%d status rows written, want 3", got)
	}
}
