package runner_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// gaugeValue is the unlabelled gauge name (0 when absent).
func gaugeValue(families map[string]*dto.MetricFamily, name string) float64 {
	f := families[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// With runner.max_concurrent_runs at 2, three jobs due at once start two
// runs; the third waits (counted in studio_runner_runs_waiting and
// studio_runner_runs_delayed_total) and starts, late, when a slot frees.
// Before the cap, all three started at once.
func TestRunsPastTheCapWaitForASlotAndStartLate(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	o := e.options(e.job("a", jobs.ScopeInstance, 10*time.Second, ft), e.job("b", jobs.ScopeInstance, 10*time.Second, ft),
		e.job("c", jobs.ScopeInstance, 10*time.Second, ft))
	o.MaxConcurrentRuns = 2
	e.start(o)
	ft.waitStarts(t, 2)
	eventually(t, "one run waiting for a slot", func() bool { return gaugeValue(gather(t, e.reg), "studio_runner_runs_waiting") == 1 })
	if n := ft.startCount(); n != 2 {
		t.Fatalf("%d runs started with max_concurrent_runs 2", n)
	}
	ft.finish(t, tasks.Result{})
	ft.waitStarts(t, 3)
	fam := gather(t, e.reg)
	if got := counterValue(t, fam, "studio_runner_runs_delayed_total", nil); got != 1 {
		t.Errorf("studio_runner_runs_delayed_total = %v; want 1", got)
	}
	if got := gaugeValue(fam, "studio_runner_runs_waiting"); got != 0 {
		t.Errorf("studio_runner_runs_waiting = %v after the third run started; want 0", got)
	}
	if got := gaugeValue(fam, "studio_runner_max_concurrent_runs"); got != 2 {
		t.Errorf("studio_runner_max_concurrent_runs = %v; want 2", got)
	}
	if got := ft.maxConcurrent(); got != 2 {
		t.Errorf("%d runs in progress at once; want at most 2", got)
	}
}

// An installation job waiting for a slot holds no lock: another replica
// may run it meanwhile. It takes the lock once it has a slot.
func TestAnInstallationJobWaitingForASlotHoldsNoLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	busy, inst := e.task(), e.task()
	o := e.options(e.job("busy", jobs.ScopeInstance, time.Minute, busy), e.job("nightly", jobs.ScopeInstallation, time.Minute, inst))
	o.MaxConcurrentRuns = 1
	o.InitialDelay = func(j jobs.Job) time.Duration {
		if j.ID == "nightly" {
			return time.Second
		}
		return 0
	}
	e.start(o)
	busy.waitStarts(t, 1)
	e.clk.Advance(time.Second)
	eventually(t, "nightly waiting for a slot", func() bool { return gaugeValue(gather(t, e.reg), "studio_runner_runs_waiting") == 1 })
	held := func() bool {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM shedlock WHERE name = 'nightly' AND lock_until > now()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	if held() {
		t.Fatal("the lock of nightly is held while it waits for a slot")
	}
	busy.finish(t, tasks.Result{})
	inst.waitStarts(t, 1)
	if !held() {
		t.Fatal("nightly runs without its lock")
	}
}

// Stop does not wait for fires that wait for a slot: they give up at
// once, and the runner stops without its shutdown wait.
func TestStopEndsTheFiresWaitingForASlot(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	o := e.options(e.job("a", jobs.ScopeInstance, 10*time.Second, ft), e.job("b", jobs.ScopeInstance, 10*time.Second, ft))
	o.MaxConcurrentRuns = 1
	o.ShutdownWait = time.Hour
	r := e.start(o)
	ft.waitStarts(t, 1)
	eventually(t, "one run waiting for a slot", func() bool { return gaugeValue(gather(t, e.reg), "studio_runner_runs_waiting") == 1 })
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	// Stop ends the wait before the run in progress ends. Finishing the
	// run first (before the goroutine above ran, on a loaded machine) let
	// the waiting fire take the slot and start: then Stop rightly waited
	// for it, and the test failed for its own race.
	eventually(t, "Stop to end the wait for a slot", func() bool { return gaugeValue(gather(t, e.reg), "studio_runner_runs_waiting") == 0 })
	ft.finish(t, tasks.Result{}) // the run in progress ends; the waiting fire must not start
	select {
	case <-stopped:
	case <-time.After(waitFor):
		t.Fatal("Stop still waits for a fire that waits for a slot")
	}
	if n := ft.startCount(); n != 1 {
		t.Errorf("%d runs started; the waiting fire started after Stop", n)
	}
}

// Acquiring 1,000 clusters at once spreads the duties' first fires: today
// every one was due in the same instant. One cluster acquired alone still
// fires (nearly) at once.
func TestNewDutiesFirstFiresAreSpread(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	o := e.options(perClusterJob(e, "duty", time.Hour, ft))
	o.DutySpread = nil // the default
	o.MaxConcurrentRuns = runner.DefaultMaxConcurrentRuns
	r := e.start(o)
	now := e.clk.Now()
	r.AddCluster("c0", context.Background())
	// Its run may already have started (its status then shows the next
	// fire after its timeout): the run's start is what tells. The fake
	// clock stands still, so a first fire spread any later never starts.
	ft.waitStarts(t, 1)
	if start := ft.start(0); start.Sub(now) > time.Second/runner.DefaultMaxConcurrentRuns {
		t.Fatalf("one cluster acquired alone: first fire at %v; want within %v of %v", start, time.Second/runner.DefaultMaxConcurrentRuns, now)
	}
	r.RemoveCluster("c0")
	const n = 1000
	for i := range n {
		r.AddCluster("c"+strconv.Itoa(i+1), context.Background())
	}
	inFirstSecond := 0
	for _, st := range r.Snapshot() {
		if st.NextFireAt == nil || st.Running { // a run's next fire is after its timeout
			continue
		}
		d := st.NextFireAt.Sub(now)
		if d < 0 || d >= time.Hour {
			t.Fatalf("%s: first fire %v after the acquisition; want within its interval", st.JobID, d)
		}
		if d < time.Second {
			inFirstSecond++
		}
	}
	// About max_concurrent_runs x (1 + ln(n/max_concurrent_runs)) = 47.
	if inFirstSecond > 100 {
		t.Errorf("%d of %d duties due in the first second after the acquisition; want them spread", inFirstSecond, n)
	}
}

// The configuration's default of runner.max_concurrent_runs is the
// runner's (config does not import the runner).
func TestTheConfigDefaultIsTheRunnersCap(t *testing.T) {
	if config.DefaultMaxConcurrentRuns != runner.DefaultMaxConcurrentRuns {
		t.Fatalf("config.DefaultMaxConcurrentRuns %d != runner.DefaultMaxConcurrentRuns %d", config.DefaultMaxConcurrentRuns, runner.DefaultMaxConcurrentRuns)
	}
}
