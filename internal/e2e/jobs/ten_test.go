package e2ejobs

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Ten replicas (issue 13, part 4), an opt-in run of about 11 minutes:
//
//	STUDIO_BENCH_TEN=1 STUDIO_BENCH_NORACE=1 go test -count=1 -v -run TestMeasureTenReplicas -timeout 30m ./internal/e2e/jobs
//
// 10 real replicas share 5 installation jobs every 1s and 5 every 2s. Each
// job is a sql: task that records its own execution (its start, a 0.2 s
// sleep, its end, and the replica, from application_name) in one
// transaction. A third of the way in, one replica is killed with SIGKILL;
// at two thirds, another is drained. STUDIO_BENCH_TEN_DURATION changes the
// 10 minutes.
func TestMeasureTenReplicas(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_TEN") != "1" {
		t.Skip("a measurement: set STUDIO_BENCH_TEN=1")
	}
	window := 10 * time.Minute
	if s := os.Getenv("STUDIO_BENCH_TEN_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		window = d
	}
	const replicasN, runFor = 10, 0.2
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE ten_exec (job_id text NOT NULL, replica text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	every := map[string]time.Duration{}
	var conf strings.Builder
	// The executions record application_name, the replica's: its role.
	conf.WriteString("database:\n  sql_as_replica: true\njobs:\n")
	for i := range 10 {
		id, d := fmt.Sprintf("one-%d", i), time.Second
		if i >= 5 {
			id, d = fmt.Sprintf("two-%d", i-5), 2*time.Second
		}
		every[id] = d
		fmt.Fprintf(&conf, "  - id: %s\n    scope: installation\n    every: %s\n    run:\n      sql: >-\n        DO $$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN PERFORM pg_sleep(%g);\n        INSERT INTO ten_exec VALUES ('%s', current_setting('application_name'), t0, clock_timestamp()); END $$\n", id, d, runFor, id)
	}
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	type replica struct {
		id   string
		p    *replicaproc.Proc
		addr string
		rss  float64
		cpu0 time.Duration
	}
	var rs []*replica
	for i := range replicasN {
		id := fmt.Sprintf("ten-%02d", i+1)
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", id) // the executions name their replica
		u.RawQuery = q.Encode()
		p := studioctlBin.Start(t, replicaproc.Options{ID: id, DatabaseURL: u.String(), Args: []string{"--config", path}})
		rs = append(rs, &replica{id: id, p: p})
	}
	for _, r := range rs {
		r.addr = r.p.WaitReady(t)
		r.cpu0 = replicaproc.CPU(r.p.PID())
	}
	stmts0 := statements(t, pool)
	start := time.Now()
	w0 := dbNowOf(t, pool)
	killed, drained := rs[2], rs[6]
	var killAt, drainAt time.Time
	for time.Since(start) < window {
		for _, r := range rs {
			if !r.p.Exited() {
				r.rss = max(r.rss, replicaproc.RSS(r.p.PID()))
			}
		}
		if killAt.IsZero() && time.Since(start) > window/3 {
			killAt = dbNowOf(t, pool)
			killed.p.Signal(t, syscall.SIGKILL)
			t.Logf("%s: kill -9 %s", time.Since(start).Round(time.Second), killed.id)
		}
		if drainAt.IsZero() && time.Since(start) > 2*window/3 {
			drainAt = dbNowOf(t, pool)
			drained.p.Signal(t, syscall.SIGTERM)
			t.Logf("%s: drain %s", time.Since(start).Round(time.Second), drained.id)
		}
		time.Sleep(time.Second) // sampling, not synchronisation
	}
	wall := time.Since(start)
	w1 := dbNowOf(t, pool)
	stmts1 := statements(t, pool)
	t.Logf("database statements: %.1f a second over %s (pg_stat_statements, this test's own left out)", float64(stmts1-stmts0)/wall.Seconds(), wall.Round(time.Second))
	for _, r := range rs {
		if r.p.Exited() {
			t.Logf("%s: exited (CPU and heartbeat not read); RSS max %.1f MiB", r.id, r.rss)
			continue
		}
		cpu := (replicaproc.CPU(r.p.PID()) - r.cpu0).Seconds() / wall.Seconds()
		gap, err := replicaproc.Metric(r.addr, "studio_replica_heartbeat_max_gap_seconds")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: CPU %.3f cores, RSS max %.1f MiB, heartbeat max gap %.2fs", r.id, cpu, r.rss, gap)
	}
	// Runs against the ideal, per job, and overlaps.
	ids := make([]string, 0, len(every))
	for id := range every {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	overlaps := 0
	for _, id := range ids {
		rows, err := pool.Query(ctx, `SELECT replica, started_at, ended_at FROM ten_exec WHERE job_id = $1 AND started_at >= $2 AND started_at < $3 ORDER BY started_at`, id, w0, w1)
		if err != nil {
			t.Fatal(err)
		}
		type ex struct {
			rep  string
			s, e time.Time
		}
		var xs []ex
		per := map[string]int{}
		for rows.Next() {
			var x ex
			if err := rows.Scan(&x.rep, &x.s, &x.e); err != nil {
				t.Fatal(err)
			}
			xs = append(xs, x)
			per[x.rep]++
		}
		rows.Close()
		var busy time.Duration
		for i, x := range xs {
			busy += x.e.Sub(x.s)
			if i > 0 && x.s.Before(xs[i-1].e) {
				overlaps++
				t.Errorf("%s: executions overlap: %v on %s and %v on %s", id, xs[i-1].s, xs[i-1].rep, x.s, x.rep)
			}
		}
		mean := time.Duration(0)
		if len(xs) > 0 {
			mean = busy / time.Duration(len(xs))
		}
		ideal := w1.Sub(w0).Seconds() / (every[id] + mean).Seconds()
		t.Logf("%s (every %s): %d runs, ideal %.1f (ratio %.3f), on %d replicas, mean execution %s", id, every[id], len(xs), ideal, float64(len(xs))/ideal, len(per), mean.Round(time.Millisecond))
	}
	t.Logf("overlapping pairs: %d", overlaps)
}

func dbNowOf(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), `/* ten */ SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// statements is the number of statements this database ran, from
// pg_stat_statements, leaving out this test's own (testAppName cannot be
// told apart there, so its reads carry a comment).
func statements(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	for _, c := range statementsByQuery(t, pool) {
		n += c.calls
	}
	return n
}
