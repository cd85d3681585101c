package jobstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// benchEnv reads a setting of TestHistoryStaysBounded from the environment.
func benchEnv[T any](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return x
}

// TestHistoryStaysBounded (opt-in: STUDIO_BENCH_HISTORY=1, not in CI)
// fills run history at the rate of 10,000 jobs on 1-10 s delays (2,929
// runs a second) through the real run store (Store.PutRun and Flush, the
// INSERT, the event rows and the bus messages of a flush), and runs a
// housekeeping pass (DefaultRetention) every minute, as the built-in job
// does. Every minute it logs the size of studio_job_run and studio_event
// (pg_total_relation_size: table, indexes and TOAST), their rows, and the
// pass's duration (docs/history.md has the numbers). Each run is put twice,
// started in one flush and finished in the next, so the event stream gets
// two events a run (5,858 a second) and the run table an update a run, as
// runs that span a flush do.
//
//	STUDIO_BENCH_HISTORY=1 STUDIO_BENCH_HISTORY_FOR=15m go test -run TestHistoryStaysBounded -v -timeout 2h ./internal/jobstore
//
// STUDIO_BENCH_HISTORY_FOR (default 1h), _JOBS (10000), _RATE (2929 runs
// a second) and _FAIL_EVERY (97: one run in 97 fails; 0: none) change the
// run. Failures beyond a job's newest 100 are kept for 7 days, up to 100 a
// job, so with failures the table grows on towards that bound (at one in
// 97, 1,800 rows a minute, for 9 hours) after the count's plateau.
func TestHistoryStaysBounded(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_HISTORY") != "1" {
		t.Skip("opt-in measurement: STUDIO_BENCH_HISTORY=1")
	}
	runFor := benchEnv(t, "STUDIO_BENCH_HISTORY_FOR", time.Hour, time.ParseDuration)
	nJobs := benchEnv(t, "STUDIO_BENCH_HISTORY_JOBS", 10_000, strconv.Atoi)
	rate := benchEnv(t, "STUDIO_BENCH_HISTORY_RATE", 2929, strconv.Atoi)
	failEvery := benchEnv(t, "STUDIO_BENCH_HISTORY_FAIL_EVERY", 97, strconv.Atoi)
	pool, url := newPool(t)
	ctx := t.Context()
	// The store and housekeeping each on a connection of their own, so the
	// server CPU of each is its backend's (/proc, the harness's server runs
	// here): on a shared machine wall time says little.
	storeConn, hkConn := benchConn(t, url), benchConn(t, url)
	s := jobstore.NewStore(storeConn, "bench-1", nil)
	insertReplica(t, pool, "bench-1", "ready", 0)
	beat := func() {
		if _, err := pool.Exec(ctx, `UPDATE studio_replica SET heartbeat_at = now() WHERE id = 'bench-1'`); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]string, nJobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%05d", i)
	}

	t.Logf("%d jobs, %d runs a second, one in %d failing, for %s; load average %s", nJobs, rate, failEvery, runFor, loadAvg())
	t.Logf("%6s %12s %10s %12s %10s %8s %8s %8s %8s %8s %8s %8s %8s %5s", "minute", "run table", "run rows", "event table", "event rows",
		"pass", "pass cpu", "runs", "cutoffs", "pruned", "stmts", "events", "pruned", "avac")
	var started []jobs.Run // put as running in the last flush
	next, flushes := 0, 0
	var flushTook time.Duration
	storePID, hkPID := backendPID(t, storeConn), backendPID(t, hkConn)
	storeCPU := replicaproc.CPU(storePID)
	server := parentPID(t, storePID) // the postmaster of the harness's server
	serverCPU := clusterCPU(t, server)
	begin := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for minute := 1; time.Since(begin) < runFor; minute++ {
		for range 60 {
			<-tick.C
			now := time.Now().UTC()
			for _, r := range started {
				r.Outcome, r.FinishedAt = jobs.OutcomeSucceeded, &now
				if failEvery > 0 && r.Seq%int64(failEvery) == 0 {
					r.Outcome, r.Error = jobs.OutcomeFailed, "exit status 1"
				}
				s.PutRun(r)
			}
			started = started[:0]
			for range rate {
				seq, err := s.NextSeq(ctx)
				if err != nil {
					t.Fatal(err)
				}
				r := jobs.Run{Seq: seq, JobID: ids[next], ReplicaID: "bench-1", StartedAt: now, Outcome: jobs.OutcomeRunning}
				next = (next + 1) % nJobs
				s.PutRun(r)
				started = append(started, r)
			}
			fs := time.Now()
			mustFlush(t, s)
			flushTook += time.Since(fs)
			flushes++
			beat()
		}
		hs, hkCPU := time.Now(), replicaproc.CPU(hkPID)
		p, err := jobstore.DefaultRetention.Housekeep(ctx, hkConn, "")
		took, hkCPU := time.Since(hs), replicaproc.CPU(hkPID)-hkCPU
		storeNow := replicaproc.CPU(storePID)
		storeMinute := storeNow - storeCPU
		storeCPU = storeNow
		serverNow := clusterCPU(t, server)
		serverMinute := serverNow - serverCPU
		serverCPU = serverNow
		if err != nil {
			t.Fatal(err)
		}
		var runSize, eventSize, runRows, eventRows, vacuums int64
		if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('studio_job_run'), pg_total_relation_size('studio_event'),
  (SELECT count(*) FROM studio_job_run), (SELECT count(*) FROM studio_event),
  (SELECT coalesce(sum(autovacuum_count), 0) FROM pg_stat_user_tables WHERE relname = 'studio_job_run')`).Scan(&runSize, &eventSize, &runRows, &eventRows, &vacuums); err != nil {
			t.Fatal(err)
		}
		t.Logf("%6d %8.1f MiB %10d %8.1f MiB %10d %6dms %6dms %6dms %6dms %8d %8d %6dms %8d %5d   flush %.0fms, store cpu %.1fs, server cpu %.1fs, load %s", minute, mib(runSize), runRows, mib(eventSize), eventRows,
			took.Milliseconds(), hkCPU.Milliseconds(), p.RunsTook.Milliseconds(), p.CutoffsTook.Milliseconds(), p.RunsPruned, p.RunStmts, p.EventsTook.Milliseconds(), p.EventsPruned, vacuums,
			float64(flushTook.Milliseconds())/float64(flushes), storeMinute.Seconds(), serverMinute.Seconds(), loadAvg())
		flushTook, flushes = 0, 0
		if !p.AllJobs {
			t.Errorf("minute %d: the pass stopped at its budget: %+v", minute, p)
		}
		// The bound of the design: the kept runs, the failures kept beyond
		// them, what became surplus since the pass, and the runs going.
		if bound := int64(nJobs*(jobstore.RunsKeptPerJob+jobstore.FailuresKeptPerJob) + 2*rate); runRows > bound {
			t.Errorf("minute %d: %d runs kept, more than the design's bound %d", minute, runRows, bound)
		}
	}
}

// benchConn opens a connection of its own, closed when the test ends.
func benchConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Connect(t.Context(), cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func backendPID(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := conn.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// procStat is the fields of /proc/pid/stat after the command.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+2:])
}

func parentPID(t *testing.T, pid int) int {
	t.Helper()
	f := procStat(pid)
	if len(f) < 2 {
		t.Fatalf("no /proc/%d/stat", pid)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// clusterCPU is the CPU time of the server so far: the postmaster's, that
// of its children that ended (autovacuum workers come and go), and that of
// those still running.
func clusterCPU(t *testing.T, postmaster int) time.Duration {
	t.Helper()
	f := procStat(postmaster)
	if len(f) < 15 {
		t.Fatalf("no /proc/%d/stat", postmaster)
	}
	ticks := int64(0)
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	total := time.Duration(ticks) * time.Second / 100
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", postmaster, postmaster))
	for _, k := range strings.Fields(string(kids)) {
		if pid, err := strconv.Atoi(k); err == nil {
			total += replicaproc.CPU(pid)
		}
	}
	return total
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	return string(b[:14])
}
