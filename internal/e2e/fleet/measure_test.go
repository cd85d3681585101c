package e2efleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestMeasureFleet is the opt-in measurement of issue 28 (bench/
// run-fleet.sh runs it; docs/benchmarks.md, "Designated replica and the
// cost of a fleet"):
//
//	STUDIO_BENCH_FLEET=1 STUDIO_BENCH_NORACE=1 STUDIO_BENCH_FLEET_REPLICAS=10 \
//	  go test -count=1 -v -run TestMeasureFleet -timeout 30m ./internal/e2e/fleet
//
// STUDIO_BENCH_FLEET_REPLICAS real `studioctl run` processes (the binary
// STUDIO_FLEET_BIN, or this tree's, built without -race) share one
// database and STUDIO_BENCH_FLEET_JOBS (100) installation jobs, job i
// every 1 s + (i mod 2) s, each an http: task that GETs a server of this
// test, which counts the fires. After STUDIO_BENCH_FLEET_WARMUP (15s) it
// measures STUDIO_BENCH_FLEET_WINDOW (30s): lock attempts per due time
// (the status rows' runs plus held-elsewhere skips, over their runs, as
// docs/benchmarks.md's "Shared schedule" counts them), the lock statements
// per fire (pg_stat_statements), all statements per fire and a minute per
// replica, fires against the due times (the sum of window / every), the
// database server's CPU, the replicas' CPU and RSS, and the connections per
// replica. With 0 jobs it measures an idle fleet. STUDIO_BENCH_FLEET_START_BATCH
// (5) replicas start at a time, each batch ready before the next. The result is a RESULT
// line of JSON, also written to STUDIO_BENCH_FLEET_OUT.
func TestMeasureFleet(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_FLEET") != "1" {
		t.Skip("a measurement: set STUDIO_BENCH_FLEET=1 (bench/run-fleet.sh does)")
	}
	bin := studioctlBin
	if p := os.Getenv("STUDIO_FLEET_BIN"); p != "" {
		bin = &replicaproc.Binary{Path: p}
	} else if os.Getenv(replicaproc.EnvNoRace) == "" {
		t.Fatalf("a measurement of a race-enabled binary measures the race detector: set %s=1 or STUDIO_FLEET_BIN", replicaproc.EnvNoRace)
	}
	replicasN := envInt(t, "STUDIO_BENCH_FLEET_REPLICAS", 3)
	jobsN := envInt(t, "STUDIO_BENCH_FLEET_JOBS", 100)
	warmup := envDuration(t, "STUDIO_BENCH_FLEET_WARMUP", 15*time.Second)
	window := envDuration(t, "STUDIO_BENCH_FLEET_WINDOW", 30*time.Second)

	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	ctx := context.Background()
	var dataDir string
	if err := pool.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	postmaster := replicaproc.PostmasterPID(dataDir)

	var fires atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fires.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	every := func(i int) time.Duration { return time.Second + time.Duration(i%2)*time.Second }
	var path string
	if jobsN > 0 {
		path, _ = writeConfig(t, jobsN, every, srv.URL)
	} else {
		path = filepath.Join(t.TempDir(), "studio.yaml")
		if err := os.WriteFile(path, []byte("jobs: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type replica struct {
		p    *replicaproc.Proc
		cpu0 time.Duration
		rss  float64
	}
	started := time.Now()
	// In batches of startBatch (STUDIO_BENCH_FLEET_START_BATCH, 5), each
	// ready before the next starts: thirty processes registering at once on
	// a loaded 2-core machine timed out.
	startBatch := max(envInt(t, "STUDIO_BENCH_FLEET_START_BATCH", 5), 1)
	rs := make([]*replica, replicasN)
	for i := range rs {
		rs[i] = &replica{p: bin.Start(t, replicaproc.Options{ID: fmt.Sprintf("fleet-%02d", i+1), DatabaseURL: dbURL, Args: []string{"--config", path}})}
		if (i+1)%startBatch == 0 || i == len(rs)-1 {
			for _, r := range rs[i/startBatch*startBatch : i+1] {
				r.p.WaitReady(t)
			}
		}
	}
	t.Logf("fleet: %d replicas ready in %s with %d installation jobs; warming up %s, then measuring %s",
		replicasN, time.Since(started).Round(time.Millisecond), jobsN, warmup, window)
	time.Sleep(warmup) // a measurement's warm-up, not synchronisation

	stmts0, locks0 := statementCounts(t, pool)
	att0, runs0 := attempts(t, pool)
	fires0 := fires.Load()
	pg0 := replicaproc.TreeCPU(postmaster)
	for _, r := range rs {
		r.cpu0 = replicaproc.CPU(r.p.PID())
	}
	start := time.Now()
	var conns []int
	for {
		for _, r := range rs {
			r.rss = max(r.rss, replicaproc.RSS(r.p.PID()))
		}
		conns = append(conns, connections(t, pool))
		left := window - time.Since(start)
		if left <= 0 {
			break
		}
		time.Sleep(min(left, time.Second)) // sampling, not synchronisation
	}
	wall := time.Since(start)
	var cpu time.Duration
	for _, r := range rs {
		cpu += replicaproc.CPU(r.p.PID()) - r.cpu0
	}
	pg1 := replicaproc.TreeCPU(postmaster)
	fired := fires.Load() - fires0
	att1, runs1 := attempts(t, pool)
	stmts1, locks1 := statementCounts(t, pool)

	res := fleetResult{Label: os.Getenv("STUDIO_BENCH_FLEET_LABEL"), Replicas: replicasN, Jobs: jobsN, WindowS: wall.Seconds(),
		Fires: fired, FiresPerS: float64(fired) / wall.Seconds(),
		StatementsPerS:              float64(stmts1-stmts0) / wall.Seconds(),
		StatementsPerMinutePerRepl:  float64(stmts1-stmts0) * 60 / wall.Seconds() / float64(replicasN),
		DBServerCPUCores:            (pg1 - pg0).Seconds() / wall.Seconds(),
		ReplicaCPUCoresEach:         cpu.Seconds() / wall.Seconds() / float64(replicasN),
		ConnectionsPerReplicaMedian: float64(median(conns)) / float64(replicasN)}
	for _, r := range rs {
		res.RSSMiBMax = max(res.RSSMiBMax, r.rss)
	}
	if runs1 > runs0 {
		res.AttemptsPerDue = float64(att1-att0) / float64(runs1-runs0)
	}
	if fired > 0 {
		res.StatementsPerFire = float64(stmts1-stmts0) / float64(fired)
		res.LockStatementsPerFire = float64(locks1-locks0) / float64(fired)
		res.DBServerCPUUsPerFire = (pg1 - pg0).Seconds() * 1e6 / float64(fired)
		var due float64
		for i := range jobsN {
			due += wall.Seconds() / every(i).Seconds()
		}
		res.FiresOverDue = float64(fired) / due
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RESULT %s", b)
	if out := os.Getenv("STUDIO_BENCH_FLEET_OUT"); out != "" {
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rs {
		r.p.Signal(t, syscall.SIGTERM)
	}
	for _, r := range rs {
		r.p.WaitExit(t, 30*time.Second)
	}
}

// fleetResult is one TestMeasureFleet run.
type fleetResult struct {
	Label                       string  `json:"label"`
	Replicas                    int     `json:"replicas"`
	Jobs                        int     `json:"jobs"`
	WindowS                     float64 `json:"window_s"`
	Fires                       int64   `json:"fires"`
	FiresPerS                   float64 `json:"fires_per_s"`
	FiresOverDue                float64 `json:"fires_over_due"`
	AttemptsPerDue              float64 `json:"attempts_per_due"`
	LockStatementsPerFire       float64 `json:"lock_statements_per_fire"`
	StatementsPerFire           float64 `json:"statements_per_fire"`
	StatementsPerS              float64 `json:"statements_per_s"`
	StatementsPerMinutePerRepl  float64 `json:"statements_per_minute_per_replica"`
	DBServerCPUCores            float64 `json:"db_server_cpu_cores"`
	DBServerCPUUsPerFire        float64 `json:"db_server_cpu_us_per_fire"`
	ReplicaCPUCoresEach         float64 `json:"replica_cpu_cores_each"`
	RSSMiBMax                   float64 `json:"rss_mib_max"`
	ConnectionsPerReplicaMedian float64 `json:"connections_per_replica"`
}

// statementCounts is the calls pg_stat_statements counted in this
// database, the test's own left out, and of them the lock acquisitions
// (ShedLock's INSERT ... ON CONFLICT on shedlock, fenced or not).
func statementCounts(t testing.TB, pool *pgxpool.Pool) (all, lockTries int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := pool.QueryRow(ctx, `/* fleet */ SELECT coalesce(sum(s.calls), 0)::bigint,
  coalesce(sum(s.calls) FILTER (WHERE s.query ILIKE 'INSERT INTO %shedlock%' OR s.query ILIKE 'WITH l AS (INSERT INTO %shedlock%'), 0)::bigint
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query NOT LIKE '%/* fleet */%' AND s.query NOT LIKE 'SELECT coalesce(sum(runs%'
  AND s.query NOT LIKE '%pg_stat_activity%'`).Scan(&all, &lockTries); err != nil {
		t.Fatal(err)
	}
	return all, lockTries
}

// connections is the number of backends of this database, the test's own
// left out.
func connections(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name <> $1`, testAppName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func median(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, s)
	}
	return n
}

func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration", name, s)
	}
	return d
}
