package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// withDeadline returns s with a start deadline of d.
func withDeadline(s jobs.Schedule, d time.Duration) jobs.Schedule { return s.WithDeadline(d) }

// The run at start after every replica was down is the last missed due
// time's occurrence: later than its deadline, it is skipped/deadline and
// the job waits for its next due time; within it, it runs.
func TestARunAtStartLaterThanItsDeadlineIsSkipped(t *testing.T) {
	t.Parallel()
	t.Run("past the deadline", func(t *testing.T) {
		t.Parallel()
		ft := &occTask{}
		e, _, o := sharedDBEnv(t, jobs.MissedRunOnce, t0.Add(-125*time.Second), ft)
		o.Jobs[0].Schedule = withDeadline(o.Jobs[0].Schedule, 3*time.Second)
		e.start(o)
		// Due times t0-115s ... t0-5s passed; t0-5s is 5 s late at start.
		e.waitIdle("shared", t0.Add(5*time.Second))
		if n := len(ft.got()); n != 0 {
			t.Fatalf("%d runs; want none: the occurrence was past its deadline", n)
		}
		got := e.occurrences("shared")
		if len(got) != 2 || got[0].Reason != "down" || got[0].Count != 11 ||
			got[1].Outcome != "skipped" || got[1].Reason != "deadline" || !got[1].Nominal.Equal(t0.Add(-5*time.Second)) || got[1].Holder != nil {
			t.Fatalf("occurrences %+v; want the missed stretch and t0-5s skipped/deadline", got)
		}
		e.clk.Advance(5 * time.Second)
		eventually(t, "the next due time's run", func() bool { return len(ft.got()) == 1 })
		if at := ft.got()[0].ScheduledAt; !at.Equal(t0.Add(5 * time.Second)) {
			t.Errorf("the run's nominal time %v; want the next due time %v", at, t0.Add(5*time.Second))
		}
	})
	t.Run("within the deadline", func(t *testing.T) {
		t.Parallel()
		ft := &occTask{}
		e, _, o := sharedDBEnv(t, jobs.MissedRunOnce, t0.Add(-125*time.Second), ft)
		o.Jobs[0].Schedule = withDeadline(o.Jobs[0].Schedule, 6*time.Second)
		e.start(o)
		eventually(t, "the run at start", func() bool { return len(ft.got()) == 1 })
		if at := ft.got()[0].ScheduledAt; !at.Equal(t0.Add(-5 * time.Second)) {
			t.Errorf("the run's nominal time %v; want t0-5s", at)
		}
		for _, o := range e.occurrences("shared") {
			if o.Reason == "deadline" {
				t.Errorf("occurrence %+v: the run was within its deadline", o)
			}
		}
	})
}

// A fire that waits for a slot of max_concurrent_runs past its deadline
// does not run: skipped/deadline, then its next due time.
func TestAFireThatWaitsForASlotPastItsDeadlineIsSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	busy, late := e.task(), e.task()
	late.auto = true
	b := e.job("late", jobs.ScopeInstance, 10*time.Second, late)
	b.Schedule = withDeadline(b.Schedule, 2*time.Second)
	o := e.options(e.job("busy", jobs.ScopeInstance, 10*time.Second, busy), b)
	o.MaxConcurrentRuns = 1
	o.InitialDelay = func(j jobs.Job) time.Duration {
		if j.ID == "late" {
			return time.Second
		}
		return 0
	}
	e.start(o)
	busy.waitStarts(t, 1)
	e.clk.Advance(time.Second) // late fires and waits for the slot
	eventually(t, "late waiting for a slot", func() bool { return gaugeValue(gather(t, e.reg), "studio_runner_runs_waiting") == 1 })
	e.clk.Advance(4 * time.Second)
	busy.finish(t, tasks.Result{})
	e.waitIdle("late", t0.Add(11*time.Second))
	if n := late.startCount(); n != 0 {
		t.Fatalf("late ran %d times; want none: it got its slot 4 s after its nominal time, deadline 2s", n)
	}
	got := e.occurrences("late")
	if len(got) != 1 || got[0].Outcome != "skipped" || got[0].Reason != "deadline" || !got[0].Nominal.Equal(t0.Add(time.Second)) || got[0].Scope != replicaID {
		t.Fatalf("occurrences %+v; want t0+1s skipped/deadline in scope %s", got, replicaID)
	}
	// Its next due time runs, on time.
	e.clk.Advance(6 * time.Second)
	late.waitEnds(t, 1)
}

// A lock held by another holder: with a deadline, the tick tries again
// until shortly before it; a lock freed meanwhile runs the occurrence
// late, one never freed is skipped/deadline naming the holder.
func TestALockHeldPastTheDeadlineIsSkippedAndOneFreedBeforeItRuns(t *testing.T) {
	t.Parallel()
	t.Run("never freed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ft := e.task()
		if _, err := e.otherHolder("java-node-3").TryLock(t.Context(), "held", time.Hour, 0); err != nil {
			t.Fatal(err)
		}
		j := e.job("held", jobs.ScopeInstallation, 10*time.Second, ft)
		j.Schedule = withDeadline(j.Schedule, 3*time.Second)
		e.start(e.options(j))
		// Tries at t0, t0+1s, t0+2s and t0+2.9s (100 ms before the deadline).
		e.waitIdle("held", t0.Add(time.Second))
		e.clk.Advance(time.Second)
		e.waitIdle("held", t0.Add(2*time.Second))
		e.clk.Advance(time.Second)
		e.waitIdle("held", t0.Add(2900*time.Millisecond))
		if got := e.occurrences("held"); len(got) != 0 {
			t.Fatalf("occurrences %+v before the deadline; want none", got)
		}
		e.clk.Advance(900 * time.Millisecond)
		e.waitIdle("held", t0.Add(12900*time.Millisecond))
		got := e.occurrences("held")
		if len(got) != 1 || got[0].Outcome != "skipped" || got[0].Reason != "deadline" || !got[0].Nominal.Equal(t0) ||
			got[0].Holder == nil || *got[0].Holder != "java-node-3" {
			t.Fatalf("occurrences %+v; want t0 skipped/deadline, held by java-node-3", got)
		}
		if st := status(t, e.r, "held"); st.SkippedElsewhere != 1 {
			t.Errorf("skipped elsewhere %d; want 1 (the tries are one tick)", st.SkippedElsewhere)
		}
		if n := ft.startCount(); n != 0 {
			t.Errorf("%d runs; want none", n)
		}
	})
	t.Run("freed before the deadline", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ft := &occTask{}
		if _, err := e.otherHolder("java-node-3").TryLock(t.Context(), "held", time.Hour, 0); err != nil {
			t.Fatal(err)
		}
		j := e.job("held", jobs.ScopeInstallation, 10*time.Second, nil)
		j.Task = ft
		j.Schedule = withDeadline(j.Schedule, 3*time.Second)
		e.start(e.options(j))
		e.waitIdle("held", t0.Add(time.Second))
		e.exec(`DELETE FROM shedlock WHERE name = 'held'`)
		e.clk.Advance(time.Second)
		eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
		if at := ft.got()[0].ScheduledAt; !at.Equal(t0) {
			t.Errorf("the late run's nominal time %v; want its due time t0", at)
		}
		if got := e.occurrences("held"); len(got) != 0 {
			t.Errorf("occurrences %+v; want none: the occurrence ran", got)
		}
	})
	t.Run("without a deadline, one skip and no retry", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ft := e.task()
		if _, err := e.otherHolder("java-node-3").TryLock(t.Context(), "held", time.Hour, 0); err != nil {
			t.Fatal(err)
		}
		e.start(e.options(e.job("held", jobs.ScopeInstallation, 10*time.Second, ft)))
		e.waitIdle("held", t0.Add(10*time.Second))
		if got := e.occurrences("held"); len(got) != 1 || got[0].Reason != "held-elsewhere" {
			t.Fatalf("occurrences %+v; want one held-elsewhere", got)
		}
	})
}

// A timer that fires later than the deadline (a stalled or loaded
// replica: here the clock jumps past the due time) skips the occurrence;
// one late within the deadline runs.
func TestATimerThatFiresPastTheDeadlineSkipsItsOccurrence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	ft.auto = true
	j := e.job("late", jobs.ScopeInstance, 10*time.Second, ft)
	j.Schedule = withDeadline(j.Schedule, 2*time.Second)
	o := e.options(j)
	o.InitialDelay = func(jobs.Job) time.Duration { return 10 * time.Second }
	e.start(o)
	e.waitIdle("late", t0.Add(10*time.Second))
	e.clk.Advance(15 * time.Second) // fires 5 s after its due time
	e.waitIdle("late", t0.Add(20*time.Second))
	if n := ft.startCount(); n != 0 {
		t.Fatalf("%d runs; want none", n)
	}
	got := e.occurrences("late")
	if len(got) != 1 || got[0].Reason != "deadline" || !got[0].Nominal.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("occurrences %+v; want t0+10s skipped/deadline", got)
	}
	e.clk.Advance(6 * time.Second) // 1 s late: within the deadline
	ft.waitEnds(t, 1)
	if runs := e.runNominals("late"); len(runs) != 1 || !runs[0].nominal.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("runs %+v; want one of nominal time t0+20s", runs)
	}
}

// heldThenFreed is a Locker whose lock is held at the first attempt; at
// the second the holder's run has ended (its end recorded in the shared
// schedule just after its unlock) and the lock is free.
type heldThenFreed struct {
	sch      *fakeSchedules
	mu       sync.Mutex
	attempts int
	unlocked int
}

func (h *heldThenFreed) TryLock(context.Context, string, time.Duration, time.Duration) (runner.Lock, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts++
	if h.attempts == 1 {
		return nil, locks.ErrHeldElsewhere
	}
	h.sch.set("shared", h.sch.clk.Now()) // the holder's end, recorded after its unlock
	return countedLock{h}, nil
}

type countedLock struct{ h *heldThenFreed }

func (c countedLock) Extend(context.Context, time.Duration, time.Duration) (runner.Lock, error) {
	return c, nil
}
func (countedLock) Token() int64 { return 0 }

// Unlock and Release (giveBack's) both count as the lock given back.
func (c countedLock) Unlock(context.Context) error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.unlocked++
	return nil
}

func (c countedLock) Release(ctx context.Context) error { return c.Unlock(ctx) }

// A retry that takes the lock after the holder's run of the occurrence
// ended, whose end the tick had not read yet, does not run the occurrence
// again: it gives the lock back and waits for the due time after that end.
func TestARetryThatFindsTheOccurrenceServedGivesTheLockBack(t *testing.T) {
	t.Parallel()
	e, sch, _, ft, o := sharedEnv(t, jobs.MissedRunOnce, t0.Add(-10*time.Second))
	lk := &heldThenFreed{sch: sch}
	o.Locks = lk
	o.Jobs[0].Schedule = withDeadline(o.Jobs[0].Schedule, 5*time.Second)
	e.start(o)
	// Due at t0 (the last end + 10s): held, so a retry a second later.
	e.waitIdle("shared", t0.Add(1250*time.Millisecond))
	e.clk.Advance(1250 * time.Millisecond)
	e.waitIdle("shared", t0.Add(11250*time.Millisecond)) // the end (t0+1.25s) + every
	if n := ft.startCount(); n != 0 {
		t.Fatalf("%d runs; want none: the holder ran the occurrence", n)
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.attempts != 2 || lk.unlocked != 1 {
		t.Fatalf("%d lock attempts, %d unlocks; want 2 and 1", lk.attempts, lk.unlocked)
	}
}

// A retry whose timer fires past the deadline while a live replica holds
// the lock (it runs the occurrence) records nothing, like a held-elsewhere
// skip.
func TestALateRetryWhileALiveReplicaHoldsTheLockRecordsNoSkip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('replica-b', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	if _, err := e.otherHolder("replica-b").TryLock(t.Context(), "held", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	j := e.job("held", jobs.ScopeInstallation, 10*time.Second, ft)
	j.Schedule = withDeadline(j.Schedule, 3*time.Second)
	e.start(e.options(j))
	e.waitIdle("held", t0.Add(time.Second))
	// replica-b live for the retry's read of the holder (a heartbeat
	// under 15 s old): the steps above may take that long at load 25.
	e.exec(`UPDATE studio_replica SET heartbeat_at = now() WHERE id = 'replica-b'`)
	e.clk.Advance(5 * time.Second)             // the retry fires 2 s past the deadline
	e.waitIdle("held", t0.Add(10*time.Second)) // its next due time on its grid
	if got := e.occurrences("held"); len(got) != 0 {
		t.Fatalf("occurrences %+v; want none: replica-b runs the occurrence", got)
	}
}
