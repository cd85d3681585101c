package runner_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

func TestPerJobSeriesOrOneSeriesForTheReplicaAndAFailingGaugeForFailingJobsOnly(t *testing.T) {
	for _, c := range []struct {
		name   string
		mode   string
		perJob bool
	}{
		{"with per-job series every job has its own", runner.PerJobOn, true},
		{"without them the replica has one series of each, job_id empty", runner.PerJobOff, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newMemEnv(t)
			ok, bad := e.task(), e.task()
			o := e.options(e.job("ok", jobs.ScopeInstance, 10*time.Second, ok), e.job("bad", jobs.ScopeInstance, 10*time.Second, bad))
			o.PerJobMetrics = c.mode
			e.start(o)

			// Round 1: ok succeeds, bad fails.
			ok.waitStarts(t, 1)
			bad.waitStarts(t, 1)
			ok.finish(t, tasks.Result{})
			bad.finish(t, tasks.Result{Err: errBoom})
			e.waitIdle("ok", t0.Add(10*time.Second))
			e.waitIdle("bad", t0.Add(10*time.Second))
			fam := gather(t, e.reg)
			job := func(id string) string {
				if c.perJob {
					return id
				}
				return ""
			}
			for _, s := range []struct {
				labels map[string]string
				want   float64
			}{
				{map[string]string{"job_id": job("ok"), "outcome": "succeeded"}, 1},
				{map[string]string{"job_id": job("bad"), "outcome": "failed"}, 1},
			} {
				if got := counterValue(t, fam, "studio_job_runs_total", s.labels); got != s.want {
					t.Errorf("studio_job_runs_total%v = %v; want %v", s.labels, got, s.want)
				}
			}
			wantSeries := 1
			if c.perJob {
				wantSeries = 2
			}
			if n := len(fam["studio_job_run_duration_seconds"].GetMetric()); n != wantSeries {
				t.Errorf("%d duration histograms; want %d", n, wantSeries)
			}
			if n := len(fam["studio_job_runs_total"].GetMetric()); n != 2 {
				t.Errorf("%d studio_job_runs_total series; want 2", n)
			}
			if got := failingJobs(fam); got != "bad" {
				t.Errorf("studio_job_failing for %q; want for bad alone", got)
			}
			want := 0.0
			if c.perJob {
				want = 1
			}
			if got := fam["studio_job_metrics_per_job"].GetMetric()[0].GetGauge().GetValue(); got != want {
				t.Errorf("studio_job_metrics_per_job = %v; want %v", got, want)
			}

			// Round 2: both succeed; bad's failing series goes away.
			e.clk.Advance(10 * time.Second)
			ok.waitStarts(t, 2)
			bad.waitStarts(t, 2)
			ok.finish(t, tasks.Result{})
			bad.finish(t, tasks.Result{})
			e.waitIdle("ok", t0.Add(20*time.Second))
			e.waitIdle("bad", t0.Add(20*time.Second))
			fam = gather(t, e.reg)
			if got := failingJobs(fam); got != "" {
				t.Errorf("studio_job_failing for %q after the recovery; want none", got)
			}
			succeeded := counterValue(t, fam, "studio_job_runs_total", map[string]string{"job_id": job("ok"), "outcome": "succeeded"}) +
				counterValue(t, fam, "studio_job_runs_total", map[string]string{"job_id": job("bad"), "outcome": "succeeded"})
			if !c.perJob {
				succeeded /= 2 // the same series twice
			}
			if succeeded != 3 {
				t.Errorf("%v successes counted; want 3", succeeded)
			}
		})
	}
}

// failingJobs lists the job ids of studio_job_failing series at 1,
// comma-separated.
func failingJobs(fam map[string]*dto.MetricFamily) string {
	var ids []string
	for _, m := range fam["studio_job_failing"].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			for _, l := range m.GetLabel() {
				ids = append(ids, l.GetValue())
			}
		}
	}
	return strings.Join(ids, ",")
}

func TestAutoKeepsPerJobSeriesUpToTheLimitOfJobs(t *testing.T) {
	for _, c := range []struct {
		name    string
		mode    string
		limit   int
		builtin bool // a built-in job besides a, b and c
		want    bool
	}{
		{"auto with as many jobs as the limit", runner.PerJobAuto, 3, false, true},
		{"auto with one job more than the limit", runner.PerJobAuto, 2, false, false},
		{"a built-in job does not count", runner.PerJobAuto, 3, true, true},
		{"an empty mode is auto", "", 2, false, false},
		{"auto with the default limit", runner.PerJobAuto, 0, false, true},
		{"on above the limit", runner.PerJobOn, 1, false, true},
		{"off below the limit", runner.PerJobOff, 100, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newMemEnv(t)
			o := e.options(e.job("a", jobs.ScopeInstance, time.Minute, e.task()), e.job("b", jobs.ScopeInstance, time.Minute, e.task()),
				e.job("c", jobs.ScopeInstance, time.Minute, e.task()))
			if c.builtin {
				hk := e.job("studio-housekeeping", jobs.ScopeInstance, time.Minute, e.task())
				hk.Builtin = true
				o.Jobs = append(o.Jobs, hk)
			}
			o.PerJobMetrics, o.PerJobMetricsLimit = c.mode, c.limit
			r, err := runner.New(o)
			if err != nil {
				t.Fatal(err)
			}
			if r.PerJobMetrics() != c.want {
				t.Errorf("per-job series %v; want %v", r.PerJobMetrics(), c.want)
			}
			want := 0.0
			if c.want {
				want = 1
			}
			if got := gather(t, e.reg)["studio_job_metrics_per_job"].GetMetric()[0].GetGauge().GetValue(); got != want {
				t.Errorf("studio_job_metrics_per_job = %v; want %v", got, want)
			}
		})
	}
}

func TestAnUnknownPerJobModeIsRefused(t *testing.T) {
	e := newMemEnv(t)
	o := e.options(e.job("a", jobs.ScopeInstance, time.Minute, e.task()))
	o.PerJobMetrics = "sometimes"
	if _, err := runner.New(o); err == nil || !strings.Contains(err.Error(), `"sometimes": want auto, on or off`) {
		t.Fatalf("New: %v; want an error naming the mode", err)
	}
}

// A job whose lock cannot be had does not run, and its metrics say it
// failed: before, a tick that could not start set neither the failing
// gauge nor a failed run, so a job that never started looked healthy to
// Prometheus while jobs list counted its failures.
func TestAJobThatCannotStartIsCountedFailingInItsMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE shedlock RENAME TO shedlock_away`); err != nil {
		t.Fatal(err)
	}
	ft := e.task()
	e.start(e.options(e.job("nolock", jobs.ScopeInstallation, 10*time.Second, ft)))

	st := e.waitIdle("nolock", t0.Add(10*time.Second))
	if st.Failures != 1 || st.Runs != 0 || !strings.Contains(st.LastError, "could not start") {
		t.Fatalf("after a tick without its lock: failures %d, runs %d, last error %q; want 1, 0, could not start", st.Failures, st.Runs, st.LastError)
	}
	fam := gather(t, e.reg)
	if got := failingJobs(fam); got != "nolock" {
		t.Errorf("studio_job_failing for %q; want for nolock", got)
	}
	if got := counterValue(t, fam, "studio_job_runs_total", map[string]string{"job_id": "nolock", "outcome": "failed"}); got != 1 {
		t.Errorf("studio_job_runs_total{nolock, failed} = %v; want 1", got)
	}

	// The lock table back, the next tick runs and the gauge goes.
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE shedlock_away RENAME TO shedlock`); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{})
	e.waitIdle("nolock", t0.Add(20*time.Second))
	if got := failingJobs(gather(t, e.reg)); got != "" {
		t.Errorf("studio_job_failing for %q after a run that succeeded; want none", got)
	}
}

// A per-cluster job's failing gauge is there while any of its duties on
// this replica is failing, and a duty that moves away takes its part with
// it. Before, the duties shared one state: a success of one cleared the
// failure of another, and a failed duty that moved to another replica
// stayed failing here for good.
func TestAPerClusterJobIsFailingWhileAnyOfItsDutiesHereIs(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	r := e.start(e.options(perClusterJob(e, "duty", 10*time.Second, ft)))
	failing := func(want, when string) {
		t.Helper()
		eventually(t, "studio_job_failing for "+strconv.Quote(want)+" "+when, func() bool { return failingJobs(gather(t, e.reg)) == want })
	}

	c1, cancel1 := context.WithCancelCause(context.Background())
	defer cancel1(nil)
	r.AddCluster("c1", c1)
	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{Err: errBoom})
	e.waitIdle(jobs.DutyKey{Job: "duty", Cluster: "c1"}.String(), e.clk.Now().Add(10*time.Second))
	failing("duty", "after c1 failed")

	c2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	r.AddCluster("c2", c2)
	ft.waitStarts(t, 2)
	ft.finish(t, tasks.Result{})
	e.waitIdle(jobs.DutyKey{Job: "duty", Cluster: "c2"}.String(), e.clk.Now().Add(10*time.Second))
	if got := failingJobs(gather(t, e.reg)); got != "duty" {
		t.Fatalf("studio_job_failing for %q after c2 succeeded while c1 is failing; want for duty", got)
	}

	// c1's lease moves away, its duty idle: the failure goes with it.
	cancel1(errMovedAway)
	r.RemoveCluster("c1")
	failing("", "after c1 moved away")

	// c2's lease moves away mid-run: the run ends lock_lost, a failure of
	// a duty no longer here.
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 3)
	cancel2(errMovedAway)
	r.RemoveCluster("c2")
	wctx, wcancel := context.WithTimeout(context.Background(), waitFor)
	defer wcancel()
	r.AwaitClusters(wctx, []string{"c2"})
	ft.waitEnds(t, 3)
	failing("", "after c2 moved away mid-run")
	if got := counterValue(t, gather(t, e.reg), "studio_job_runs_total", map[string]string{"job_id": "duty", "outcome": "lock_lost"}); got != 1 {
		t.Errorf("studio_job_runs_total{duty, lock_lost} = %v; want 1", got)
	}
}
