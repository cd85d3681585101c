package e2ejobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/tasks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Replicas sharing installation jobs (issue 14, item 4), a measurement, not
// a check (SPEC §11). bench/run-scale.sh drives it:
//
//	STUDIO_BENCH_SCALE=1 STUDIO_BENCH_NORACE=1 STUDIO_BENCH_SCALE_REPLICAS=3 \
//	  go test -count=1 -v -run TestMeasureScaleReplicas -timeout 30m ./internal/e2e/jobs
//
// STUDIO_BENCH_SCALE_REPLICAS real `studioctl run` processes of one binary
// (built without -race) share one PostgreSQL database and each host the
// same STUDIO_BENCH_SCALE_JOBS (1000) installation jobs, job i every
// 1 s + (i mod 10) s like bench/run-10k.sh's instance jobs. Each job is an
// http: task that GETs a server of this test, which counts the fires (one
// request is one run, wherever it ran) and the gap between a job's
// requests. After STUDIO_BENCH_SCALE_WARMUP (10s) it measures a window of
// STUDIO_BENCH_SCALE_WINDOW (20s): each replica's CPU and largest RSS
// (internal/testkit/replicaproc), the PostgreSQL server's CPU (the postmaster and
// its backends) and the statements it ran (pg_stat_statements). The result
// is logged and, with STUDIO_BENCH_SCALE_OUT, written as JSON.
func TestMeasureScaleReplicas(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_SCALE") != "1" {
		t.Skip("a measurement: set STUDIO_BENCH_SCALE=1 (bench/run-scale.sh does)")
	}
	if os.Getenv(replicaproc.EnvNoRace) == "" {
		t.Fatalf("a measurement of a race-enabled binary measures the race detector: set %s=1", replicaproc.EnvNoRace)
	}
	replicasN := scaleInt(t, "STUDIO_BENCH_SCALE_REPLICAS", 1)
	n := scaleInt(t, "STUDIO_BENCH_SCALE_JOBS", 1000)
	warmup := scaleDuration(t, "STUDIO_BENCH_SCALE_WARMUP", 10*time.Second)
	window := scaleDuration(t, "STUDIO_BENCH_SCALE_WINDOW", 20*time.Second)

	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	ctx := context.Background()
	var dataDir string
	if err := pool.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	postmaster := replicaproc.PostmasterPID(dataDir)
	if postmaster == 0 {
		t.Logf("no postmaster.pid in %s: the server's CPU is not measured", dataDir)
	}

	// The jobs' target: counts the fires and each job's gaps.
	every := make([]time.Duration, n)
	for i := range every {
		every[i] = time.Second + time.Duration(i%10)*time.Second
	}
	fires := &scaleFires{last: make([]time.Time, n), every: every}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fires.add(r.Header.Get(tasks.HeaderJobID), time.Now())
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var conf strings.Builder
	conf.WriteString("jobs:\n")
	for i := range n {
		fmt.Fprintf(&conf, "  - id: scale-%05d\n    scope: installation\n    every: %s\n    run:\n      http: {url: %q}\n", i, every[i], srv.URL)
	}
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	type replica struct {
		p    *replicaproc.Proc
		cpu0 time.Duration
		rss  float64
	}
	rs := make([]*replica, replicasN)
	for i := range rs {
		rs[i] = &replica{p: studioctlBin.Start(t, replicaproc.Options{ID: fmt.Sprintf("scale-%02d", i+1), DatabaseURL: dbURL, Args: []string{"--config", path}})}
	}
	for _, r := range rs {
		r.p.WaitReady(t)
	}
	t.Logf("scale: %d replicas ready with %d installation jobs each; warming up %s, then measuring %s", replicasN, n, warmup, window)
	time.Sleep(warmup) // a measurement's warm-up, not synchronisation

	byQuery0 := statementsByQuery(t, pool)
	fires0 := fires.count.Load()
	pg0 := replicaproc.TreeCPU(postmaster)
	for _, r := range rs {
		r.cpu0 = replicaproc.CPU(r.p.PID())
	}
	fires.on.Store(true)
	start := time.Now()
	for {
		for _, r := range rs {
			r.rss = max(r.rss, replicaproc.RSS(r.p.PID()))
		}
		left := window - time.Since(start)
		if left <= 0 {
			break
		}
		time.Sleep(min(left, time.Second)) // sampling, not synchronisation
	}
	wall := time.Since(start)
	res := scaleResult{Program: "studioctl-replicas", Version: runtime.Version(), Replicas: replicasN, Jobs: n,
		WarmupS: warmup.Seconds(), WindowS: wall.Seconds()}
	var cpuTotal time.Duration
	for _, r := range rs {
		cpu := replicaproc.CPU(r.p.PID()) - r.cpu0
		cpuTotal += cpu
		res.PerReplica = append(res.PerReplica, scaleReplica{ID: r.p.ID(), CPUCores: cpu.Seconds() / wall.Seconds(), RSSMiBMax: r.rss})
	}
	pg1 := replicaproc.TreeCPU(postmaster)
	fires.on.Store(false)
	fired := fires.count.Load() - fires0
	byQuery1 := statementsByQuery(t, pool)
	var stmts0, stmts1 int64
	for _, c := range byQuery0 {
		stmts0 += c.calls
	}
	for _, c := range byQuery1 {
		stmts1 += c.calls
	}

	res.Fires = int(fired)
	res.FiresPerS = float64(fired) / wall.Seconds()
	res.CPUCoresAll = cpuTotal.Seconds() / wall.Seconds()
	res.DBServerCPUCores = (pg1 - pg0).Seconds() / wall.Seconds()
	res.DBStatementsPerS = float64(stmts1-stmts0) / wall.Seconds()
	if fired > 0 {
		res.CPUUsPerFireAll = cpuTotal.Seconds() * 1e6 / float64(fired)
		res.CPUUsPerFirePerReplica = res.CPUUsPerFireAll / float64(replicasN)
		res.DBServerCPUUsPerFire = (pg1 - pg0).Seconds() * 1e6 / float64(fired)
		res.DBStatementsPerFire = float64(stmts1-stmts0) / float64(fired)
		for q, c1 := range byQuery1 {
			c0 := byQuery0[q]
			if c1.calls > c0.calls {
				res.DBByQuery = append(res.DBByQuery, scaleQuery{Query: q, CallsPerFire: float64(c1.calls-c0.calls) / float64(fired),
					ExecUsPerFire: (c1.execMs - c0.execMs) * 1e3 / float64(fired)})
			}
		}
		slices.SortFunc(res.DBByQuery, func(a, b scaleQuery) int { return cmp.Compare(b.ExecUsPerFire, a.ExecUsPerFire) })
		if len(res.DBByQuery) > 10 {
			res.DBByQuery = res.DBByQuery[:10]
		}
	}
	rss := make([]float64, 0, len(res.PerReplica))
	for _, r := range res.PerReplica {
		rss = append(rss, r.RSSMiBMax)
	}
	slices.Sort(rss)
	res.RSSMiBMedian, res.RSSMiBMax = rss[len(rss)/2], rss[len(rss)-1]
	fires.mu.Lock()
	gaps := slices.Sorted(slices.Values(fires.gaps))
	res.Early = fires.early
	fires.mu.Unlock()
	if len(gaps) > 0 {
		pct := func(p float64) float64 {
			return float64(gaps[min(int(p*float64(len(gaps))), len(gaps)-1)]) / float64(time.Millisecond)
		}
		res.GapOverDelayP50ms, res.GapOverDelayP99ms = pct(0.5), pct(0.99)
	}

	// The replicas drain (the cleanup kills what is left).
	for _, r := range rs {
		r.p.Signal(t, syscall.SIGTERM)
	}
	for _, r := range rs {
		r.p.WaitExit(t, replicaproc.ExitTimeout)
	}

	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scale result:\n%s", out)
	if path := os.Getenv("STUDIO_BENCH_SCALE_OUT"); path != "" {
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scaleResult is the JSON of one TestMeasureScaleReplicas run
// (bench/scalereport reads it).
type scaleResult struct {
	Program   string  `json:"program"`
	Version   string  `json:"version"`
	Replicas  int     `json:"replicas"`
	Jobs      int     `json:"jobs"`
	WarmupS   float64 `json:"warmup_s"`
	WindowS   float64 `json:"window_s"`
	Fires     int     `json:"fires"`
	FiresPerS float64 `json:"fires_per_s"`
	// CPU of all replicas together, per fire anywhere, and that divided by
	// the replicas (each replica's share).
	CPUCoresAll            float64        `json:"cpu_cores_all_replicas"`
	CPUUsPerFireAll        float64        `json:"cpu_us_per_fire_all_replicas"`
	CPUUsPerFirePerReplica float64        `json:"cpu_us_per_fire_per_replica"`
	RSSMiBMedian           float64        `json:"rss_mib_median_replica"`
	RSSMiBMax              float64        `json:"rss_mib_max_replica"`
	PerReplica             []scaleReplica `json:"per_replica"`
	DBServerCPUCores       float64        `json:"db_server_cpu_cores"`
	DBServerCPUUsPerFire   float64        `json:"db_server_cpu_us_per_fire"`
	DBStatementsPerS       float64        `json:"db_statements_per_s"`
	DBStatementsPerFire    float64        `json:"db_statements_per_fire"`
	// The ten statements of the most execution time per fire
	// (pg_stat_statements' total_exec_time: planning, parsing and the
	// commit's work are not in it), and their calls per fire.
	DBByQuery []scaleQuery `json:"db_by_query"`
	// The time between two requests of a job, less its delay: the run's own
	// time plus the fire's lateness. Early counts gaps under half the delay
	// (two replicas running one tick would show there).
	GapOverDelayP50ms float64 `json:"gap_over_delay_p50_ms"`
	GapOverDelayP99ms float64 `json:"gap_over_delay_p99_ms"`
	Early             int     `json:"early_fires"`
}

type scaleReplica struct {
	ID        string  `json:"id"`
	CPUCores  float64 `json:"cpu_cores"`
	RSSMiBMax float64 `json:"rss_mib_max"`
}

// scaleFires counts the requests of the jobs' target and, while on, keeps
// each job's gap between requests less its delay.
type scaleFires struct {
	count atomic.Int64
	on    atomic.Bool
	every []time.Duration

	mu    sync.Mutex
	last  []time.Time
	gaps  []time.Duration
	early int
}

func (f *scaleFires) add(job string, now time.Time) {
	f.count.Add(1)
	i, err := strconv.Atoi(strings.TrimPrefix(job, "scale-"))
	if err != nil || i < 0 || i >= len(f.last) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.last[i]
	f.last[i] = now
	if prev.IsZero() || !f.on.Load() {
		return
	}
	gap := now.Sub(prev) - f.every[i]
	if gap < -f.every[i]/2 {
		f.early++
	}
	f.gaps = append(f.gaps, gap)
}

func scaleInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive whole number", name, s)
	}
	return n
}

func scaleDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, s)
	}
	return d
}

type scaleQuery struct {
	Query         string  `json:"query"`
	CallsPerFire  float64 `json:"calls_per_fire"`
	ExecUsPerFire float64 `json:"exec_us_per_fire"`
}

type queryCounts struct {
	calls  int64
	execMs float64
}

// statementsByQuery is pg_stat_statements of this database by query text
// (its first 100 characters), leaving out this test's own reads (marked
// with a comment) and ten_exec's; statements() is their sum.
func statementsByQuery(t *testing.T, pool *pgxpool.Pool) map[string]queryCounts {
	t.Helper()
	rows, err := pool.Query(context.Background(), `/* ten */ SELECT left(regexp_replace(s.query, '\s+', ' ', 'g'), 100), sum(s.calls)::bigint, sum(s.total_exec_time)
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() AND s.query NOT LIKE '%/* ten */%'
  AND s.query NOT LIKE 'SELECT replica, started_at, ended_at FROM ten_exec%' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]queryCounts{}
	for rows.Next() {
		var q string
		var c queryCounts
		if err := rows.Scan(&q, &c.calls, &c.execMs); err != nil {
			t.Fatal(err)
		}
		out[q] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
