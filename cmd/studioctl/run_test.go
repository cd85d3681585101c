package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// runTestOptions are run's options over url, with signals the test sends.
func runTestOptions(url string, cfg *config.Config, sigs chan os.Signal) *runOptions {
	return &runOptions{
		deps:       deps{LockTable: locks.DefaultTable},
		Config:     cfg,
		ConnString: func(context.Context) (string, bool, error) { return url, false, nil },
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Signals:    func() (<-chan os.Signal, func()) { return sigs, func() {} },
		Version:    "test",
	}
}

func TestRunRunRefusesABadReplicaIDBeforeReachingTheDatabase(t *testing.T) {
	cfg := &config.Config{}
	cfg.Replica.ID = "Web_1"
	cfg.Database.Migrate = "off"
	o := runTestOptions("", cfg, make(chan os.Signal))
	o.ConnString = func(context.Context) (string, bool, error) {
		t.Error("run reached for the database with a bad replica id")
		return "", false, errors.New("unreachable")
	}
	err := runRun(context.Background(), o)
	var ue *usageError
	if !errors.As(err, &ue) || exitCode(err) != exitUsage {
		t.Fatalf("runRun = %v (exit %d), want a usage error (exit 2)", err, exitCode(err))
	}
}

func TestRunRunHostsAReplicaUntilASignalDrainsIt(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg := &config.Config{}
	cfg.Replica.ID = "run-test-1"
	cfg.Replica.Listen = "127.0.0.1:0"
	cfg.Database.Migrate = "off"
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runRun(ctx, runTestOptions(url, cfg, sigs)) }()

	state := func() string {
		var s string
		pool.QueryRow(ctx, `SELECT state FROM studio_replica WHERE id = 'run-test-1'`).Scan(&s)
		return s
	}
	for deadline := time.Now().Add(30 * time.Second); state() != "ready"; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("run ended before ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not ready after 30s (state %q)", state())
		}
	}
	sigs <- os.Interrupt
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after a drain = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not end 30s after the signal")
	}
	if s := state(); s != "stopped" {
		t.Errorf("state after the drain = %q, want stopped", s)
	}
}

// The README's tour runs examples/demo.yaml: it must stay a valid config.
func TestTheDemoConfigurationLoads(t *testing.T) {
	list, err := jobs.LoadFile("../../examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clusters, err := leases.LoadFile("../../examples/demo.yaml", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 || len(clusters) != 12 {
		t.Errorf("demo.yaml: %d jobs, %d clusters; want jobs and 12 clusters", len(list), len(clusters))
	}
}
