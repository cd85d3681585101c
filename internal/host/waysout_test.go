package host_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/startstop"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// The host's two ways out (issue 23 item 3), after River's Client.Stop and
// StopAndCancel: Stop drains and lets a run in progress finish;
// StopAndCancel interrupts it. Both wait for the end and leave no
// goroutine behind.

// blockingJob is an instance job that writes started, then runs until
// release exists (or for ten minutes).
func blockingJob(t *testing.T, dir string) []jobs.Job {
	t.Helper()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	list, err := jobs.Parse("test.yaml", []byte(fmt.Sprintf(`
jobs:
  - id: blocker
    scope: instance
    every: 1s
    timeout: 10m
    run:
      command: ["sh", "-c", "touch %s; i=0; while [ ! -e %s ] && [ $i -lt 12000 ]; do sleep 0.05; i=$((i+1)); done"]
`, started, release)))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// startBlocked prepares and starts a host with blockingJob and returns
// once the job's first run has begun.
func startBlocked(t *testing.T, url, id, dir string) *host.Host {
	t.Helper()
	h, err := host.New(host.Options{ConnString: url, ID: id, Version: "test", DrainDelay: host.NoDrainDelay,
		NoHousekeeping: true, Jobs: blockingJob(t, dir), ShutdownWait: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Prepare(ctx); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitUntil(t, time.Minute, "the job's first run to begin", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	return h
}

// lastOutcome is the outcome of the job's last run.
func lastOutcome(t *testing.T, pool *pgxpool.Pool, job string) string {
	t.Helper()
	var outcome string
	err := pool.QueryRow(context.WithoutCancel(t.Context()),
		`SELECT outcome FROM studio_job_run WHERE job_id = $1 ORDER BY seq DESC LIMIT 1`, job).Scan(&outcome)
	if err != nil {
		t.Fatal(err)
	}
	return outcome
}

// inBackground runs f and returns a channel closed when it has returned.
func inBackground(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

func TestStopDrainsAndLetsARunInProgressFinish(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	ignore := goleak.IgnoreCurrent()
	dir := t.TempDir()
	h := startBlocked(t, url, "soft-stop", dir)
	stopped := inBackground(h.Stop)
	waitUntil(t, time.Minute, "state draining", func() bool { return replicaState(t, pool, "soft-stop") == "draining" })
	select {
	case <-stopped:
		t.Fatal("Stop returned while a run was in progress and ShutdownWait had not passed")
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return after the run finished")
	}
	if err := h.Wait(); err != nil {
		t.Errorf("Wait after Stop = %v, want nil (drained)", err)
	}
	if o := lastOutcome(t, pool, "blocker"); o != "succeeded" {
		t.Errorf("the run in progress ended %q, want succeeded", o)
	}
	if s := replicaState(t, pool, "soft-stop"); s != "stopped" {
		t.Errorf("state %q, want stopped", s)
	}
	goleak.VerifyNone(t, ignore)
}

func TestStopAndCancelInterruptsARunInProgress(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	ignore := goleak.IgnoreCurrent()
	h := startBlocked(t, url, "hard-stop", t.TempDir())
	// The run would go on for ten minutes, and ShutdownWait would wait for
	// it: StopAndCancel must not.
	select {
	case <-inBackground(h.StopAndCancel):
	case <-time.After(2 * time.Minute):
		t.Fatal("StopAndCancel did not return")
	}
	if err := h.Wait(); !errors.Is(err, host.ErrInterrupted) {
		t.Errorf("Wait after StopAndCancel = %v, want ErrInterrupted", err)
	}
	if o := lastOutcome(t, pool, "blocker"); o != "interrupted" {
		t.Errorf("the run in progress ended %q, want interrupted", o)
	}
	if s := replicaState(t, pool, "hard-stop"); s != "stopped" {
		t.Errorf("state %q, want stopped (written even at once)", s)
	}
	h.Stop() // safe after the end
	h.StopAndCancel()
	goleak.VerifyNone(t, ignore)
}

// Stop between Prepare and Start closes what Prepare opened (the pools,
// the HTTP address) and registers nothing; Start is then refused.
func TestStopBetweenPrepareAndStartClosesWhatPrepareOpened(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	ignore := goleak.IgnoreCurrent()
	h, err := host.New(host.Options{ConnString: url, ID: "prepared-only", NoHousekeeping: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); !errors.Is(err, host.ErrNotPrepared) {
		t.Errorf("Start before Prepare = %v, want ErrNotPrepared", err)
	}
	if err := h.Prepare(t.Context()); err != nil {
		t.Fatal(err)
	}
	addr := h.Addr()
	if addr == "" {
		t.Fatal("no HTTP address after Prepare")
	}
	if err := h.Prepare(t.Context()); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("a second Prepare = %v, want ErrStarted", err)
	}
	h.Stop()
	if err := h.Wait(); err != nil {
		t.Errorf("Wait = %v, want nil", err)
	}
	if s := replicaState(t, pool, "prepared-only"); s != "" {
		t.Errorf("state %q, want no row", s)
	}
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Errorf("Stop after Prepare left %s taken: %v", addr, err)
	} else {
		ln.Close()
	}
	if err := h.Start(t.Context()); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
	goleak.VerifyNone(t, ignore)
}

// While Prepare waits for a writable primary, Stop ends it as a drain
// (Wait nil) and StopAndCancel as a stop at once (Wait ErrInterrupted);
// either way Prepare says ErrStoppedWhilePreparing, nothing is registered,
// and the wait's probe server and goroutine are gone.
func TestAStopWhileWaitingForAWritablePrimaryEndsPrepare(t *testing.T) {
	tests := []struct {
		name string
		stop func(*host.Host)
		want error
	}{
		{"Stop drains", (*host.Host).Stop, nil},
		{"StopAndCancel stops at once", (*host.Host).StopAndCancel, host.ErrInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := pgtest.NewDB(t)
			pool := openPool(t, url)
			if _, err := pool.Exec(t.Context(), setReadOnly); err != nil {
				t.Fatal(err)
			}
			ignore := goleak.IgnoreCurrent()
			var logs syncBuffer
			h, err := host.New(host.Options{ConnString: url, ID: "waits", NoHousekeeping: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			prepared := make(chan error, 1)
			go func() { prepared <- h.Prepare(context.Background()) }()
			var addr string
			waitUntil(t, 30*time.Second, "the waiting log line", func() bool {
				var ok bool
				addr, ok = logAttr(logs.String(), "waiting for a writable primary", "listen")
				return ok
			})
			tt.stop(h)
			select {
			case err := <-prepared:
				if !errors.Is(err, host.ErrStoppedWhilePreparing) {
					t.Errorf("Prepare = %v, want ErrStoppedWhilePreparing", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Prepare did not return after the stop")
			}
			if err := h.Wait(); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("Wait = %v, want %v", err, tt.want)
			}
			if s := replicaState(t, pool, "waits"); s != "" {
				t.Errorf("state %q, want no row", s)
			}
			if ln, err := net.Listen("tcp", addr); err != nil {
				t.Errorf("the wait's probe server still holds %s: %v", addr, err)
			} else {
				ln.Close()
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}
