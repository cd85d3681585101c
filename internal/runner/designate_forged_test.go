package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/runner"
)

// confirmingSchedules is the shared schedule in memory on the fake clock
// (fakeSchedules), whose StartConfirmer is the real one
// (jobstore.Schedules.RunStartedSince) on the env's database: the runs it
// finds are the rows the run store wrote, this runner's or the test's own
// (the designated replica's, played by the test).
type confirmingSchedules struct {
	*fakeSchedules
	db *jobstore.Schedules

	mu       sync.Mutex
	confirms int
}

func (c *confirmingSchedules) RunStartedSince(ctx context.Context, job string, since time.Time) (bool, error) {
	c.mu.Lock()
	c.confirms++
	c.mu.Unlock()
	return c.db.RunStartedSince(ctx, job, since)
}

func (c *confirmingSchedules) nConfirms() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.confirms
}

// attemptCounter counts the lock attempts on a real lock provider.
type attemptCounter struct {
	runner.Locker
	mu sync.Mutex
	n  int
}

func (a *attemptCounter) TryLock(ctx context.Context, name string, atMost, atLeast time.Duration) (runner.Lock, error) {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	return a.Locker.TryLock(ctx, name, atMost, atLeast)
}

func (a *attemptCounter) attempts() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// forgedEnv is a PostgreSQL env (store, locks, occurrences) whose job
// "shared" (every 10s, last ended at t0-3s) waits, on this replica, for a
// designated replica that ranks first among 3 and never runs it here: the
// test plays it, or it is dead.
func forgedEnv(t *testing.T) (*env, *confirmingSchedules, *attemptCounter, *fakeTask, *runner.Runner) {
	t.Helper()
	e := newEnv(t)
	ft := e.task()
	ft.auto = true
	sch := &confirmingSchedules{fakeSchedules: &fakeSchedules{clk: e.clk, ends: map[string]time.Time{"shared": t0.Add(-3 * time.Second)}},
		db: jobstore.NewSchedules(e.pool)}
	o := e.options(e.job("shared", jobs.ScopeInstallation, 10*time.Second, ft))
	lk := &attemptCounter{Locker: o.Locks}
	o.Locks, o.Schedules = lk, sch
	o.Members = fixedMembers(membersRanking(t, "shared", 1, 3), true)
	return e, sch, lk, ft, e.start(o)
}

// designatedStarts writes the run row the designated replica writes when
// its run starts (runner.durable_starts), through the run store.
func (e *env) designatedStarts(job string, at time.Time) {
	e.t.Helper()
	seq, err := e.store.NextSeq(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	e.store.PutRun(jobs.Run{Seq: seq, JobID: job, ReplicaID: "replica-b", StartedAt: at, Outcome: jobs.OutcomeRunning, NominalAt: jobs.Nominal(at)})
	e.flush()
}

// A job.started signal that nothing in the database confirms (forged by
// anyone who can NOTIFY, here a stream of them, one before each fire and
// one during each wait) no longer takes the due time away: the fallback
// asks the database, finds no run, and runs the due time itself, one grace
// late. Before, every due time was given up: no run, and nothing recorded
// in the occurrences (jobs why showed nothing).
func TestAForgedStartDoesNotTakeTheDueTimeAway(t *testing.T) {
	e, sch, lk, ft, r := forgedEnv(t)
	due := t0.Add(7 * time.Second)
	for i := 1; i <= 3; i++ {
		e.waitIdle("shared", due)
		if i > 1 {
			e.expireLock("shared") // the last run's minimum gap, in database time, has passed
		}
		e.clk.Advance(due.Sub(e.clk.Now()) - 20*time.Millisecond)
		r.RunStarted("shared") // forged, just before the fire: as a start heard early
		e.clk.Advance(20 * time.Millisecond)
		fallback := due.Add(runner.DefaultDesignateGrace)
		e.waitIdle("shared", fallback)
		r.RunStarted("shared") // forged, during the wait
		e.clk.Advance(runner.DefaultDesignateGrace)
		ft.waitEnds(t, i)
		if n := lk.attempts(); n != i {
			t.Fatalf("due time %d: %d lock attempts, want %d", i, n, i)
		}
		due = fallback.Add(10 * time.Second) // every 10s after this run's end
	}
	e.waitIdle("shared", due)
	if n := sch.nConfirms(); n != 3 {
		t.Errorf("%d reads to confirm a start, want 3 (one per forged due time)", n)
	}
	runs := e.runNominals("shared")
	want := []time.Time{t0.Add(7 * time.Second), t0.Add(18 * time.Second), t0.Add(29 * time.Second)}
	if len(runs) != len(want) {
		t.Fatalf("%d runs %+v, want 3", len(runs), runs)
	}
	for i, w := range want {
		if !runs[i].nominal.Equal(w) {
			t.Errorf("run %d is the occurrence of %v, want %v", i, runs[i].nominal, w)
		}
	}
}

// A start heard that the database confirms (the designated replica's run
// row is written: a run longer than the grace) gives the due time up at
// the fallback with one read and no lock attempt; the end heard later
// moves the timer without a read.
func TestAConfirmedStartGivesUpTheFallbackWithOneReadAndNoLockAttempt(t *testing.T) {
	e, sch, lk, ft, r := forgedEnv(t)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(7 * time.Second)
	fallback := due.Add(runner.DefaultDesignateGrace)
	e.waitIdle("shared", fallback)
	e.designatedStarts("shared", due.Add(5*time.Millisecond))
	r.RunStarted("shared")
	reads := sch.n()
	e.clk.Advance(runner.DefaultDesignateGrace)
	e.waitIdle("shared", due.Add(10*time.Second)) // given up: the next due time as if the run took no time
	end := fallback.Add(3 * time.Second)
	e.clk.Advance(end.Sub(e.clk.Now()))
	r.ScheduleEnded("shared", end, due)
	e.waitIdle("shared", end.Add(10*time.Second))
	if n, c, rd := lk.attempts(), sch.nConfirms(), sch.n()-reads; n != 0 || c != 1 || rd != 0 || ft.startCount() != 0 {
		t.Fatalf("%d lock attempts, %d confirming reads, %d schedule reads, %d runs; want 0, 1, 0, 0", n, c, rd, ft.startCount())
	}
}

// In steady state a run's end is heard before the fallback: a start heard
// costs the waiting replica no statement at all, as before.
func TestARealStartWhoseEndIsHeardBeforeTheFallbackCostsNoStatement(t *testing.T) {
	e, sch, lk, ft, r := forgedEnv(t)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(7 * time.Second)
	e.waitIdle("shared", due.Add(runner.DefaultDesignateGrace))
	reads := sch.n()
	r.RunStarted("shared")
	e.clk.Advance(200 * time.Millisecond)
	end := e.clk.Now()
	r.ScheduleEnded("shared", end, due)
	e.waitIdle("shared", end.Add(10*time.Second))
	e.clk.Advance(2 * runner.DefaultDesignateGrace)
	if n, c, rd := lk.attempts(), sch.nConfirms(), sch.n()-reads; n != 0 || c != 0 || rd != 0 || ft.startCount() != 0 {
		t.Fatalf("%d lock attempts, %d confirming reads, %d schedule reads, %d runs; want none", n, c, rd, ft.startCount())
	}
}

// A true job.started whose run never comes (the designated replica killed
// just after its lock, before its run row): the fallback finds no run,
// tries the lock, finds it held by the dead replica and records the skip
// naming it, so jobs why explains the due time. Before, it was given up
// with nothing recorded.
func TestAnOrphanedStartIsASkipNamingTheDeadHolder(t *testing.T) {
	e, sch, lk, ft, r := forgedEnv(t)
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES ('replica-b', gen_random_uuid(), 'h', 1, 'dev', 'ready', now() - interval '1 hour')`)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	if _, err := e.otherHolder("replica-b").TryLock(t.Context(), "shared", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(7 * time.Second)
	fallback := due.Add(runner.DefaultDesignateGrace)
	e.waitIdle("shared", fallback)
	r.RunStarted("shared") // sent with the lock; then replica-b died
	e.clk.Advance(runner.DefaultDesignateGrace)
	eventually(t, "the fallback's lock attempt", func() bool { return lk.attempts() == 1 })
	e.waitIdle("shared", due.Add(10*time.Second))
	if c := sch.nConfirms(); c != 1 || ft.startCount() != 0 {
		t.Fatalf("%d confirming reads and %d runs; want 1 and 0", c, ft.startCount())
	}
	got := e.occurrences("shared")
	if len(got) != 1 || got[0].Outcome != "skipped" || got[0].Reason != "held-elsewhere" || got[0].Holder == nil ||
		*got[0].Holder != "replica-b" || !got[0].Nominal.Equal(due) {
		t.Fatalf("occurrences %+v; want one held-elsewhere skip of %v naming replica-b", got, due)
	}
}
