package host_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/startstop"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

var _ startstop.Service = (*host.Host)(nil)

func closedChan(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A failed Start is final: it returns the error, Done is closed and Wait
// says the same, nothing of the replica runs, and the host cannot start
// again.
func TestAFailedHostStartLeavesNothingRunningAndIsFinal(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	ignore := goleak.IgnoreCurrent()
	table := locks.DefaultTable()
	table.Name = "no_such_locks"
	h, err := host.New(host.Options{ConnString: url, ID: "final", LockTable: table})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Prepare(context.Background())
	if !errors.Is(err, locks.ErrSchema) {
		t.Fatalf("Start = %v, want locks.ErrSchema", err)
	}
	if !closedChan(h.Done()) || !closedChan(h.Stopped()) || closedChan(h.Started()) {
		t.Fatal("after a failed Start: Done and Stopped must be closed, Started open")
	}
	if werr := h.Wait(); !errors.Is(werr, locks.ErrSchema) {
		t.Errorf("Wait = %v, want the start's error", werr)
	}
	if err := h.Start(context.Background()); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("a second Start = %v, want ErrStopped", err)
	}
	h.Stop()
	h.Stop()
	if s := replicaState(t, pool, "final"); s != "" {
		t.Errorf("state %q, want no row", s)
	}
	goleak.VerifyNone(t, ignore)
}

// Stop drains: safe from several goroutines at once and again after, it
// returns once the replica recorded stopped, and Wait says nil.
func TestHostStopDrainsAndIsSafeTwiceAndConcurrently(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	ignore := goleak.IgnoreCurrent()
	h, err := host.New(host.Options{ConnString: url, ID: "stop-twice", DrainDelay: host.NoDrainDelay})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prepareStart(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := startstop.WaitStarted(ctx, h); err != nil {
		t.Fatalf("WaitStarted: %v", err)
	}
	if s := replicaState(t, pool, "stop-twice"); s != "ready" {
		t.Fatalf("state %q after Start, want ready", s)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); h.Stop() }()
	}
	wg.Wait()
	h.Stop()
	if err := h.Wait(); err != nil {
		t.Errorf("Wait after Stop = %v, want nil", err)
	}
	if s := replicaState(t, pool, "stop-twice"); s != "stopped" {
		t.Errorf("state %q after Stop, want stopped", s)
	}
	goleak.VerifyNone(t, ignore)
}

// Stop before Start ends the host at once; StopNow and Drain before Start
// do nothing harmful.
func TestHostStopWithoutStart(t *testing.T) {
	h, err := host.New(host.Options{ID: "never"})
	if err != nil {
		t.Fatal(err)
	}
	h.Drain("test")
	h.StopNow()
	h.Stop()
	h.Stop()
	if !closedChan(h.Done()) {
		t.Fatal("Done open after Stop without Start")
	}
	if err := h.Wait(); err != nil {
		t.Errorf("Wait = %v", err)
	}
	if err := h.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "already stopped") {
		t.Errorf("Start after Stop = %v, want already stopped", err)
	}
}

// The runner checks the jobs (here two installation jobs on one lock)
// before the replica registers: the start fails with no row at all. Before
// issue 8 the runner was built after registering.
func TestJobsTheRunnerRefusesFailTheStartBeforeRegistering(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	every, err := jobs.Every(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	list := []jobs.Job{
		{ID: "a", Scope: jobs.ScopeInstallation, Schedule: every, Lock: "shared", Spec: jobs.TaskSpec{Command: []string{"true"}}},
		{ID: "b", Scope: jobs.ScopeInstallation, Schedule: every, Lock: "shared", Spec: jobs.TaskSpec{Command: []string{"true"}}},
	}
	h, err := host.New(host.Options{ConnString: url, ID: "one-lock", Jobs: list})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Prepare(context.Background())
	if err == nil || !strings.Contains(err.Error(), `lock "shared" is already taken`) {
		t.Fatalf("Start = %v, want the shared lock refused", err)
	}
	if s := replicaState(t, pool, "one-lock"); s != "" {
		t.Fatalf("a start refused for its jobs left a row in state %q", s)
	}
}
