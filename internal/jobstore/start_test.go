package jobstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// A run's row is in the table once RecordStart returns, before any flush:
// a replica killed while the task runs leaves it behind (the nemesis run
// found executions with no row: their replica was killed before the
// store's once-a-second flush). The flush's later versions of the row
// replace it, and there is still one row.
func TestRecordStartWritesTheRowBeforeAnyFlush(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	t.Cleanup(s.Stop)
	seq := mustSeq(t, s)
	started := usec(t, "2026-12-06T06:00:00.250000")
	nominal := usec(t, "2026-12-06T06:00:00")
	run := jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", Cluster: "eu-1", StartedAt: started, Outcome: jobs.OutcomeRunning,
		NominalAt: nominal, ScopeKey: "eu-1", Triggered: true}
	s.PutRun(run)
	if err := s.RecordStart(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	r := runRow(t, pool, seq)
	if err := pool.QueryRow(t.Context(), `SELECT nominal_at, scope_key, triggered FROM studio_job_run WHERE seq = $1`, seq).
		Scan(&r.NominalAt, &r.ScopeKey, &r.Triggered); err != nil {
		t.Fatal(err)
	}
	if r.JobID != "report" || r.ReplicaID != "replica-1" || r.Cluster != "eu-1" || !r.StartedAt.Equal(started) ||
		r.Outcome != jobs.OutcomeRunning || r.FinishedAt != nil || !r.NominalAt.Equal(nominal) || r.ScopeKey != "eu-1" || !r.Triggered {
		t.Errorf("row after RecordStart, before a flush = %+v; want the running run", r)
	}
	if flushes, _ := s.Stats(); flushes != 0 {
		t.Fatalf("%d flushes; the row must come from RecordStart", flushes)
	}

	// The end, through the flush, replaces it.
	finished := started.Add(time.Second)
	run.FinishedAt, run.Outcome, run.OutputTail = &finished, jobs.OutcomeSucceeded, "DELETE 3"
	s.PutRun(run)
	mustFlush(t, s)
	if r := runRow(t, pool, seq); r.Outcome != jobs.OutcomeSucceeded || r.FinishedAt == nil || !r.FinishedAt.Equal(finished) || r.OutputTail != "DELETE 3" {
		t.Errorf("row after the end's flush = %+v; want succeeded at %s", r, finished)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_run`); n != 1 {
		t.Errorf("%d run rows, want 1", n)
	}
	// A start written again (a retried write) leaves the ended row alone.
	run.FinishedAt, run.Outcome = nil, jobs.OutcomeRunning
	if err := s.RecordStart(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	if r := runRow(t, pool, seq); r.Outcome != jobs.OutcomeSucceeded {
		t.Errorf("row after a second start = %+v; want it still succeeded", r)
	}
}

// gateQuerier holds every Exec until open is closed, once entered is
// closed by the first.
type gateQuerier struct {
	jobstore.Querier
	entered, open chan struct{}
	once          sync.Once
	mu            sync.Mutex
	execs         int
}

func (g *gateQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	g.mu.Lock()
	g.execs++
	g.mu.Unlock()
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.Querier.Exec(ctx, sql, args...)
}

// Starts that arrive while a write of starts is under way go together in
// the next write: one statement for all of them (group commit), so the
// statements a second are bounded by round trips, not by the number of
// runs starting.
func TestStartsThatArriveDuringAWriteGoInOneStatement(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	g := &gateQuerier{Querier: pool, entered: make(chan struct{}), open: make(chan struct{})}
	s := jobstore.NewStore(g, "replica-1", nil)
	t.Cleanup(s.Stop)
	const n = 50
	started := usec(t, "2026-12-06T06:00:00")
	errs := make(chan error, n+1)
	start := func(seq int64) {
		errs <- s.RecordStart(t.Context(), jobs.Run{Seq: seq, JobID: fmt.Sprintf("job-%d", seq), ReplicaID: "replica-1",
			StartedAt: started, Outcome: jobs.OutcomeRunning, ScopeKey: "replica-1"})
	}
	go start(1000)
	<-g.entered // the first write is under way and held
	for i := range n {
		go start(int64(1001 + i))
	}
	waitUntil(t, "the other starts queued", func() bool { return jobstore.PendingStarts(s) == n })
	close(g.open)
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM studio_job_run WHERE outcome = 'running'`); got != n+1 {
		t.Errorf("%d running rows, want %d", got, n+1)
	}
	g.mu.Lock()
	execs := g.execs
	g.mu.Unlock()
	if execs != 2 || s.StartWrites() != 2 {
		t.Errorf("%d statements, %d writes for %d starts; want 2 (the first alone, then the rest together)", execs, s.StartWrites(), n+1)
	}
}

// A write of starts that fails is tried again until the database answers:
// a run that waits through a short fault (a restart takes 2 to 3 s) gets
// its row before its task starts, and one that stopped waiting (its wait
// is bounded) has its row written as soon as the database answers, before
// any flush: a replica killed right after the fault must not take the row
// along (the hour-long nemesis run found four such rows, each right after a
// PostgreSQL restart, when a failed write was left to the flush).
func TestAFailedWriteOfStartsIsTriedAgainUntilTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	pool, sq, s := storeOnAClosedPool(t)
	run := func(seq int64) jobs.Run {
		return jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: usec(t, "2026-12-06T06:00:00"), Outcome: jobs.OutcomeRunning}
	}
	// A run whose wait ends while the database still fails: an error, and
	// the write goes on.
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := s.RecordStart(short, run(1)); err == nil {
		t.Fatal("a start through a closed pool returned nil")
	} else if !strings.Contains(err.Error(), "tried again") {
		t.Errorf("error %q; want it to say the write is tried again", err)
	}
	// A run that waits longer, through the fault.
	waited := make(chan error, 1)
	go func() { waited <- s.RecordStart(t.Context(), run(2)) }()
	waitUntil(t, "a retry of the failed write", func() bool { return s.StartWrites() >= 3 })
	sq.set(pool, nil) // the database answers again
	if err := <-waited; err != nil {
		t.Fatalf("a start that waited through the fault: %v; want it written", err)
	}
	waitUntil(t, "both rows written", func() bool { return count(t, pool, `SELECT count(*) FROM studio_job_run WHERE seq IN (1, 2)`) == 2 })
	if flushes, _ := s.Stats(); flushes != 0 {
		t.Fatalf("%d flushes; the rows must come from the writes of starts", flushes)
	}
	if err := s.RecordStart(t.Context(), run(3)); err != nil {
		t.Fatalf("a start after the database answered: %v", err)
	}
}

// Stop ends a write of starts that waits to try again: the store stops
// without waiting for a database that does not answer.
func TestStopEndsAWriteOfStartsThatWaitsToTryAgain(t *testing.T) {
	t.Parallel()
	_, _, s := storeOnAClosedPool(t)
	errs := make(chan error, 1)
	go func() {
		errs <- s.RecordStart(t.Context(), jobs.Run{Seq: 1, JobID: "report", ReplicaID: "replica-1", StartedAt: time.Now(), Outcome: jobs.OutcomeRunning})
	}()
	waitUntil(t, "a failed write", func() bool { return s.StartWrites() >= 1 })
	s.Stop()
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("the waiting start after Stop: %v; want an error saying the store stopped", err)
	}
}

// storeOnAClosedPool is a store whose querier fails every statement until
// the test switches it to pool.
func storeOnAClosedPool(t *testing.T) (*pgxpool.Pool, *switchQuerier, *jobstore.Store) {
	t.Helper()
	pool, url := newPool(t)
	closed := openPool(t, url)
	closed.Close()
	sq := &switchQuerier{q: closed}
	s := jobstore.NewStore(sq, "replica-1", nil)
	t.Cleanup(s.Stop)
	return pool, sq, s
}

// waitUntil polls cond until it holds, failing the test after waitFor.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
	}
}
