package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/embedded"
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
		ConnString: func(context.Context) (string, error) { return url, nil },
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
	o.ConnString = func(context.Context) (string, error) {
		t.Error("run reached for the database with a bad replica id")
		return "", errors.New("unreachable")
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
	cfg, _, err := config.Load("../../examples/demo.yaml", func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := jobs.ParseSection(cfg.File, cfg.Doc.Section("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	clusters, err := leases.ParseSection(cfg.File, cfg.Doc.Section("clusters"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 || len(clusters) != 12 {
		t.Errorf("demo.yaml: %d jobs, %d clusters; want jobs and 12 clusters", len(list), len(clusters))
	}
}

// What Prepare (the blocking part of a start) says reaches run's exit
// code: a lock table that does not fit is the configuration's (exit 2), a
// database that cannot be reached a failure (exit 1), and a signal while
// the replica waits for a writable primary ends it cleanly before it
// registers (exit 0).
func TestPrepareErrorsReachRunsExitCode(t *testing.T) {
	const readOnly = `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`
	tests := []struct {
		name    string
		url     func(t *testing.T) string
		table   func() locks.Table
		signals int
		want    int
	}{
		{name: "a missing lock table is exit 2", url: func(t *testing.T) string { return pgtest.NewDB(t) },
			table: func() locks.Table { tb := locks.DefaultTable(); tb.Name = "no_such_locks"; return tb }, want: exitUsage},
		{name: "an unreachable database is exit 1", url: func(t *testing.T) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close() // nothing listens there now
			return "postgres://studio@" + addr + "/studio?connect_timeout=5&sslmode=disable"
		}, want: exitFailure},
		{name: "a drain while waiting for a writable primary is exit 0", url: readOnlyDB(readOnly), signals: 1, want: exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.url(t)
			cfg := &config.Config{}
			cfg.Replica.ID = "prepare-exit"
			cfg.Replica.Listen = "127.0.0.1:0"
			cfg.Database.Migrate = "off"
			sigs := make(chan os.Signal, 2)
			var logs lockedWriter
			o := runTestOptions(url, cfg, sigs)
			o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			if tt.table != nil {
				o.LockTable = tt.table
			}
			done := make(chan error, 1)
			go func() { done <- runRun(context.Background(), o) }()
			if tt.signals > 0 {
				waitFor(t, time.Minute, "the waiting log line", func() bool {
					return strings.Contains(logs.String(), "waiting for a writable primary")
				})
				for range tt.signals {
					sigs <- os.Interrupt
				}
			}
			select {
			case err := <-done:
				if got := exitCode(err); got != tt.want {
					t.Errorf("run = %v: exit %d, want %d", err, got, tt.want)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("run did not end")
			}
		})
	}
}

func readOnlyDB(stmt string) func(t *testing.T) string {
	return func(t *testing.T) string {
		url := pgtest.NewDB(t)
		pool, err := db.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if _, err := pool.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
		return url
	}
}

// lockedWriter is a log sink that tests read while the replica writes.
type lockedWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, d)
		}
	}
}

// The config file is read once, by config.Load: what run, config show and
// doctor parse from its jobs: and clusters: is that read, not a second one
// (issue 23 item 4). Replaced on disk after the load, the file is not read
// again: before, jobs.LoadFile and leases.LoadFile each read it again and
// saw the new one.
func TestTheJobsAndClustersComeFromTheOneReadOfTheConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "studio.yaml")
	first := "jobs:\n  - id: first\n    scope: instance\n    every: 1m\n    run:\n      command: [\"true\"]\nclusters: [c1]\n"
	if err := os.WriteFile(path, []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(path, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("jobs:\n  - id: second\n    every: nonsense\nclusters: [c2, c3]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	views, clusters, err := parsedJobs(cfg, false)
	if err != nil {
		t.Fatalf("parsedJobs = %v; want the jobs of the one read", err)
	}
	if len(views) != 1 || views[0].ID != "first" || len(clusters) != 1 || clusters[0] != "c1" {
		t.Errorf("jobs %+v, clusters %v; want job first and cluster c1 from the one read", views, clusters)
	}
}

// Resolving the database is pure: it names the target from the
// configuration and the environment, and starts, creates and prints
// nothing, even when the target is the embedded default (issue 23 item 4:
// connString used to start and migrate it as it resolved it).
func TestResolvingTheDatabaseStartsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "embedded")
	tests := []struct {
		name string
		url  string
		env  map[string]string
		want dbTarget
	}{
		{name: "database.url wins", url: "postgres://app@db/app", env: map[string]string{"PGHOST": "elsewhere"}, want: dbTarget{URL: "postgres://app@db/app"}},
		{name: "a PG variable without database.url", env: map[string]string{"PGHOST": "db"}, want: dbTarget{PGEnv: true}},
		{name: "neither: the embedded default, not started", want: dbTarget{Embedded: &embedded.Embedded{Dir: dir}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			a := &app{stderr: &stderr, getenv: func(k string) string { return tt.env[k] }, cfg: &config.Config{}}
			a.cfg.Database.URL = tt.url
			a.cfg.Embedded.Dir = dir
			got := a.resolveDatabase()
			if got.URL != tt.want.URL || got.PGEnv != tt.want.PGEnv || (got.Embedded == nil) != (tt.want.Embedded == nil) ||
				(got.Embedded != nil && got.Embedded.Dir != dir) {
				t.Errorf("resolveDatabase = %+v, want %+v", got, tt.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("resolving created %s (stat: %v)", dir, err)
			}
			if stderr.Len() > 0 {
				t.Errorf("resolving printed %q", stderr.String())
			}
		})
	}
}
