package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/startstop"
)

var _ startstop.Service = (*runner.Runner)(nil)

// Start fails for real when the prior status cannot be read: nothing is
// scheduled, nothing runs, and the runner cannot be started again.
func TestRunnerStartFailsWhenThePriorStatusCannotBeRead(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	e.mem.loadErr = errors.New("status table gone")
	ft := e.task()
	ft.auto = true
	r, err := runner.New(e.options(e.job("never", jobs.ScopeInstance, time.Second, ft)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err == nil || !errors.Is(err, e.mem.loadErr) {
		t.Fatalf("Start = %v, want the status read's error", err)
	}
	select {
	case <-r.Stopped():
	default:
		t.Fatal("a failed Start must leave the runner stopped")
	}
	if n := e.clk.Pending(); n != 0 {
		t.Errorf("%d timers after a failed Start, want none", n)
	}
	e.clk.Advance(time.Minute)
	if n := ft.startCount(); n != 0 {
		t.Errorf("%d runs after a failed Start", n)
	}
	if len(r.Snapshot()) != 1 || r.Snapshot()[0].NextFireAt != nil {
		t.Errorf("a failed Start scheduled the job: %+v", r.Snapshot())
	}
	if err := r.Start(context.Background()); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("Start after a failed Start = %v, want ErrStopped", err)
	}
	r.Stop()
}

// Stop is safe from several goroutines at once and again after (each
// returns once the run in progress was interrupted and recorded); a second
// Start is refused.
func TestRunnerStopIsSafeTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	o := e.options(e.job("busy", jobs.ScopeInstance, 10*time.Second, ft))
	o.ShutdownWait = 50 * time.Millisecond // real time: the run in progress is interrupted
	r := e.start(o)
	if err := startstop.WaitStarted(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
	ft.waitStarts(t, 1)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); r.Stop() }()
	}
	wg.Wait()
	r.Stop()
	if runs := e.history("busy"); len(runs) != 1 || runs[0].Outcome != jobs.OutcomeInterrupted {
		t.Errorf("history after Stop: %+v, want the one run interrupted", runs)
	}
}
