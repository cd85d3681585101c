package e2efleet

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
)

// queryTimeout bounds one statement of the test.
const queryTimeout = 10 * time.Second

// testAppName marks the test's own sessions (left out of the counts).
const testAppName = "studioctl-e2efleet"

// testPool opens the test's own pool on dbURL.
func testPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = testAppName
	cfg.MaxConns = 2
	pool, err := db.OpenConfig(context.Background(), cfg, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// target is an HTTP server the jobs GET: an http: task is the cheapest
// task a replica runs, so the replicas' own cost is what is measured.
func target(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// writeConfig writes a configuration of n installation jobs fleet-NNN,
// job i every every(i), each a GET of url; it returns its path and the
// job ids.
func writeConfig(t testing.TB, n int, every func(i int) time.Duration, url string) (string, []string) {
	t.Helper()
	var conf strings.Builder
	conf.WriteString("jobs:\n")
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("fleet-%03d", i)
		fmt.Fprintf(&conf, "  - id: %s\n    scope: installation\n    every: %s\n    run:\n      http: {url: %q}\n", ids[i], every(i), url)
	}
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// attempts is the sum over every replica's status rows of runs and of
// held-elsewhere skips (lock attempts, docs/benchmarks.md "Shared
// schedule"), and of runs alone (due times).
func attempts(t testing.TB, pool *pgxpool.Pool) (attempts, runs int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(runs + skipped_elsewhere), 0)::bigint, coalesce(sum(runs), 0)::bigint
FROM studio_job_status`).Scan(&attempts, &runs); err != nil {
		t.Fatal(err)
	}
	return attempts, runs
}

// dbNow is the database's now.
func dbNow(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// poll calls cond every pollEvery until it returns true or d passes, and
// reports whether it did.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery) // a poll's pause: every look checks the database
	}
}

const pollEvery = 250 * time.Millisecond
