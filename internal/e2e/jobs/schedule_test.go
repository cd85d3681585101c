package e2ejobs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// execution is one execution of a job as the job itself recorded it (the
// exp table), independently of studioctl's tables.
type execution struct {
	Seq        int64
	Replica    string
	Start, End time.Time
}

func (f *fixture) executions(job string, from time.Time) ([]execution, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT seq, replica, started_at, coalesce(ended_at, 'infinity') FROM exp
WHERE job_id = $1 AND started_at >= $2 ORDER BY started_at`, job, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []execution
	for rows.Next() {
		var e execution
		if err := rows.Scan(&e.Seq, &e.Replica, &e.Start, &e.End); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// waitExecutions waits until n executions of job that started at or after
// from have ended, and returns them.
func (f *fixture) waitExecutions(job string, from time.Time, n int, d time.Duration) []execution {
	f.t.Helper()
	var got []execution
	replicaproc.Eventually(f.t, d, fmt.Sprintf("%d ended executions of %s", n, job), func() error {
		list, err := f.executions(job, from)
		if err != nil {
			return err
		}
		ended := 0
		for _, e := range list {
			if e.End.Year() < 9999 {
				ended++
			}
		}
		if ended < n {
			return fmt.Errorf("%d ended executions so far", ended)
		}
		got = list
		return nil
	})
	return got
}

// stopAll drains every replica (SIGTERM) and waits for it to exit.
func stopAll(t *testing.T, ps []*replicaproc.Proc) {
	t.Helper()
	for _, p := range ps {
		p.Signal(t, syscall.SIGTERM)
	}
	for _, p := range ps {
		if code := p.WaitExit(t, 30*time.Second); code != 0 {
			t.Fatalf("replica %s exited %d after SIGTERM:\n%s", p.ID(), code, p.Stderr())
		}
	}
}

// TestSharedScheduleFixedDelayThreeReplicas is issue 9's measurement: three
// replicas, an installation job every 2s whose run takes 0.5 s, a 40 s
// window. One schedule for the installation gives a fixed delay of 2 s
// after the end of each run anywhere: 16 ± 1 runs (main, with a timer per
// replica, gave 18), every gap from an end to the next start at least
// 1.8 s, and at most one lock attempt per replica per due time.
func TestSharedScheduleFixedDelayThreeReplicas(t *testing.T) {
	const (
		every  = 2 * time.Second
		window = 40 * time.Second
	)
	f := newFixture(t, shJob("fd", "installation", every.String(), "", recordRun("0.5")))
	ids := []string{"fd-1", "fd-2", "fd-3"}
	var ps []*replicaproc.Proc
	for _, id := range ids {
		ps = append(ps, f.startReplica(id))
	}
	for _, p := range ps {
		p.WaitReady(t)
	}
	readyAt := f.dbNow()
	first := f.waitExecutions("fd", readyAt, 1, 30*time.Second)
	w0 := first[0].Start
	w1 := w0.Add(window)
	var list []execution
	replicaproc.Eventually(t, window+30*time.Second, "the window to close", func() error {
		l, err := f.executions("fd", w0)
		if err != nil {
			return err
		}
		if len(l) == 0 || !l[len(l)-1].Start.After(w1) {
			return fmt.Errorf("no execution after the window yet")
		}
		for _, e := range l {
			if e.Start.Before(w1) && e.End.Year() == 9999 {
				return fmt.Errorf("execution %d has not ended", e.Seq)
			}
		}
		list = l
		return nil
	})
	var in []execution
	for _, e := range list {
		if e.Start.Before(w1) {
			in = append(in, e)
		}
	}
	per := map[string]int{}
	minGap, sumGap := time.Duration(1<<62), time.Duration(0)
	var gaps []string
	for i, e := range list {
		per[e.Replica]++
		if i == 0 {
			continue
		}
		g := e.Start.Sub(list[i-1].End)
		minGap, sumGap = min(minGap, g), sumGap+g
		gaps = append(gaps, g.Round(time.Millisecond).String())
	}
	t.Logf("%d executions in %s (ideal 16 for a fixed delay of %s after a 0.5 s run); per replica %v", len(in), window, every, per)
	t.Logf("gaps from an end to the next start: min %s, mean %s: %s", minGap.Round(time.Millisecond),
		(sumGap / time.Duration(max(1, len(list)-1))).Round(time.Millisecond), strings.Join(gaps, " "))
	// More than the ideal is a tick that ran twice (a timer per replica
	// gave 18). Fewer is the machine's process starts: a loaded CI measured
	// 12 to 14, with gaps of 2.2 to 3.5 s on this commit and on the one
	// before the fix of the crossing read, side by side; the gaps say
	// whether the schedule stalled.
	if n := len(in); n > 17 {
		t.Errorf("%d executions in the window, want at most 16 + 1 (a tick ran twice)", n)
	}
	if mean := sumGap / time.Duration(max(1, len(list)-1)); mean > every+2*time.Second {
		t.Errorf("mean gap from an end to the next start %s, want at most %s (stalled)", mean, every+2*time.Second)
	}
	if minGap < 1800*time.Millisecond {
		t.Errorf("least gap from an end to the next start %s, want at least 1.8s (overlap or an early run)", minGap)
	}
	// Lock attempts: every tick that reached the lock is a run or a skip.
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var runs, skips int64
	if err := f.pool.QueryRow(ctx, `SELECT coalesce(sum(runs), 0), coalesce(sum(skipped_elsewhere), 0) FROM studio_job_status WHERE job_id = 'fd'`).Scan(&runs, &skips); err != nil {
		t.Fatal(err)
	}
	// Due times: one per run, plus the start, when every replica finds the
	// job never run and due at once. A replica that found the lock held
	// tries again one delay after the due time (its fallback, in case the
	// holder died); a run that ends more than a delay after its due time,
	// as slow process starts on a loaded CI made some (3.6 s gaps), so
	// costs each other replica one more attempt per delay it outlasts.
	dues := runs + 1
	var outlasted int64
	if err := f.pool.QueryRow(ctx, `SELECT coalesce(sum(floor(extract(epoch FROM finished_at - coalesce(nominal_at, started_at)) / $1)), 0)::bigint
FROM studio_job_run WHERE job_id = 'fd' AND finished_at IS NOT NULL`, every.Seconds()).Scan(&outlasted); err != nil {
		t.Fatal(err)
	}
	allowed := int64(len(ids))*dues + int64(len(ids)-1)*outlasted
	t.Logf("lock attempts: %d runs and %d skips for %d due times (%.2f attempts per due time); %d delays outlasted by runs; at most %d allowed",
		runs, skips, dues, float64(runs+skips)/float64(dues), outlasted, allowed)
	if runs+skips > allowed {
		t.Errorf("%d lock attempts for %d due times: more than one per replica per due time (and per delay a run outlasted)", runs+skips, dues)
	}
}

// TestSharedScheduleSurvivesRestarts restarts every replica twice inside
// one interval: the next run still comes one interval after the last end,
// not one interval after the restart, and not at once.
func TestSharedScheduleSurvivesRestarts(t *testing.T) {
	t.Parallel()
	const every = 30 * time.Second
	f := newFixture(t, shJob("rs", "installation", every.String(), "", recordRun("0.1")))
	ids := []string{"rs-1", "rs-2", "rs-3"}
	start := func() []*replicaproc.Proc {
		var ps []*replicaproc.Proc
		for _, id := range ids {
			ps = append(ps, f.startReplica(id))
		}
		for _, p := range ps {
			p.WaitReady(t)
		}
		return ps
	}
	ps := start()
	first := f.waitExecutions("rs", time.Time{}, 1, 30*time.Second)
	end := first[0].End
	for i := 0; i < 2; i++ {
		stopAll(t, ps)
		ps = start()
	}
	restarted := f.dbNow()
	if restarted.Sub(end) > every-5*time.Second {
		t.Fatalf("the restarts took %s, too long for an interval of %s", restarted.Sub(end), every)
	}
	list := f.waitExecutions("rs", time.Time{}, 2, every+30*time.Second)
	// The due time is the second run's nominal time, which the runner
	// records exactly, and the runner's start is its run row's: the
	// command's own start follows a process start, which a loaded CI
	// delayed 4.8 s (the end it counts from is the command's, a moment
	// before the runner's).
	var nominal, started time.Time
	replicaproc.Eventually(t, 30*time.Second, "the second run row of rs", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		return f.pool.QueryRow(ctx, `SELECT nominal_at, started_at FROM studio_job_run WHERE job_id = 'rs' AND nominal_at IS NOT NULL
ORDER BY started_at OFFSET 1 LIMIT 1`).Scan(&nominal, &started)
	})
	due, next := nominal.Sub(end), list[1].Start
	t.Logf("last end %s, restarts done %s after it; due %s after it, the runner started it %s after its due time, the command %s after it (every %s)",
		end.Format(time.RFC3339Nano), restarted.Sub(end).Round(time.Millisecond), due.Round(time.Millisecond),
		started.Sub(nominal).Round(time.Millisecond), next.Sub(nominal).Round(time.Millisecond), every)
	if due < every || due > every+2*time.Second {
		t.Errorf("the next run was due %s after the last end (its nominal time), want %s (+ at most 2s from the command's end to the runner's)", due, every)
	}
	if d := started.Sub(nominal); d < 0 || d > 2*time.Second {
		t.Errorf("the runner started the next run %s after its due time, want at once (at most 2s)", d)
	}
	if next.Before(nominal) || next.Sub(nominal) > every/2 {
		t.Errorf("the next run's command started %s after its due time, want after it and not stalled", next.Sub(nominal))
	}
}

// TestSharedScheduleMissedRuns starts a replica after both jobs' due times
// passed while no replica was up: the default runs once at start (not once
// per missed interval), missed: skip waits for last end + k × every.
func TestSharedScheduleMissedRuns(t *testing.T) {
	t.Parallel()
	const every = 10 * time.Second
	once := shJob("m-once", "installation", every.String(), "", recordRun("0.1"))
	skip := shJob("m-skip", "installation", every.String(), "", recordRun("0.1"))
	skip.Missed = "skip"
	f := newFixture(t, once, skip)
	// Both last ended 95 s ago: 9 intervals missed.
	f.exec(`INSERT INTO studio_job_schedule (job_id, last_ended_at) VALUES ('m-once', now() - interval '95 seconds'), ('m-skip', now() - interval '95 seconds')`)
	var lastEnd time.Time
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := f.pool.QueryRow(ctx, `SELECT last_ended_at FROM studio_job_schedule WHERE job_id = 'm-skip'`).Scan(&lastEnd); err != nil {
		t.Fatal(err)
	}
	p := f.startReplica("m-1")
	p.WaitReady(t)
	ready := f.dbNow()
	onceList := f.waitExecutions("m-once", time.Time{}, 1, 20*time.Second)
	skipList := f.waitExecutions("m-skip", time.Time{}, 1, 30*time.Second)
	wantSkip := lastEnd.Add(100 * time.Second) // when the replica was ready in time
	t.Logf("ready %s after the last end; m-once first ran %s after ready; m-skip first ran %s after last end + 100s",
		ready.Sub(lastEnd).Round(time.Millisecond), onceList[0].Start.Sub(ready).Round(time.Millisecond), skipList[0].Start.Sub(wantSkip).Round(time.Millisecond))
	// At once: well within the first interval (a loaded CI machine took
	// 3.2 s to start the process and record it).
	if d := onceList[0].Start.Sub(ready); d > every/2 {
		t.Errorf("m-once (missed: run-once) first ran %s after the replica was ready, want at once", d)
	}
	// Once, not once per missed interval: the second run is an interval after the first.
	onceList = f.waitExecutions("m-once", time.Time{}, 2, 30*time.Second)
	if g := onceList[1].Start.Sub(onceList[0].End); g < every-200*time.Millisecond {
		t.Errorf("m-once ran again %s after its first run's end, want %s: a missed run ran more than once", g, every)
	}
	// At last end + k × every, the first such time after the runner
	// started: k = 10 when the replica was ready within 100 s of the last
	// end, 11 when a loaded machine took longer (the 100 s mark then
	// passed while no replica was up, and is skipped too).
	// The due time is the run's nominal time, which the runner records
	// exactly: the process start that follows is the machine's (a loaded
	// CI took 3.0 s, past the 2 s this test allowed when it read the due
	// time from the job's own start).
	var nominal time.Time
	replicaproc.Eventually(t, 30*time.Second, "the first m-skip run row", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		return f.pool.QueryRow(ctx, `SELECT nominal_at FROM studio_job_run WHERE job_id = 'm-skip' AND nominal_at IS NOT NULL ORDER BY started_at LIMIT 1`).Scan(&nominal)
	})
	off := nominal.Sub(lastEnd)
	k := (off + time.Millisecond) / every
	if d := off - k*every; k < 10 || d < -time.Millisecond || d > time.Millisecond || nominal.Before(ready.Add(-4*time.Second)) {
		t.Errorf("m-skip (missed: skip) first ran for the due time %s after the last end, want the first last end + k × every (k ≥ 10) after the start", off)
	}
	if st := skipList[0].Start; st.Before(nominal) || st.Sub(ready) > every+5*time.Second {
		t.Errorf("m-skip first started %s after its due time (%s after ready), want after it and not stalled", st.Sub(nominal), st.Sub(ready))
	}
}

// TestSharedScheduleLongIntervalBenchmark is issue 9's long case, opt-in
// (STUDIO_BENCH_SCHED_LONG=1, with -timeout 60m): 5 replicas, an
// installation job every 15m, 46 minutes from the first run. On main, with
// a timer per replica and the lock's 5-minute cap, it ran 6 times where 3
// or 4 were due; with the shared schedule it runs at 0, 15, 30 and 45
// minutes: 4 times, each gap from an end to the next start 15 minutes.
func TestSharedScheduleLongIntervalBenchmark(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_SCHED_LONG") != "1" {
		t.Skip("opt-in benchmark: set STUDIO_BENCH_SCHED_LONG=1 (and -timeout 60m)")
	}
	const (
		every  = 15 * time.Minute
		window = 46 * time.Minute
	)
	f := newFixture(t, shJob("long", "installation", every.String(), "", recordRun("0.5")))
	var ps []*replicaproc.Proc
	for i := 1; i <= 5; i++ {
		ps = append(ps, f.startReplica(fmt.Sprintf("long-%d", i)))
	}
	for _, p := range ps {
		p.WaitReady(t)
	}
	first := f.waitExecutions("long", time.Time{}, 1, time.Minute)
	w0 := first[0].Start
	replicaproc.Eventually(t, window+time.Minute, "the 46-minute window", func() error {
		if now := f.dbNow(); now.Before(w0.Add(window)) {
			return fmt.Errorf("%s left", w0.Add(window).Sub(now).Round(time.Second))
		}
		return nil
	})
	list, err := f.executions("long", w0)
	if err != nil {
		t.Fatal(err)
	}
	var gaps []string
	for i := 1; i < len(list); i++ {
		gaps = append(gaps, list[i].Start.Sub(list[i-1].End).Round(time.Second).String())
	}
	t.Logf("5 replicas, every %s, %s window: %d executions (ideal 4); gaps from an end to the next start: %s", every, window, len(list), strings.Join(gaps, " "))
	if len(list) != 4 {
		t.Errorf("%d executions in %s, want 4", len(list), window)
	}
}

// TestSharedScheduleBusCutDuringARun cuts every replica's bus (and the
// other idle connections of the replicas) again and again for 6 s, starting
// during a run: the end signal of that run is lost. No two executions
// overlap, and once the bus is back the fixed delay after each end holds
// again (the replicas fall back to the database's row at each fire).
//
// Not parallel: it runs before the package's parallel tests, whose
// replicas (catch-up, backfill, drift, pause...) made a loaded CI's
// process starts slow enough to fail its bound (6.7 s).
func TestSharedScheduleBusCutDuringARun(t *testing.T) {
	const every = 2 * time.Second
	f := newFixture(t, shJob("cut", "installation", every.String(), "", recordRun("1")))
	var ps []*replicaproc.Proc
	for _, id := range []string{"cut-1", "cut-2", "cut-3"} {
		ps = append(ps, f.startReplica(id))
	}
	for _, p := range ps {
		p.WaitReady(t)
	}
	// Wait for a run in progress.
	replicaproc.Eventually(t, 30*time.Second, "a run in progress", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var n int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM exp WHERE job_id = 'cut' AND ended_at IS NULL`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("none running")
		}
		return nil
	})
	cutFrom := f.dbNow()
	killed := 0
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		var n int
		err := f.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1
  AND state = 'idle' AND query IN ('LISTEN `+"studio"+`', '-- ping')) t`, db.ApplicationName).Scan(&n)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		killed += n
		time.Sleep(100 * time.Millisecond) // the cadence of the fault, not a synchronisation
	}
	cutTo := f.dbNow()
	t.Logf("terminated %d idle replica connections (the bus among them) for %s", killed, cutTo.Sub(cutFrom).Round(time.Millisecond))
	if killed == 0 {
		t.Fatal("no bus connection was cut")
	}
	recovered := cutTo.Add(3 * time.Second)
	list := f.waitExecutions("cut", recovered, 5, time.Minute)
	all, err := f.executions("cut", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		g := all[i].Start.Sub(all[i-1].End)
		t.Logf("execution %d on %s: %s after the previous end", all[i].Seq, all[i].Replica, g.Round(time.Millisecond))
		if g < 0 {
			t.Errorf("executions %d and %d overlap", all[i-1].Seq, all[i].Seq)
		}
	}
	for i := 1; i < len(list); i++ {
		if list[i].End.Year() == 9999 {
			break
		}
		// Not before the delay (a run at once would be a second run of
		// the tick); not stalled: the next within the delay plus 3 s for
		// a loaded machine's process starts (CI runs measured 3.47 s, and
		// 6.7 s while running in parallel with the package's other tests).
		if g := list[i].Start.Sub(list[i-1].End); g < 1800*time.Millisecond || g > every+3*time.Second {
			t.Errorf("after the bus came back, execution %d started %s after the previous end, want about %s", list[i].Seq, g, every)
		}
	}
}

// TestSharedScheduleRatesBenchmark measures runs per window against the
// ideal for 3 and 10 replicas at every 1s and 2s (opt-in:
// STUDIO_BENCH_SCHED=1; docs/benchmarks.md). The ideal of a fixed delay is
// window / (every + one execution).
func TestSharedScheduleRatesBenchmark(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_SCHED") != "1" {
		t.Skip("opt-in benchmark: set STUDIO_BENCH_SCHED=1")
	}
	const window = 30 * time.Second
	for _, c := range []struct {
		n     int
		every time.Duration
	}{{3, time.Second}, {3, 2 * time.Second}, {10, time.Second}, {10, 2 * time.Second}} {
		t.Run(fmt.Sprintf("%d-replicas-every-%s", c.n, c.every), func(t *testing.T) {
			f := newFixture(t, shJob("rate", "installation", c.every.String(), "", recordRun("0.1")))
			var ps []*replicaproc.Proc
			for i := 1; i <= c.n; i++ {
				ps = append(ps, f.startReplica(fmt.Sprintf("rate-%d", i)))
			}
			for _, p := range ps {
				p.WaitReady(t)
			}
			first := f.waitExecutions("rate", f.dbNow(), 1, 30*time.Second)
			w0, w1 := first[0].Start, first[0].Start.Add(window)
			var list []execution
			replicaproc.Eventually(t, window+30*time.Second, "the window to close", func() error {
				l, err := f.executions("rate", w0)
				if err != nil {
					return err
				}
				if len(l) == 0 || !l[len(l)-1].Start.After(w1) {
					return fmt.Errorf("no execution after the window yet")
				}
				list = l
				return nil
			})
			var in, busy, minGap = 0, time.Duration(0), time.Duration(1 << 62)
			for i, e := range list {
				if e.Start.Before(w1) {
					in++
					busy += e.End.Sub(e.Start)
				}
				if i > 0 {
					minGap = min(minGap, e.Start.Sub(list[i-1].End))
				}
			}
			ideal := window.Seconds() / (c.every.Seconds() + (busy / time.Duration(max(1, in))).Seconds())
			ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
			defer cancel()
			var runs, skips int64
			if err := f.pool.QueryRow(ctx, `SELECT coalesce(sum(runs), 0), coalesce(sum(skipped_elsewhere), 0) FROM studio_job_status WHERE job_id = 'rate'`).Scan(&runs, &skips); err != nil {
				t.Fatal(err)
			}
			t.Logf("RESULT replicas=%d every=%s window=%s runs=%d ideal=%.1f ratio=%.2f min_end_to_start=%s lock_attempts_per_due=%.2f (max %d)",
				c.n, c.every, window, in, ideal, float64(in)/ideal, minGap.Round(time.Millisecond), float64(runs+skips)/float64(runs+1), c.n)
		})
	}
}
