package runner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// Timers on the fake clock while a job waits: the timer loop's. While an
// instance job runs: plus its timeout. While an installation job runs: plus
// its keep-alive.
const (
	timersWaiting          = 1
	timersRunningInstance  = 2
	timersRunningInstalled = 3
)

func TestARunThatOutlastsItsIntervalNeverOverlapsItself(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		r := e.start(e.options(e.job("slow", jobs.ScopeInstance, 10*time.Second, ft)))

		synctest.Wait()
		// Five intervals pass while the first run lasts: the job is not on
		// the timer, so nothing fires.
		for range 5 {
			e.advance(10 * time.Second)
			if st := status(t, r, "slow"); !st.Running {
				t.Fatalf("at %s the job is not running; want the first run still in progress", time.Now().Format(time.TimeOnly))
			}
			if n := ft.startCount(); n != 1 {
				t.Fatalf("at %s %d runs have started; want 1", time.Now().Format(time.TimeOnly), n)
			}
		}
		end := time.Now()
		ft.finish(t, tasks.Result{})
		e.idleAt("slow", end.Add(10*time.Second))
		if n := ft.startCount(); n != 1 {
			t.Fatalf("%d runs started by the end of the first; want 1", n)
		}

		e.advance(10 * time.Second)
		if n := ft.startCount(); n != 2 {
			t.Fatalf("%d runs started 10s after the first ended; want 2", n)
		}
		if got, want := ft.start(1), end.Add(10*time.Second); !got.Equal(want) {
			t.Errorf("second run started at %s; want %s (10s after the first ended)", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		ft.finish(t, tasks.Result{})
		e.idleAt("slow", end.Add(20*time.Second))
		if n := ft.maxConcurrent(); n != 1 {
			t.Errorf("at most %d runs were in progress at once; want 1", n)
		}
	})
}

func TestAFixedDelayCountsFromTheEndOfARun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		r := e.start(e.options(e.job("delay", jobs.ScopeInstance, 10*time.Second, ft)))
		start := time.Now()

		e.advance(7 * time.Second)
		ft.finish(t, tasks.Result{})
		e.idleAt("delay", start.Add(17*time.Second))

		// start + 10s: a fixed rate would fire here; a fixed delay does not.
		e.advance(3 * time.Second)
		if n := ft.startCount(); n != 1 {
			t.Fatalf("%d runs at start+10s; want 1", n)
		}
		if st := status(t, r, "delay"); st.NextFireAt == nil || !st.NextFireAt.Equal(start.Add(17*time.Second)) {
			t.Fatalf("next fire %v; want %s", st.NextFireAt, start.Add(17*time.Second))
		}

		e.advance(7 * time.Second)
		if n := ft.startCount(); n != 2 {
			t.Fatalf("%d runs at start+17s; want 2", n)
		}
		if got, want := ft.end(0), start.Add(7*time.Second); !got.Equal(want) {
			t.Errorf("first run ended at %s; want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		if got, want := ft.start(1), ft.end(0).Add(10*time.Second); !got.Equal(want) {
			t.Errorf("second run started at %s; want %s (end + 10s)", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		ft.finish(t, tasks.Result{})
	})
}

func TestARunThatEndsAfterItsNextFireWasDueCountsAsAnOverrun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	e.start(e.options(e.job("overrun", jobs.ScopeInstance, 10*time.Second, ft)))

	// 5s: well within the interval.
	ft.waitStarts(t, 1)
	e.waitPending(timersRunningInstance)
	e.clk.Advance(5 * time.Second)
	ft.finish(t, tasks.Result{})
	if st := e.waitIdle("overrun", t0.Add(15*time.Second)); st.Overruns != 0 {
		t.Fatalf("a 5s run of a 10s job: overruns %d; want 0", st.Overruns)
	}

	// 10s exactly: it ends when its next fire is due, not after.
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 2)
	e.waitPending(timersRunningInstance)
	e.clk.Advance(10 * time.Second)
	ft.finish(t, tasks.Result{})
	if st := e.waitIdle("overrun", t0.Add(35*time.Second)); st.Overruns != 0 {
		t.Fatalf("a 10s run of a 10s job: overruns %d; want 0", st.Overruns)
	}

	// 12s: it ends 2s after its next fire was due.
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 3)
	e.waitPending(timersRunningInstance)
	e.clk.Advance(12 * time.Second)
	ft.finish(t, tasks.Result{})
	st := e.waitIdle("overrun", t0.Add(57*time.Second))
	if st.Overruns != 1 || st.Runs != 3 || st.Failures != 0 {
		t.Fatalf("after a 12s run: overruns %d, runs %d, failures %d; want 1, 3, 0", st.Overruns, st.Runs, st.Failures)
	}

	e.flush()
	rows, _, err := jobstore.ReadStatus(t.Context(), e.pool, "overrun")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Overruns != 1 || rows[0].ReplicaID != replicaID {
		t.Fatalf("stored status %+v; want one row of %s with overruns 1", rows, replicaID)
	}
}

func TestARunIsCancelledAtItsTimeoutAndTheJobWaitsForItsGoroutine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		ft.linger = true // it returns only when released, well after its context is done
		j := e.job("stuck", jobs.ScopeInstance, 10*time.Second, ft)
		j.Timeout = 30 * time.Second
		r := e.start(e.options(j))
		start := time.Now()

		e.advance(29 * time.Second)
		if c := ft.cancelled(); len(c) != 0 {
			t.Fatalf("the run was cancelled before its timeout: %v", c)
		}
		e.advance(time.Second)
		if c := ft.cancelled(); len(c) != 1 || !causeIs(c[0], "run timed out") {
			t.Fatalf("causes at the timeout %v; want run timed out", c)
		}

		// The context is done but the task has not returned: however long
		// that lasts, the job does not fire again.
		for range 3 {
			e.advance(10 * time.Second)
			if n := ft.startCount(); n != 1 {
				t.Fatalf("at %s %d runs have started while the timed-out one had not returned; want 1", time.Now().Format(time.TimeOnly), n)
			}
			if st := status(t, r, "stuck"); !st.Running {
				t.Fatalf("at %s the job is not running; its task has not returned", time.Now().Format(time.TimeOnly))
			} else if st.Timeout != 30*time.Second {
				t.Fatalf("the status carries timeout %s; want the configured 30s (readers judge a run in progress by it)", st.Timeout)
			}
		}
		returned := time.Now() // start+60s
		ft.finish(t, tasks.Result{Err: errors.New("stopped late")})
		e.idleAt("stuck", returned.Add(10*time.Second))
		st := status(t, r, "stuck")
		if st.LastOutcome != jobs.OutcomeTimedOut || st.Timeouts != 1 || st.Failures != 1 || st.Runs != 1 {
			t.Errorf("status: outcome %q, timeouts %d, failures %d, runs %d; want timed_out, 1, 1, 1",
				st.LastOutcome, st.Timeouts, st.Failures, st.Runs)
		}
		if !strings.HasPrefix(st.LastError, "timed out after 30s") {
			t.Errorf("last error %q; want it to start with %q", st.LastError, "timed out after 30s")
		}
		if h := jobs.JudgeHealth(st, time.Now()); h != jobs.HealthFailing {
			t.Errorf("health %q; want %q", h, jobs.HealthFailing)
		}

		runs := e.history("stuck")
		if len(runs) != 1 {
			t.Fatalf("%d runs in history; want 1", len(runs))
		}
		if r0 := runs[0]; r0.Outcome != jobs.OutcomeTimedOut || r0.FinishedAt == nil || !r0.FinishedAt.Equal(returned) ||
			!strings.HasPrefix(r0.Error, "timed out after 30s") || !r0.StartedAt.Equal(start) {
			t.Errorf("history row %+v; want timed_out, started %s, finished %s, error timed out after 30s", r0, start, returned)
		}

		e.advance(10 * time.Second)
		if n := ft.startCount(); n != 2 {
			t.Fatalf("%d runs started 10s after the task returned; want 2", n)
		}
		if got, want := ft.start(1), returned.Add(10*time.Second); !got.Equal(want) {
			t.Errorf("next run started at %s; want %s (10s after the task returned)", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		ft.finish(t, tasks.Result{})
		if n := ft.maxConcurrent(); n != 1 {
			t.Errorf("at most %d runs at once; want 1", n)
		}
	})
}

func TestAnInstallationJobSkipsTicksWhileAnotherHolderHasItsLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	// every 2s: lockAtLeastFor is 1.8s of database time.
	other := e.otherHolder("replica-b")
	held, err := other.TryLock(t.Context(), "shared", time.Minute, 1800*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	e.start(e.options(e.job("shared", jobs.ScopeInstallation, 2*time.Second, ft)))

	st := e.waitIdle("shared", t0.Add(2*time.Second))
	if st.SkippedElsewhere != 1 || st.LastSkippedElsewhereAt == nil || !st.LastSkippedElsewhereAt.Equal(t0) || st.Runs != 0 {
		t.Fatalf("after the first tick: skipped %d at %v, runs %d; want 1 at %s, 0", st.SkippedElsewhere, st.LastSkippedElsewhereAt, st.Runs, t0)
	}
	e.clk.Advance(2 * time.Second)
	st = e.waitIdle("shared", t0.Add(4*time.Second))
	if st.SkippedElsewhere != 2 || !st.LastSkippedElsewhereAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after the second tick: skipped %d at %v; want 2 at %s", st.SkippedElsewhere, st.LastSkippedElsewhereAt, t0.Add(2*time.Second))
	}
	if n := ft.startCount(); n != 0 {
		t.Fatalf("%d runs while another holder had the lock; want 0", n)
	}
	if row := e.lockRow("shared"); row.LockedBy != "replica-b" {
		t.Fatalf("lock held by %q; want replica-b", row.LockedBy)
	}
	e.flush()
	rows, _, err := jobstore.ReadStatus(t.Context(), e.pool, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].SkippedElsewhere != 2 || rows[0].LastSkippedElsewhereAt == nil {
		t.Fatalf("stored status %+v; want skipped_elsewhere 2 with its time", rows)
	}

	// The other holder is done; its lockAtLeastFor runs out in database time.
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other holder's lock to expire in database time", func() bool { return e.lockFree("shared") })
	e.clk.Advance(2 * time.Second)
	ft.waitStarts(t, 1)
	if row := e.lockRow("shared"); row.LockedBy != replicaID {
		t.Fatalf("running while the lock is held by %q; want %q", row.LockedBy, replicaID)
	}
	ft.finish(t, tasks.Result{})
	st = e.waitIdle("shared", t0.Add(6*time.Second))
	if st.Runs != 1 || st.SkippedElsewhere != 2 || st.LastOutcome != jobs.OutcomeSucceeded {
		t.Fatalf("after the run: runs %d, skipped %d, outcome %q; want 1, 2, succeeded", st.Runs, st.SkippedElsewhere, st.LastOutcome)
	}
}

func TestTheKeepAliveExtendsTheLockAndALostLockCancelsTheRunWithoutUnlocking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	e.start(e.options(e.job("keeper", jobs.ScopeInstallation, 10*time.Second, ft)))

	ft.waitStarts(t, 1)
	e.waitPending(timersRunningInstalled)
	taken := e.lockRow("keeper")
	if taken.LockedBy != replicaID {
		t.Fatalf("lock held by %q; want %q", taken.LockedBy, replicaID)
	}
	if d := taken.LockUntil.Sub(taken.LockedAt); d != jobs.LockAtMostForFloor {
		t.Fatalf("taken for %v; want lockAtMostFor %v", d, jobs.LockAtMostForFloor)
	}

	// The keep-alive fires at half of lockAtMostFor (60s floor): 30s.
	e.clk.Advance(29 * time.Second)
	if n := e.clk.Pending(); n != timersRunningInstalled {
		t.Fatalf("%d active timers at 29s; the keep-alive fired early", n)
	}
	e.clk.Advance(time.Second)
	eventually(t, "the keep-alive to extend the lock", func() bool { return e.lockRow("keeper").LockUntil.After(taken.LockUntil) })
	e.waitPending(timersRunningInstalled) // re-armed for the next 30s
	extended := e.lockRow("keeper")
	if extended.LockedBy != replicaID || !extended.LockedAt.Equal(taken.LockedAt) {
		t.Fatalf("extended row %+v; want the same holder and locked_at %s", extended, taken.LockedAt)
	}

	// Another replica takes the row over (an operator release and a new
	// holder, say): the next extension finds the lock gone.
	e.exec(`UPDATE shedlock SET locked_by = 'someone-else' WHERE name = $1`, "keeper")
	stolen := e.lockRow("keeper")
	e.clk.Advance(30 * time.Second)
	eventually(t, "the run's context to be done after the lock was lost", func() bool { return len(ft.cancelled()) == 1 })
	if c := ft.cancelled()[0]; !causeIs(c, "lock was lost") {
		t.Errorf("cause %v; want lock was lost", c)
	}
	st := e.waitIdle("keeper", t0.Add(70*time.Second))
	if st.LastOutcome != jobs.OutcomeLockLost || st.LockLost != 1 || st.Failures != 1 || st.Timeouts != 0 {
		t.Errorf("status: outcome %q, lock lost %d, failures %d, timeouts %d; want lock_lost, 1, 1, 0",
			st.LastOutcome, st.LockLost, st.Failures, st.Timeouts)
	}
	runs := e.history("keeper")
	if len(runs) != 1 || runs[0].Outcome != jobs.OutcomeLockLost {
		t.Fatalf("history %+v; want one run, lock_lost", runs)
	}
	// A lost lock is not unlocked: the other holder's row is untouched.
	if row := e.lockRow("keeper"); row.LockedBy != stolen.LockedBy || !row.LockUntil.Equal(stolen.LockUntil) || !row.LockedAt.Equal(stolen.LockedAt) {
		t.Errorf("lock row after the loss %+v; want it untouched: %+v", row, stolen)
	}
	if !strings.Contains(e.logs.String(), "lost the lock") {
		t.Errorf("no log of the lost lock in:\n%s", e.logs)
	}
}

func TestANormalEndUnlocksWithLockAtLeastFor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	e.start(e.options(e.job("quick", jobs.ScopeInstallation, 10*time.Second, ft)))

	ft.waitStarts(t, 1)
	held := e.lockRow("quick")
	ft.finish(t, tasks.Result{})
	e.waitIdle("quick", t0.Add(10*time.Second))

	row := e.lockRow("quick")
	atLeast := jobs.LockAtLeastFor(every(t, 10*time.Second)) // 0.9 * 10s
	if atLeast != 9*time.Second {
		t.Fatalf("lockAtLeastFor %v; want 9s", atLeast)
	}
	if d := row.LockUntil.Sub(row.LockedAt) - atLeast; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("after the run lock_until - locked_at = %v; want %v within 1ms", row.LockUntil.Sub(row.LockedAt), atLeast)
	}
	if row.LockedBy != replicaID || !row.LockedAt.Equal(held.LockedAt) {
		t.Errorf("row %+v; want holder %q, locked_at %s", row, replicaID, held.LockedAt)
	}
	// Until then nobody, this replica included, takes it again.
	if _, err := e.otherHolder("replica-b").TryLock(t.Context(), "quick", time.Minute, 0); !errors.Is(err, locks.ErrHeldElsewhere) {
		t.Errorf("another holder's TryLock: %v; want ErrHeldElsewhere", err)
	}
}

func TestAPausedJobDoesNotRunAndResumesWithoutARestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		r := e.start(e.options(e.job("pausable", jobs.ScopeInstance, 10*time.Second, ft)))
		start := time.Now()

		synctest.Wait()
		ft.finish(t, tasks.Result{})
		e.idleAt("pausable", start.Add(10*time.Second))

		e.mem.set(jobs.Setting{JobID: "pausable", Paused: true})
		r.SettingsChanged("pausable")
		synctest.Wait()
		if !status(t, r, "pausable").Paused {
			t.Fatal("the job is not paused after its setting changed")
		}

		for i := 2; i <= 4; i++ {
			e.advance(10 * time.Second)
			e.idleAt("pausable", start.Add(time.Duration(i)*10*time.Second))
			st := status(t, r, "pausable")
			if n := ft.startCount(); n != 1 || st.Runs != 1 {
				t.Fatalf("at %s while paused: %d starts, %d runs; want 1, 1", time.Now().Format(time.TimeOnly), n, st.Runs)
			}
			if h := jobs.JudgeHealth(st, time.Now()); h != jobs.HealthPaused {
				t.Fatalf("health %q; want %q", h, jobs.HealthPaused)
			}
		}

		e.mem.set(jobs.Setting{JobID: "pausable", Paused: false})
		r.SettingsChanged("pausable")
		// Its next fire (end + 10s) is long past: it runs at once.
		synctest.Wait()
		if n := ft.startCount(); n != 2 {
			t.Fatalf("%d runs started once resumed; want 2", n)
		}
		if got, want := ft.start(1), start.Add(30*time.Second); !got.Equal(want) {
			t.Errorf("resumed run started at %s; want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		ft.finish(t, tasks.Result{})
		e.idleAt("pausable", start.Add(40*time.Second))
		if st := status(t, r, "pausable"); st.Paused || st.Runs != 2 {
			t.Errorf("after resuming: paused %v, runs %d; want false, 2", st.Paused, st.Runs)
		}
	})
}

func TestAScheduleOverrideAppliesWithoutARestartAndAMalformedOneIsRetriedEveryMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	witness := e.task()
	witness.auto = true
	r := e.start(e.options(
		e.job("report", jobs.ScopeInstance, 10*time.Second, ft),
		e.job("witness", jobs.ScopeInstance, 10*time.Second, witness),
	))
	// step moves 10s on and waits for the witness's run at that time.
	step := func() {
		t.Helper()
		n := witness.startCount()
		e.clk.Advance(10 * time.Second)
		witness.waitStarts(t, n+1)
		e.waitIdle("witness", e.clk.Now().Add(10*time.Second))
	}

	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{})
	e.waitIdle("report", t0.Add(10*time.Second))
	e.waitIdle("witness", t0.Add(10*time.Second))
	e.flush()

	// every 30s, from the end of the last run.
	thirty := every(t, 30*time.Second)
	if _, err := jobstore.ApplyChange(t.Context(), e.pool, "report", jobstore.Change{Schedule: &thirty, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	r.SettingsChanged("report")
	if st := e.waitIdle("report", t0.Add(30*time.Second)); st.Schedule != "every 30s" {
		t.Fatalf("schedule in force %q; want every 30s", st.Schedule)
	}
	step() // 10s
	step() // 20s
	if n := ft.startCount(); n != 1 {
		t.Fatalf("%d runs before 30s; want 1", n)
	}
	step() // 30s
	ft.waitStarts(t, 2)
	if got, want := ft.start(1), t0.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("run under the override started at %s; want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
	}
	ft.finish(t, tasks.Result{})
	e.waitIdle("report", t0.Add(60*time.Second))

	// A malformed override, as a buggy client might write it.
	const bad = "cron 61 * * * *"
	_, perr := jobs.ParseSchedule(bad)
	if perr == nil {
		t.Fatalf("%q parsed", bad)
	}
	e.exec(`INSERT INTO studio_job_setting (job_id, schedule) VALUES ($1, $2)
ON CONFLICT (job_id) DO UPDATE SET schedule = EXCLUDED.schedule`, "report", bad)
	r.SettingsChanged("report")
	// The runner looks at once and asks again in a minute.
	st := e.waitIdle("report", t0.Add(30*time.Second+jobs.InvalidScheduleRetry))
	if st.InvalidSchedule != perr.Error() {
		t.Fatalf("invalid schedule %q; want the parser's cause %q", st.InvalidSchedule, perr.Error())
	}
	if h := jobs.JudgeHealth(st, e.clk.Now()); h != jobs.HealthInvalidSchedule {
		t.Errorf("health %q; want %q", h, jobs.HealthInvalidSchedule)
	}
	e.flush()
	rows, _, err := jobstore.ReadStatus(t.Context(), e.pool, "report")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].InvalidSchedule != perr.Error() {
		t.Fatalf("stored status %+v; want invalid_schedule %q", rows, perr.Error())
	}

	// The other job keeps its rhythm; the malformed one is asked again at 90s
	// and, still malformed, at 150s.
	for range 6 { // 40s .. 90s
		step()
	}
	st = e.waitIdle("report", t0.Add(90*time.Second+jobs.InvalidScheduleRetry))
	if st.InvalidSchedule == "" || ft.startCount() != 2 {
		t.Fatalf("at 90s: invalid %q, %d runs; want still invalid, 2 runs", st.InvalidSchedule, ft.startCount())
	}

	// Corrected behind the runner's back (no job.settings signal, just a
	// resync): only the minute's retry can pick it up.
	e.exec(`UPDATE studio_job_setting SET schedule = 'every 20s' WHERE job_id = $1`, "report")
	r.ResyncSettings()
	for range 6 { // 100s .. 150s
		step()
	}
	ft.waitStarts(t, 3)
	if got, want := ft.start(2), t0.Add(150*time.Second); !got.Equal(want) {
		t.Errorf("run after the correction started at %s; want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
	}
	ft.finish(t, tasks.Result{})
	st = e.waitIdle("report", t0.Add(170*time.Second))
	if st.InvalidSchedule != "" || st.Schedule != "every 20s" || st.Runs != 3 {
		t.Errorf("after the correction: invalid %q, schedule %q, runs %d; want \"\", every 20s, 3", st.InvalidSchedule, st.Schedule, st.Runs)
	}
	if n := witness.startCount(); n != 16 {
		t.Errorf("the other job ran %d times in 150s; want 16", n)
	}
}

func TestASkewedClockDoesNotTakeALockHeldInDatabaseTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	skewed := clock.Offset{By: 40 * time.Second}
	ft := newFakeTask(skewed)
	e.tasks = append(e.tasks, ft)
	other := e.otherHolder("replica-b")
	if _, err := other.TryLock(t.Context(), "skewed", 3*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	until := e.lockRow("skewed").LockUntil

	o := e.options(e.job("skewed", jobs.ScopeInstallation, time.Second, ft))
	o.Clock = skewed // 40s ahead: by its own clock, the other lock expired long ago
	r := e.start(o)

	eventually(t, "a tick to be skipped", func() bool { return status(t, r, "skewed").SkippedElsewhere >= 1 })
	ft.waitStarts(t, 1)
	row := e.lockRow("skewed")
	if row.LockedBy != replicaID {
		t.Fatalf("running while the lock is held by %q", row.LockedBy)
	}
	if row.LockedAt.Before(until) {
		t.Errorf("took the lock at %s, before the other holder's lock_until %s (database time)",
			row.LockedAt.Format(time.StampMicro), until.Format(time.StampMicro))
	}
	ft.finish(t, tasks.Result{})
}

func TestStopWaitsForRunsWithinTheShutdownWaitAndInterruptsTheRest(t *testing.T) {
	t.Parallel()

	t.Run("a run that ends within the wait is waited for", func(t *testing.T) {
		t.Parallel()
		e := newMemEnv(t)
		ft := e.task()
		o := e.options(e.job("graceful", jobs.ScopeInstance, 10*time.Second, ft))
		o.ShutdownWait = 5 * time.Second // ample: the run is released at once
		r := e.start(o)
		ft.waitStarts(t, 1)
		e.waitPending(timersRunningInstance)

		stopped := make(chan struct{})
		go func() { r.Stop(); close(stopped) }()
		e.waitPending(1) // the timer loop has gone; only the run's timeout is left
		select {
		case <-stopped:
			t.Fatal("Stop returned while a run was in progress")
		default:
		}
		ft.finish(t, tasks.Result{})
		select {
		case <-stopped:
		case <-time.After(waitFor):
			t.Fatal("Stop did not return after the run ended")
		}
		st := status(t, r, "graceful")
		// A clean stop keeps the next due time (jobs overdue counts from it).
		if st.LastOutcome != jobs.OutcomeSucceeded || st.Running || st.NextFireAt == nil || !st.NextFireAt.Equal(st.LastFinishedAt.Add(10*time.Second)) {
			t.Errorf("after Stop: outcome %q, running %v, next fire %v; want succeeded, false, 10s after the end", st.LastOutcome, st.Running, st.NextFireAt)
		}
		if c := ft.cancelled(); len(c) != 0 {
			t.Errorf("the run saw its context done: %v", c)
		}
		if runs := e.history("graceful"); len(runs) != 1 || runs[0].Outcome != jobs.OutcomeSucceeded {
			t.Errorf("history %+v; want one succeeded run", runs)
		}
		if e.clk.Pending() != 0 {
			t.Errorf("%d active timers after Stop; want 0", e.clk.Pending())
		}
	})

	t.Run("a run that outlasts the wait is interrupted", func(t *testing.T) {
		t.Parallel()
		e := newMemEnv(t)
		ft := e.task()
		o := e.options(e.job("stubborn", jobs.ScopeInstance, 10*time.Second, ft))
		const wait = 300 * time.Millisecond // real time: Stop's wait uses a real timer
		o.ShutdownWait = wait
		r := e.start(o)
		ft.waitStarts(t, 1)

		begin := time.Now()
		r.Stop()
		if took := time.Since(begin); took < wait {
			t.Errorf("Stop took %v; want at least the shutdown wait %v", took, wait)
		}
		c := ft.cancelled()
		if len(c) != 1 || !causeIs(c[0], "runner shut down") {
			t.Fatalf("the task saw %v; want its context done by the shutdown", c)
		}
		st := status(t, r, "stubborn")
		if st.LastOutcome != jobs.OutcomeInterrupted || st.Failures != 1 || st.Running || st.NextFireAt == nil || !st.NextFireAt.Equal(st.LastFinishedAt.Add(10*time.Second)) {
			t.Errorf("after Stop: outcome %q, failures %d, running %v, next fire %v; want interrupted, 1, false, 10s after the end",
				st.LastOutcome, st.Failures, st.Running, st.NextFireAt)
		}
		if runs := e.history("stubborn"); len(runs) != 1 || runs[0].Outcome != jobs.OutcomeInterrupted {
			t.Errorf("history %+v; want one interrupted run", runs)
		}
		if !strings.Contains(e.logs.String(), "interrupting") {
			t.Errorf("no log of the interruption in:\n%s", e.logs)
		}
		r.Stop() // twice is safe
		r.Interrupt()
		if r.Trigger("stubborn") {
			t.Error("a stopped runner took a trigger")
		}
	})

	t.Run("interrupt cancels runs at once", func(t *testing.T) {
		t.Parallel()
		e := newMemEnv(t)
		ft := e.task()
		o := e.options(e.job("cut", jobs.ScopeInstance, 10*time.Second, ft))
		o.ShutdownWait = time.Hour
		r := e.start(o)
		ft.waitStarts(t, 1)
		done := make(chan struct{})
		go func() { r.Interrupt(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Fatal("Interrupt waited for the run")
		}
		if st := status(t, r, "cut"); st.LastOutcome != jobs.OutcomeInterrupted {
			t.Errorf("outcome %q; want interrupted", st.LastOutcome)
		}
		r.Stop()
	})

	t.Run("stop without start is safe", func(t *testing.T) {
		t.Parallel()
		e := newMemEnv(t)
		r, err := runner.New(e.options(e.job("idle", jobs.ScopeInstance, 10*time.Second, e.task())))
		if err != nil {
			t.Fatal(err)
		}
		r.Stop()
		r.Stop()
		r.Interrupt()
	})
}

func TestTriggerFiresAWaitingJobAtOnceAndIgnoresARunningOne(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		o := e.options(e.job("manual", jobs.ScopeInstance, time.Hour, ft))
		o.InitialDelay = func(jobs.Job) time.Duration { return time.Hour }
		r := e.start(o)
		begin := time.Now()
		e.idleAt("manual", begin.Add(time.Hour))
		e.advance(5 * time.Minute)
		if n := ft.startCount(); n != 0 {
			t.Fatalf("%d runs before the trigger; want 0", n)
		}

		if !r.Trigger("manual") {
			t.Fatal("Trigger of a waiting job returned false")
		}
		synctest.Wait()
		if n := ft.startCount(); n != 1 {
			t.Fatalf("%d runs after the trigger; want 1", n)
		}
		now := begin.Add(5 * time.Minute)
		if got := ft.start(0); !got.Equal(now) {
			t.Errorf("triggered run started at %s; want %s (at once)", got.Format(time.TimeOnly), now.Format(time.TimeOnly))
		}
		if r.Trigger("manual") {
			t.Error("Trigger of a running job returned true")
		}
		if r.Trigger("no-such-job") {
			t.Error("Trigger of an unknown job returned true")
		}
		if !r.Hosts("manual") || r.Hosts("no-such-job") {
			t.Errorf("Hosts(manual) = %v, Hosts(no-such-job) = %v; want true, false", r.Hosts("manual"), r.Hosts("no-such-job"))
		}
		if ids := r.JobIDs(); len(ids) != 1 || ids[0] != "manual" {
			t.Errorf("JobIDs = %q, want [manual]", ids)
		}
		ft.finish(t, tasks.Result{})
		// The ignored trigger left nothing behind: the next fire is end + 1h.
		e.idleAt("manual", now.Add(time.Hour))
		if n := ft.startCount(); n != 1 {
			t.Errorf("%d runs; want 1", n)
		}
	})
}

func TestOnlyTheFirstFailureAndTheRecoveryAreLogged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		r := e.start(e.options(e.job("flaky", jobs.ScopeInstance, 10*time.Second, ft)))

		for i := range 3 {
			synctest.Wait()
			if n := ft.startCount(); n != i+1 {
				t.Fatalf("%d runs started; want %d", n, i+1)
			}
			ft.finish(t, tasks.Result{Err: errBoom})
			e.idleAt("flaky", time.Now().Add(10*time.Second))
			st := status(t, r, "flaky")
			if st.LastOutcome != jobs.OutcomeFailed || st.LastError != "boom" || st.Failures != int64(i+1) {
				t.Fatalf("after failure %d: outcome %q, error %q, failures %d", i+1, st.LastOutcome, st.LastError, st.Failures)
			}
			e.advance(10 * time.Second)
		}
		if n := ft.startCount(); n != 4 {
			t.Fatalf("%d runs started; want 4", n)
		}
		ft.finish(t, tasks.Result{})
		e.idleAt("flaky", time.Now().Add(10*time.Second))
		st := status(t, r, "flaky")
		if st.LastOutcome != jobs.OutcomeSucceeded || st.LastError != "" || st.Failures != 3 || st.Runs != 4 {
			t.Errorf("after the recovery: outcome %q, error %q, failures %d, runs %d; want succeeded, \"\", 3, 4",
				st.LastOutcome, st.LastError, st.Failures, st.Runs)
		}

		logs := e.logs.String()
		if n := strings.Count(logs, `msg="runner: job failed"`); n != 1 {
			t.Errorf("%d \"job failed\" messages; want 1 in:\n%s", n, logs)
		}
		if n := strings.Count(logs, `msg="runner: job recovered"`); n != 1 {
			t.Errorf("%d \"job recovered\" messages; want 1 in:\n%s", n, logs)
		}
	})
}

func TestTheMetricsCountRunsByOutcomeTimeoutsSkipsOverrunsAndLostLocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	j := e.job("metered", jobs.ScopeInstallation, 10*time.Second, ft)
	j.Timeout = 45 * time.Second // after the first keep-alive (30s)
	e.start(e.options(j))

	// 1, at 0s: succeeds at once.
	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{})
	e.waitIdle("metered", t0.Add(10*time.Second))
	e.expireLock("metered") // lockAtLeastFor (9s) passes in database time

	// 2, at 10s: fails after 12s, an overrun.
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 2)
	e.waitPending(timersRunningInstalled)
	e.clk.Advance(12 * time.Second)
	ft.finish(t, tasks.Result{Err: errBoom})
	e.waitIdle("metered", t0.Add(32*time.Second))
	e.expireLock("metered")

	// 3, at 32s: extended at 62s, times out at 77s, an overrun.
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 3)
	e.waitPending(timersRunningInstalled)
	before := e.lockRow("metered")
	e.clk.Advance(30 * time.Second)
	eventually(t, "the keep-alive to extend the lock", func() bool { return e.lockRow("metered").LockUntil.After(before.LockUntil) })
	e.waitPending(timersRunningInstalled)
	e.clk.Advance(15 * time.Second)
	e.waitIdle("metered", t0.Add(87*time.Second))
	e.expireLock("metered")

	// 4, at 87s: loses its lock at 117s, an overrun.
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 4)
	e.waitPending(timersRunningInstalled)
	e.exec(`UPDATE shedlock SET locked_by = 'someone-else' WHERE name = $1`, "metered")
	e.clk.Advance(30 * time.Second)
	e.waitIdle("metered", t0.Add(127*time.Second))

	// 5, at 127s: someone else holds the lock, a skip.
	e.clk.Advance(10 * time.Second)
	st := e.waitIdle("metered", t0.Add(137*time.Second))
	if st.SkippedElsewhere != 1 || ft.startCount() != 4 {
		t.Fatalf("skipped %d, %d runs; want 1, 4", st.SkippedElsewhere, ft.startCount())
	}

	families := gather(t, e.reg)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"studio_job_runs_total", map[string]string{"job_id": "metered", "outcome": "succeeded"}, 1},
		{"studio_job_runs_total", map[string]string{"job_id": "metered", "outcome": "failed"}, 1},
		{"studio_job_runs_total", map[string]string{"job_id": "metered", "outcome": "timed_out"}, 1},
		{"studio_job_runs_total", map[string]string{"job_id": "metered", "outcome": "lock_lost"}, 1},
		{"studio_job_timeouts_total", map[string]string{"job_id": "metered"}, 1},
		{"studio_job_skipped_elsewhere_total", map[string]string{"job_id": "metered"}, 1},
		{"studio_job_overruns_total", map[string]string{"job_id": "metered"}, 3},
		{"studio_job_lock_lost_total", map[string]string{"job_id": "metered"}, 1},
	} {
		if got := counterValue(t, families, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v; want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := len(families["studio_job_runs_total"].GetMetric()); n != 4 {
		t.Errorf("%d studio_job_runs_total series; want 4 (one per outcome)", n)
	}
	h := families["studio_job_run_duration_seconds"]
	if h == nil || len(h.GetMetric()) != 1 {
		t.Fatalf("studio_job_run_duration_seconds: %v; want one series", h)
	}
	if hist := h.GetMetric()[0].GetHistogram(); hist.GetSampleCount() != 4 || hist.GetSampleSum() != 0+12+45+30 {
		t.Errorf("duration histogram: %d samples summing to %vs; want 4 summing to 87s", hist.GetSampleCount(), hist.GetSampleSum())
	}
}

// gather collects reg's metric families by name. (prometheus/testutil would
// do, but it needs github.com/kylelemons/godebug, which go.sum lacks.)
func gather(t testing.TB, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	list, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range list {
		out[f.GetName()] = f
	}
	return out
}

// counterValue is the counter name{labels} (0 when the series is absent).
func counterValue(t testing.TB, families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f := families[name]
	if f == nil {
		return 0
	}
	if f.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("%s is a %v; want a counter", name, f.GetType())
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		return m.GetCounter().GetValue()
	}
	return 0
}

// unlockFails wraps a Locker: the first n unlocks fail, as on a database
// that turned read-only or went away (a failover) while the run ended.
type unlockFails struct {
	runner.Locker
	mu sync.Mutex
	n  int
}

func (u *unlockFails) TryLock(ctx context.Context, name string, atMostFor, atLeastFor time.Duration) (runner.Lock, error) {
	l, err := u.Locker.TryLock(ctx, name, atMostFor, atLeastFor)
	if err != nil {
		return nil, err
	}
	return &failingUnlock{Lock: l, u: u}, nil
}

type failingUnlock struct {
	runner.Lock
	u *unlockFails
}

func (f *failingUnlock) Unlock(ctx context.Context) error {
	f.u.mu.Lock()
	fail := f.u.n > 0
	if fail {
		f.u.n--
	}
	f.u.mu.Unlock()
	if fail {
		return errors.New("unlock: ERROR: cannot execute UPDATE in a read-only transaction (SQLSTATE 25006)")
	}
	return f.Lock.Unlock(ctx)
}

// A clean stop gives back the lock whose unlock failed: a restart under
// the same id would otherwise find it held until its lockAtMostFor, and so
// would every other replica.
func TestAStopGivesBackALockWhoseUnlockFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	o := e.options(e.job("stop", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Locks = &unlockFails{Locker: o.Locks, n: 1}
	r := e.start(o)

	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{})
	e.waitIdle("stop", t0.Add(10*time.Second))
	if row := e.lockRow("stop"); row.LockUntil.Sub(row.LockedAt) != jobs.LockAtMostForFloor {
		t.Fatalf("after the failed unlock lock_until - locked_at = %v; want lockAtMostFor %v", row.LockUntil.Sub(row.LockedAt), jobs.LockAtMostForFloor)
	}
	r.Stop()
	row := e.lockRow("stop")
	if d := row.LockUntil.Sub(row.LockedAt) - 9*time.Second; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("after the stop lock_until - locked_at = %v; want lockAtLeastFor 9s", row.LockUntil.Sub(row.LockedAt))
	}
}

// lostAnswer wraps a Locker: the first n tries take the lock and then
// report the answer lost, as when the connection drops between the
// server's commit and its reply (a promote, a restart).
type lostAnswer struct {
	runner.Locker
	mu sync.Mutex
	n  int
}

func (a *lostAnswer) TryLock(ctx context.Context, name string, atMostFor, atLeastFor time.Duration) (runner.Lock, error) {
	l, err := a.Locker.TryLock(ctx, name, atMostFor, atLeastFor)
	a.mu.Lock()
	lose := a.n > 0 && err == nil
	if lose {
		a.n--
	}
	a.mu.Unlock()
	if lose {
		return nil, &runner.MaybeHeldError{Lock: l, Err: fmt.Errorf("acquire lock %q: unexpected EOF", name)}
	}
	return l, err
}

// A try whose answer was lost may have taken the lock: the runner gives it
// back at the job's next try, as an unlock that failed. Before, it held
// every replica off, this one included, until its lockAtMostFor (60 s): a
// nemesis run had no run of two jobs for 40 s after a promote.
func TestALockTryWhoseAnswerWasLostIsGivenBackAtTheNextTry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	o := e.options(e.job("lost", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Locks = &lostAnswer{Locker: o.Locks, n: 1}
	e.start(o)

	e.waitIdle("lost", t0.Add(10*time.Second))
	if ft.startCount() != 0 {
		t.Fatalf("%d runs after a lock try whose answer was lost, want 0", ft.startCount())
	}
	row := e.lockRow("lost")
	if got := row.LockUntil.Sub(row.LockedAt); got != jobs.LockAtMostForFloor {
		t.Fatalf("after the lost answer lock_until - locked_at = %v; want lockAtMostFor %v (the try took it)", got, jobs.LockAtMostForFloor)
	}
	e.clk.Advance(10 * time.Second)
	eventually(t, "the next try to give the lock back", func() bool {
		r := e.lockRow("lost")
		return r.LockUntil.Sub(r.LockedAt) < jobs.LockAtMostForFloor
	})
	row = e.lockRow("lost")
	if d := row.LockUntil.Sub(row.LockedAt) - 9*time.Second; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("after the give-back lock_until - locked_at = %v; want lockAtLeastFor 9s", row.LockUntil.Sub(row.LockedAt))
	}
	for _, want := range []string{"the answer to a lock try was lost", "released the lock whose unlock had failed"} {
		if !strings.Contains(e.logs.String(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
}

// An unlock that fails after a run (a read-only or unreachable database)
// used to leave the lock held until lockAtMostFor (60 s), so the job
// stopped for a minute after a failover. The next tick now releases it
// first: lock_until falls back to locked_at + lockAtLeastFor, as the
// unlock would have made it.
func TestAFailedUnlockIsRetriedAtTheNextTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	o := e.options(e.job("retry", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Locks = &unlockFails{Locker: o.Locks, n: 1}
	e.start(o)

	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{})
	e.waitIdle("retry", t0.Add(10*time.Second))
	row := e.lockRow("retry")
	if got := row.LockUntil.Sub(row.LockedAt); got != jobs.LockAtMostForFloor {
		t.Fatalf("after the failed unlock lock_until - locked_at = %v; want lockAtMostFor %v", got, jobs.LockAtMostForFloor)
	}

	e.clk.Advance(10 * time.Second)
	eventually(t, "the next tick to release the stale lock", func() bool {
		r := e.lockRow("retry")
		return r.LockUntil.Sub(r.LockedAt) < jobs.LockAtMostForFloor
	})
	row = e.lockRow("retry")
	if d := row.LockUntil.Sub(row.LockedAt) - 9*time.Second; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("after the retry lock_until - locked_at = %v; want lockAtLeastFor 9s", row.LockUntil.Sub(row.LockedAt))
	}
	eventually(t, "the release to be logged", func() bool {
		return strings.Contains(e.logs.String(), "released the lock whose unlock had failed")
	})
}
