package e2efailover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// The measurement of docs/failover.md: how often one installation run
// happens twice across a failover, with asynchronous and with synchronous
// replication. It takes minutes, so it runs only when asked:
//
//	STUDIO_BENCH_FAILOVER=1 STUDIO_BENCH_NORACE=1 go test ./internal/e2e/failover -run TestMeasureFailover -v -timeout 60m
//
// STUDIO_BENCH_FAILOVER_N sets the failovers per mode (default 10),
// STUDIO_BENCH_FAILOVER_MODES the modes (default async,sync,async-nocommit)
// and STUDIO_BENCH_FAILOVER_RUN the seconds each job's command lasts
// (default 0.05; 2 makes every run outlast the 1 s interval, so a lost
// lock row shows as an overlap).
func TestMeasureFailoverDuplicateRuns(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_FAILOVER") != "1" {
		t.Skip("a measurement: set STUDIO_BENCH_FAILOVER=1 to run it")
	}
	n := 10
	if v, err := strconv.Atoi(os.Getenv("STUDIO_BENCH_FAILOVER_N")); err == nil && v > 0 {
		n = v
	}
	modes := []string{"async", "sync", "async-nocommit"}
	if v := os.Getenv("STUDIO_BENCH_FAILOVER_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	runFor := "0.05"
	if v := os.Getenv("STUDIO_BENCH_FAILOVER_RUN"); v != "" {
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("STUDIO_BENCH_FAILOVER_RUN=%q: want seconds", v)
		}
		runFor = v
	}
	for _, mode := range modes {
		var total roundResult
		var heals []time.Duration
		roundsWithDup := 0
		for i := range n {
			t.Run(fmt.Sprintf("%s-%d", mode, i+1), func(t *testing.T) {
				r := measureRound(t, mode, runFor)
				t.Logf("%s failover %d: %d executions, %d run twice, %d overlapping pairs, %d runs missing from the new primary's history, %d jobs stalled, heal %s, latest first run %s",
					mode, i+1, r.executions, r.twice, r.overlaps, r.lostHistory, r.stalled, r.heal.Round(time.Millisecond), r.maxFirstRun.Round(time.Millisecond))
				total.executions += r.executions
				total.twice += r.twice
				total.overlaps += r.overlaps
				total.lostHistory += r.lostHistory
				total.stalled += r.stalled
				if r.maxFirstRun > total.maxFirstRun {
					total.maxFirstRun = r.maxFirstRun
				}
				heals = append(heals, r.heal)
				if r.twice > 0 || r.overlaps > 0 {
					roundsWithDup++
				}
			})
		}
		sort.Slice(heals, func(i, j int) bool { return heals[i] < heals[j] })
		if len(heals) == 0 {
			continue
		}
		t.Logf("MODE %s (commands of %s s): %d failovers, %d with a run twice or an overlap; %d runs twice, %d overlapping pairs, %d history rows lost, %d jobs stalled (latest first run %s), in %d executions; heal p50 %s max %s",
			mode, runFor, len(heals), roundsWithDup, total.twice, total.overlaps, total.lostHistory, total.stalled, total.maxFirstRun.Round(time.Millisecond), total.executions,
			heals[len(heals)/2].Round(time.Millisecond), heals[len(heals)-1].Round(time.Millisecond))
	}
}

type roundResult struct {
	executions, twice, overlaps, lostHistory int
	heal                                     time.Duration
	// stalled: jobs whose first run after the promotion came later than
	// stalledAfter; maxFirstRun: the latest first run of a job.
	stalled     int
	maxFirstRun time.Duration
}

// stalledAfter: a job that has not run this long after the promotion was
// held by a lost lock row (its interval is 1 s, its commands 2 s at most).
const stalledAfter = 10 * time.Second

// measureJobs and measureReplicas: many lock writes a second, so that a
// failover falls near one.
const (
	// twiceGap is lockAtLeastFor (0.9 s) less 100 ms for the command's own
	// start-up jitter.
	twiceGap        = 800 * time.Millisecond
	measureJobs     = 8
	measureReplicas = 3
)

// measureRound: a fresh pair in mode, three replicas running eight
// installation jobs every 1s (a command of runFor seconds), the primary stopped with
// -m immediate at a random moment, the standby promoted at once; then
// every job must run three more times. "Run twice": two executions of one
// job whose starts are closer than twiceGap, which its lock
// (lockAtLeastFor, 0.9 s after each acquisition) forbids while its rows
// survive; without a failover two starts are at least 1.05 s apart (the
// shared schedule counts 1 s from the end of the last run anywhere).
func measureRound(t *testing.T, mode, runFor string) roundResult {
	var o pairOptions
	switch mode {
	case "async":
	case "sync":
		o.Sync = true
	case "async-nocommit":
		o.Settings = []string{"synchronous_commit=off"}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	p := newPair(t, o, "")
	p.waitStandbyCaughtUp(30 * time.Second)
	expDir := t.TempDir()
	var list []jobConf
	for j := range measureJobs {
		list = append(list, jobConf{ID: fmt.Sprintf("job-%d", j), Scope: "installation", Every: "1s", Run: map[string]any{"command": recordCommand(runFor)}})
	}
	config := writeConfig(t, expDir, nil, list...)
	var procs []*replicaproc.Proc
	for i := range measureReplicas {
		procs = append(procs, studioctlBin.Start(t, replicaproc.Options{ID: fmt.Sprintf("m-%d", i), DatabaseURL: p.URL, Args: []string{"--config", config}}))
	}
	var addrs []string
	for _, r := range procs {
		addrs = append(addrs, r.WaitReady(t))
	}
	waitRuns := func(after time.Time, want int) {
		replicaproc.Eventually(t, 60*time.Second, fmt.Sprintf("every job to run %d times", want), func() error {
			n := map[string]int{}
			for _, e := range readExecutions(t, expDir) {
				if e.Start.After(after) {
					n[e.Job]++
				}
			}
			for _, j := range list {
				if n[j.ID] < want {
					return fmt.Errorf("%s: %d", j.ID, n[j.ID])
				}
			}
			return nil
		})
	}
	waitRuns(time.Time{}, 2)
	time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond) // a random moment of the 1 s cycle, not a synchronisation
	_, promoted := p.failover(nil)
	var heal time.Duration
	for _, a := range addrs {
		waitReadyz(t, a, 60*time.Second)
	}
	heal = time.Since(promoted)
	// A lock row whose unlock was lost says the job is held until
	// lockAtMostFor (60 s) after its acquisition: allow for it, and
	// measure it.
	stallLimit := jobs.LockAtMostForFloor + 30*time.Second
	replicaproc.Eventually(t, stallLimit, "every job to run once after the promotion", func() error {
		n := map[string]int{}
		for _, e := range readExecutions(t, expDir) {
			if e.Start.After(promoted) {
				n[e.Job]++
			}
		}
		for _, j := range list {
			if n[j.ID] == 0 {
				return fmt.Errorf("%s has not run", j.ID)
			}
		}
		return nil
	})
	waitRuns(promoted, 3)

	execs := readExecutions(t, expDir)
	r := roundResult{executions: len(execs), heal: heal}
	first := map[string]time.Time{}
	for _, e := range execs {
		if e.Start.After(promoted) && (first[e.Job].IsZero() || e.Start.Before(first[e.Job])) {
			first[e.Job] = e.Start
		}
	}
	for job, at := range first {
		d := at.Sub(promoted)
		if d > r.maxFirstRun {
			r.maxFirstRun = d
		}
		if d > stalledAfter {
			r.stalled++
			t.Logf("stalled: %s ran first %s after the promotion", job, d.Round(time.Millisecond))
		}
	}
	byJob := map[string][]execution{}
	for _, e := range execs {
		byJob[e.Job] = append(byJob[e.Job], e)
	}
	for _, es := range byJob {
		for i := 1; i < len(es); i++ {
			if gap := es[i].Start.Sub(es[i-1].Start); gap < twiceGap {
				r.twice++
				t.Logf("run twice: %s by %s seq %s and by %s seq %s, starts %s apart", es[i].Job, es[i-1].Replica, es[i-1].Seq, es[i].Replica, es[i].Seq, gap.Round(time.Millisecond))
			}
		}
	}
	for _, ov := range overlaps(execs, 5*time.Second) {
		r.overlaps++
		t.Logf("overlap: %s", ov)
	}
	// History: each execution's run row, on the new primary.
	pool := testPool(t, p.URL)
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	// The store flushes in batches: give the last ones a moment.
	replicaproc.Eventually(t, 10*time.Second, "the run store to flush", func() error {
		var running int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE outcome = 'running' AND job_id LIKE 'job-%'`).Scan(&running)
		if err != nil {
			return err
		}
		if running > measureJobs {
			return fmt.Errorf("%d running", running)
		}
		return nil
	})
	rows, err := pool.Query(ctx, `SELECT replica_id, seq::text FROM studio_job_run WHERE job_id LIKE 'job-%'`)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var rep, seq string
		if err := rows.Scan(&rep, &seq); err != nil {
			t.Fatal(err)
		}
		have[rep+" "+seq] = true
	}
	rows.Close()
	for _, e := range execs {
		if !have[e.Replica+" "+e.Seq] && !e.End.IsZero() && e.End.Before(time.Now().Add(-2*time.Second)) {
			r.lostHistory++
		}
	}
	return r
}
