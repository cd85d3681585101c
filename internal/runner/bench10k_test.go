package runner_test

// TestBench10k is a measurement, not a check (SPEC §11: timings are measured
// and reported, never asserted). One replica's runner hosts 10,000 instance
// jobs with no-op tasks on fixed delays of 1-10 s, with the real batching
// Store, SettingsCache and lock provider on the harness's PostgreSQL. After a
// warm-up it measures a steady-state window: fire lateness, the process's CPU
// and RSS, and the database statements per second from pg_stat_statements.
// It runs only with STUDIO_BENCH10K=1; bench/run-10k.sh drives it side by
// side with gocron and robfig/cron (bench/peers) and prints the ratios.
//
// Knobs (environment): STUDIO_BENCH10K_JOBS (10000), STUDIO_BENCH10K_WARMUP
// (20s), STUDIO_BENCH10K_WINDOW (60s), STUDIO_BENCH10K_OUT (a JSON file; the
// result is logged too), STUDIO_BENCH10K_HEAPPROFILE (a heap profile taken
// at the end of the window), STUDIO_BENCH10K_RESOLUTION (the runner's
// TimerResolution; unset, its default), STUDIO_BENCH10K_DURABLE=1 (the
// runner writes each run's row before its task starts, as
// runner.durable_starts does in a replica; unset, it does not).

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

const (
	bench10kEnv        = "STUDIO_BENCH10K"
	bench10kReplica    = "bench10k-replica"
	bench10kPoolConns  = 8 // as the host's pool (internal/host poolMaxConns)
	bench10kSampleRSS  = time.Second
	bench10kMaxSamples = 400_000
)

// bench10kResult is the JSON every program of bench/run-10k.sh writes (the
// peers write the same fields, less the database ones).
type bench10kResult struct {
	Program       string  `json:"program"`
	Version       string  `json:"version"`
	Jobs          int     `json:"jobs"`
	WarmupS       float64 `json:"warmup_s"`
	WindowS       float64 `json:"window_s"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	Fires         int     `json:"fires"`
	FiresPerS     float64 `json:"fires_per_s"`
	LatenessP50ms float64 `json:"lateness_p50_ms"`
	LatenessP99ms float64 `json:"lateness_p99_ms"`
	LatenessMaxMs float64 `json:"lateness_max_ms"`
	LatenessMinMs float64 `json:"lateness_min_ms"`
	LatenessMean  float64 `json:"lateness_mean_ms"`
	CPUCores      float64 `json:"cpu_cores"` // process CPU seconds / wall seconds
	// RunqWaitMsPerS is how long the process's threads were runnable but
	// waited for a CPU, per second (schedstat run_delay): the machine's noise.
	RunqWaitMsPerS float64 `json:"runq_wait_ms_per_s"`
	RSSMiBMax      float64 `json:"rss_mib_max"`
	RSSMiBStart    float64 `json:"rss_mib_start"`
	HeapInuseMiB   float64 `json:"heap_inuse_mib"`
	Goroutines     int     `json:"goroutines"`

	DBStatementsPerS    float64              `json:"db_statements_per_s,omitempty"`
	DBStatementsByQuery []bench10kQueryCalls `json:"db_statements_by_query,omitempty"`
	DBServerCPUCores    float64              `json:"db_server_cpu_cores,omitempty"`
	StoreFlushesPerS    float64              `json:"store_flushes_per_s,omitempty"`
	// Rows in the studio_job_run upsert of each flush in the window.
	RunsPerFlushP10 int     `json:"runs_per_flush_p10,omitempty"`
	RunsPerFlushP50 int     `json:"runs_per_flush_p50,omitempty"`
	RunsPerFlushP90 int     `json:"runs_per_flush_p90,omitempty"`
	HistoryRowsPerS float64 `json:"history_rows_per_s,omitempty"`
	// The event stream (docs/events.md): rows of studio_event and bus
	// notifications per second, by type; EventsOff when the flush wrote no
	// run events (STUDIO_BENCH10K_NOEVENTS=1), for a side-by-side run.
	EventRowsPerS     float64            `json:"event_rows_per_s"`
	NotificationsPerS map[string]float64 `json:"notifications_per_s"`
	EventsOff         bool               `json:"events_off,omitempty"`
	// The server's side of the window: WAL written per second, and per
	// table the rows inserted and updated (and how many of the updates
	// were HOT, needing no index entry) per second.
	WALBytesPerS float64                    `json:"wal_bytes_per_s,omitempty"`
	Tables       map[string]bench10kTableIO `json:"tables,omitempty"`
}

type bench10kTableIO struct {
	InsertsPerS    float64 `json:"inserts_per_s"`
	UpdatesPerS    float64 `json:"updates_per_s"`
	HOTUpdatesPerS float64 `json:"hot_updates_per_s"`
}

type bench10kQueryCalls struct {
	Calls   int64   `json:"calls"`
	PerS    float64 `json:"per_s"`
	MeanMs  float64 `json:"mean_ms"`
	Excerpt string  `json:"query"`
}

// bench10kTask is a no-op task that records its lateness: the time from the
// end of its previous run plus the fixed delay (when the runner should have
// fired it again) to the start of this run. The runner never overlaps a
// job's runs, so last needs no lock.
type bench10kTask struct {
	every time.Duration
	last  time.Time
	rec   *bench10kRecorder
}

func (b *bench10kTask) Kind() string { return "bench10k" }

func (b *bench10kTask) Run(context.Context, tasks.Env) tasks.Result {
	now := time.Now()
	if !b.last.IsZero() {
		b.rec.add(now.Sub(b.last.Add(b.every)))
	}
	b.last = time.Now()
	return tasks.Result{}
}

// bench10kRecorder keeps the lateness of every fire while the window is open.
type bench10kRecorder struct {
	on      atomic.Bool
	mu      sync.Mutex
	samples []time.Duration
}

func (r *bench10kRecorder) add(d time.Duration) {
	if !r.on.Load() {
		return
	}
	r.mu.Lock()
	if len(r.samples) < bench10kMaxSamples {
		r.samples = append(r.samples, d)
	}
	r.mu.Unlock()
}

func TestBench10k(t *testing.T) {
	if os.Getenv(bench10kEnv) == "" {
		t.Skip("a measurement: set " + bench10kEnv + "=1 (bench/run-10k.sh does)")
	}
	n := bench10kInt(t, "STUDIO_BENCH10K_JOBS", 10_000)
	warmup := bench10kDuration(t, "STUDIO_BENCH10K_WARMUP", 20*time.Second)
	window := bench10kDuration(t, "STUDIO_BENCH10K_WINDOW", 60*time.Second)

	dbURL := pgtest.NewDB(t)
	ctx := context.Background()

	pcfg, err := db.ParsePoolConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = bench10kPoolConns
	pool, err := db.OpenConfig(ctx, pcfg, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The measurement's own connection: its statements carry a bench10k
	// comment and are left out of the counts.
	probe, err := bench10kConnect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.WithoutCancel(ctx))
	postmaster := bench10kPostmasterPID(t, probe)
	eventsOff := os.Getenv("STUDIO_BENCH10K_NOEVENTS") == "1"
	if eventsOff {
		// The flush as it was before the event stream: the seqs batch only.
		if _, err := probe.Exec(ctx, `/* bench10k */ CREATE OR REPLACE FUNCTION studio_event_runs(p_data jsonb[], p_notify text[] DEFAULT '{}') RETURNS void
LANGUAGE plpgsql AS $$ DECLARE v text; BEGIN FOREACH v IN ARRAY coalesce(p_notify, '{}') LOOP PERFORM pg_notify('studio', v); END LOOP; END $$`); err != nil {
			t.Fatal(err)
		}
	}
	// Every notification on the bus, by type, while the window is open.
	listen, err := bench10kConnect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listen.Exec(ctx, "LISTEN "+bus.Channel); err != nil {
		t.Fatal(err)
	}
	var notifyMu sync.Mutex
	notified := map[string]int{}
	var counting atomic.Bool
	listenCtx, stopListen := context.WithCancel(ctx)
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		for {
			n, err := listen.WaitForNotification(listenCtx)
			if err != nil {
				return
			}
			if !counting.Load() {
				continue
			}
			m, err := bus.Decode(n.Payload)
			kind := m.Type
			if err != nil {
				kind = "undecodable"
			}
			notifyMu.Lock()
			notified[kind]++
			notifyMu.Unlock()
		}
	}()
	defer func() {
		stopListen()
		<-listenDone
		listen.Close(context.WithoutCancel(ctx))
	}()

	rec := &bench10kRecorder{samples: make([]time.Duration, 0, bench10kMaxSamples)}
	list := make([]jobtask.Job, n)
	for i := range list {
		d := time.Second + time.Duration(i%10)*time.Second
		s, err := jobs.Every(d)
		if err != nil {
			t.Fatal(err)
		}
		list[i] = jobtask.Job{Job: jobs.Job{ID: fmt.Sprintf("bench-%05d", i), Scope: jobs.ScopeInstance, Schedule: s}, Task: &bench10kTask{every: d, rec: rec}}
	}
	provider, err := locks.NewProvider(pool, locks.DefaultTable(), bench10kReplica)
	if err != nil {
		t.Fatal(err)
	}
	flushes := &bench10kFlushes{}
	store := jobstore.NewStore(bench10kPool{pool, flushes}, bench10kReplica, nil)
	r, err := runner.New(runner.Options{
		ReplicaID: bench10kReplica, Jobs: list, Locks: runner.LocksOf(provider), Store: store,
		Settings: jobstore.NewSettingsCache(pool), Metrics: prometheus.NewRegistry(),
		TimerResolution: bench10kDuration(t, "STUDIO_BENCH10K_RESOLUTION", 0),
		DurableStarts:   os.Getenv("STUDIO_BENCH10K_DURABLE") == "1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Start(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			r.Stop()
			store.Stop()
		}
	}
	defer stop()

	t.Logf("bench10k: %d jobs started; warming up %s, then measuring %s", n, warmup, window)
	time.Sleep(warmup) // a measurement's warm-up, not synchronisation

	stmts0 := bench10kStatements(t, probe)
	wal0, tables0 := bench10kServerIO(t, probe)
	flushes0, _ := store.Stats()
	runs0 := bench10kHistoryRows(t, probe)
	events0 := bench10kEventRows(t, probe)
	counting.Store(true)
	pg0 := bench10kTreeCPU(postmaster)
	cpu0, wait0 := bench10kSelfCPU(), bench10kRunqWait()
	rss0 := bench10kRSS()
	start := time.Now()
	rec.on.Store(true)
	flushes.on.Store(true)
	rssMax := bench10kSampleRSSUntil(start.Add(window))
	rec.on.Store(false)
	flushes.on.Store(false)
	wall := time.Since(start)
	cpu1, wait1 := bench10kSelfCPU(), bench10kRunqWait()
	pg1 := bench10kTreeCPU(postmaster)
	flushes1, _ := store.Stats()
	runs1 := bench10kHistoryRows(t, probe)
	counting.Store(false)
	events1 := bench10kEventRows(t, probe)
	stmts1 := bench10kStatements(t, probe)
	wal1, tables1 := bench10kServerIO(t, probe)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goroutines := runtime.NumGoroutine()
	if path := os.Getenv("STUDIO_BENCH10K_HEAPPROFILE"); path != "" {
		bench10kHeapProfile(t, path)
	}
	stop()

	rec.mu.Lock()
	lat := slices.Clone(rec.samples)
	rec.mu.Unlock()
	res := bench10kResult{
		Program: "studioctl-runner", Version: runtime.Version(), Jobs: n,
		WarmupS: warmup.Seconds(), WindowS: wall.Seconds(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUCores: (cpu1 - cpu0).Seconds() / wall.Seconds(), RunqWaitMsPerS: float64((wait1-wait0)/time.Millisecond) / wall.Seconds(),
		RSSMiBMax: max(rssMax, rss0), RSSMiBStart: rss0,
		HeapInuseMiB: float64(ms.HeapInuse) / (1 << 20), Goroutines: goroutines,
		DBServerCPUCores: (pg1 - pg0).Seconds() / wall.Seconds(),
		StoreFlushesPerS: float64(flushes1-flushes0) / wall.Seconds(),
		HistoryRowsPerS:  float64(runs1-runs0) / wall.Seconds(),
		EventRowsPerS:    float64(events1-events0) / wall.Seconds(),
		EventsOff:        eventsOff,
	}
	res.WALBytesPerS = float64(wal1-wal0) / wall.Seconds()
	res.Tables = map[string]bench10kTableIO{}
	for name, b := range tables1 {
		a := tables0[name]
		res.Tables[name] = bench10kTableIO{InsertsPerS: float64(b[0]-a[0]) / wall.Seconds(),
			UpdatesPerS: float64(b[1]-a[1]) / wall.Seconds(), HOTUpdatesPerS: float64(b[2]-a[2]) / wall.Seconds()}
	}
	notifyMu.Lock()
	res.NotificationsPerS = map[string]float64{}
	for k, n := range notified {
		res.NotificationsPerS[k] = float64(n) / wall.Seconds()
	}
	notifyMu.Unlock()
	bench10kLateness(&res, lat, wall)
	flushes.mu.Lock()
	if sizes := slices.Sorted(slices.Values(flushes.sizes)); len(sizes) > 0 {
		at := func(p float64) int { return sizes[min(int(p*float64(len(sizes))), len(sizes)-1)] }
		res.RunsPerFlushP10, res.RunsPerFlushP50, res.RunsPerFlushP90 = at(0.1), at(0.5), at(0.9)
		hist := map[int]int{}
		for _, n := range sizes {
			hist[n/50*50]++
		}
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(hist)) {
			fmt.Fprintf(&b, " %d-%d:%d", k, k+49, hist[k])
		}
		t.Logf("bench10k: run rows per flush (flushes):%s", b.String())
	}
	flushes.mu.Unlock()
	var total int64
	for id, c := range stmts1 {
		c.Calls -= stmts0[id].Calls
		c.TotalMs -= stmts0[id].TotalMs
		if c.Calls <= 0 {
			continue
		}
		total += c.Calls
		res.DBStatementsByQuery = append(res.DBStatementsByQuery, bench10kQueryCalls{
			Calls: c.Calls, PerS: float64(c.Calls) / wall.Seconds(), MeanMs: c.TotalMs / float64(c.Calls), Excerpt: c.Query})
	}
	slices.SortFunc(res.DBStatementsByQuery, func(a, b bench10kQueryCalls) int { return int(b.Calls - a.Calls) })
	res.DBStatementsPerS = float64(total) / wall.Seconds()

	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bench10k result:\n%s", out)
	if path := os.Getenv("STUDIO_BENCH10K_OUT"); path != "" {
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// bench10kPool is the store's pool with its transactions wrapped, to see
// how many run rows each flush writes.
type bench10kPool struct {
	*pgxpool.Pool
	flushes *bench10kFlushes
}

func (p bench10kPool) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return bench10kTx{tx, p.flushes}, nil
}

type bench10kTx struct {
	pgx.Tx
	flushes *bench10kFlushes
}

func (t bench10kTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "INSERT INTO studio_job_run") && len(args) > 0 {
		if seqs, ok := args[0].([]int64); ok {
			t.flushes.add(len(seqs))
		}
	}
	return t.Tx.Exec(ctx, sql, args...)
}

// bench10kFlushes keeps the number of run rows of each flush in the window.
type bench10kFlushes struct {
	on    atomic.Bool
	mu    sync.Mutex
	sizes []int
}

func (f *bench10kFlushes) add(n int) {
	if !f.on.Load() {
		return
	}
	f.mu.Lock()
	f.sizes = append(f.sizes, n)
	f.mu.Unlock()
}

// bench10kHeapProfile writes the live heap (as of a fresh GC) to path, to
// see what the runner's memory is made of.
func bench10kHeapProfile(t testing.TB, path string) {
	t.Helper()
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

// bench10kLateness fills the fire count and the lateness percentiles.
func bench10kLateness(res *bench10kResult, lat []time.Duration, wall time.Duration) {
	res.Fires = len(lat)
	res.FiresPerS = float64(len(lat)) / wall.Seconds()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p*float64(len(lat))+0.5) - 1
		i = min(max(i, 0), len(lat)-1)
		return float64(lat[i]) / float64(time.Millisecond)
	}
	res.LatenessP50ms, res.LatenessP99ms = pct(0.50), pct(0.99)
	res.LatenessMinMs = float64(lat[0]) / float64(time.Millisecond)
	res.LatenessMaxMs = float64(lat[len(lat)-1]) / float64(time.Millisecond)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	res.LatenessMean = float64(sum) / float64(len(lat)) / float64(time.Millisecond)
}

// bench10kSampleRSSUntil samples VmRSS every second until end and returns
// the largest sample in MiB.
func bench10kSampleRSSUntil(end time.Time) float64 {
	var peak float64
	for {
		peak = max(peak, bench10kRSS())
		left := time.Until(end)
		if left <= 0 {
			return peak
		}
		time.Sleep(min(left, bench10kSampleRSS))
	}
}

// bench10kRSS is this process's resident set in MiB (VmRSS).
func bench10kRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// bench10kSelfCPU is the user+system CPU time this process has used.
func bench10kSelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bench10kRunqWait sums run_delay (time runnable, waiting for a CPU) over
// this process's threads.
func bench10kRunqWait() time.Duration {
	tids, _ := os.ReadDir("/proc/self/task")
	var total int64
	for _, tid := range tids {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", tid.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			total += n
		}
	}
	return time.Duration(total)
}

// bench10kTreeCPU is the CPU time of a PostgreSQL server: the postmaster
// with its reaped children (cutime, cstime) plus every live child. A child
// that exits between two readings moves into the postmaster's c-times, so a
// difference of two readings counts it once.
func bench10kTreeCPU(postmaster int) time.Duration {
	if postmaster <= 0 {
		return 0
	}
	ticks := func(pid string, withChildren bool) (int64, int, bool) {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			return 0, 0, false
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // f[0] is field 3 (state)
		if len(f) < 15 {
			return 0, 0, false
		}
		ppid, _ := strconv.Atoi(f[1])
		var sum int64
		last := 12 // utime, stime: fields 14, 15
		if withChildren {
			last = 14 // cutime, cstime: fields 16, 17
		}
		for _, v := range f[11 : last+1] {
			n, _ := strconv.ParseInt(v, 10, 64)
			sum += n
		}
		return sum, ppid, true
	}
	total, _, _ := ticks(strconv.Itoa(postmaster), true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if n, ppid, ok := ticks(e.Name(), false); ok && ppid == postmaster {
			total += n
		}
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(total) * time.Second / hz
}

type bench10kStmt struct {
	Calls   int64
	TotalMs float64
	Query   string
}

// bench10kStatements reads pg_stat_statements for the current database,
// less the measurement's own statements (marked with a bench10k comment).
func bench10kStatements(t testing.TB, conn *pgx.Conn) map[int64]bench10kStmt {
	t.Helper()
	rows, err := conn.Query(context.Background(), `/* bench10k */
SELECT queryid, sum(calls)::bigint, sum(total_exec_time), min(left(regexp_replace(query, '\s+', ' ', 'g'), 90))
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%bench10k%'
GROUP BY queryid`)
	if err != nil {
		t.Fatalf("read pg_stat_statements: %v", err)
	}
	out := map[int64]bench10kStmt{}
	for rows.Next() {
		var id int64
		var s bench10kStmt
		if err := rows.Scan(&id, &s.Calls, &s.TotalMs, &s.Query); err != nil {
			t.Fatalf("read pg_stat_statements: %v", err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read pg_stat_statements: %v", err)
	}
	return out
}

// bench10kServerIO reads the WAL written so far and, for the tables the
// runner writes, the rows inserted, updated and HOT-updated so far (the
// statistics are flushed at the end of a transaction, at most every
// second: a 20 s window is off by a second at most).
func bench10kServerIO(t testing.TB, conn *pgx.Conn) (int64, map[string][3]int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `/* bench10k */ SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	var wal int64
	if err := conn.QueryRow(ctx, `/* bench10k */ SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&wal); err != nil {
		t.Fatalf("read the WAL position: %v", err)
	}
	rows, err := conn.Query(ctx, `/* bench10k */ SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE relname IN ('studio_job_run', 'studio_job_status', 'studio_event')`)
	if err != nil {
		t.Fatalf("read table statistics: %v", err)
	}
	out := map[string][3]int64{}
	for rows.Next() {
		var name string
		var v [3]int64
		if err := rows.Scan(&name, &v[0], &v[1], &v[2]); err != nil {
			t.Fatalf("read table statistics: %v", err)
		}
		out[name] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read table statistics: %v", err)
	}
	return wal, out
}

// bench10kHistoryRows is the highest run seq: the history rows written so far.
func bench10kHistoryRows(t testing.TB, conn *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), `/* bench10k */ SELECT coalesce(max(seq), 0) FROM studio_job_run`).Scan(&n); err != nil {
		t.Fatalf("count history: %v", err)
	}
	return n
}

func bench10kPostmasterPID(t testing.TB, conn *pgx.Conn) int {
	t.Helper()
	var dir string
	if err := conn.QueryRow(context.Background(), `/* bench10k */ SHOW data_directory`).Scan(&dir); err != nil {
		t.Logf("bench10k: no data directory, so no server CPU: %v", err)
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		t.Logf("bench10k: cannot read postmaster.pid, so no server CPU: %v", err)
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// bench10kEventRows is the newest event id (ids follow commits, so the
// difference of two reads is the rows written in between).
func bench10kEventRows(t testing.TB, probe *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := probe.QueryRow(context.Background(), `/* bench10k */ SELECT coalesce(max(id), 0) FROM studio_event`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func bench10kConnect(ctx context.Context, connString string) (*pgx.Conn, error) {
	cfg, err := db.ParseConnConfig(connString)
	if err != nil {
		return nil, err
	}
	return db.Connect(ctx, cfg, connString)
}

func bench10kInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

func bench10kDuration(t testing.TB, name string, def time.Duration) time.Duration {
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
