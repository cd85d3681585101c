package overdue_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/studioctl/studioctl/internal/overdue"
)

// series gathers reg into name{job_id} -> value ("name" alone for series
// without a label).
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

func near(got, want float64) bool { return math.Abs(got-want) < 30 }

// The series in each metrics mode (docs/metrics.md): per job, each overdue
// job's worst scope; for the replica, one job_id="" series with the worst;
// the count in both. Nothing before the first read.
func TestSamplerSeries(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	exec(t, pool,
		replica("web-1", "ready", "1 hour"), replica("web-2", "ready", "1 hour"),
		status("web-1", "sweep", "installation", "5 minutes", ""),
		status("web-1", "tmp", "instance", "50 minutes", ""),
		status("web-2", "tmp", "instance", "20 minutes", ""))
	for _, perJob := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		s := overdue.NewSampler(overdue.SamplerOptions{DB: pool, PerJob: func() bool { return perJob }})
		reg.MustRegister(s)
		if got := series(t, reg); len(got) != 1 || got["studio_job_overdue_check_failures_total"] != 0 {
			t.Fatalf("before the first read: %v, want only the failure counter at 0", got)
		}
		if err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := series(t, reg)
		if got["studio_jobs_overdue"] != 3 {
			t.Errorf("per job %v: studio_jobs_overdue = %v, want 3", perJob, got["studio_jobs_overdue"])
		}
		if perJob {
			if len(got) != 4 || !near(got["studio_job_overdue_seconds{job_id=sweep}"], 300) || !near(got["studio_job_overdue_seconds{job_id=tmp}"], 3000) {
				t.Errorf("per job: %v, want sweep about 300 and tmp (its worst replica) about 3000", got)
			}
		} else if len(got) != 3 || !near(got["studio_job_overdue_seconds{job_id=}"], 3000) {
			t.Errorf("for the replica: %v, want one job_id=\"\" series about 3000", got)
		}
	}
	// None overdue: per job, no series; for the replica, 0.
	exec(t, pool, `UPDATE studio_job_status SET next_fire_at = now() + interval '1 minute'`)
	for _, perJob := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		s := overdue.NewSampler(overdue.SamplerOptions{DB: pool, PerJob: func() bool { return perJob }})
		reg.MustRegister(s)
		if err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := series(t, reg)
		want := 2
		if !perJob {
			want = 3
			if v, ok := got["studio_job_overdue_seconds{job_id=}"]; !ok || v != 0 {
				t.Errorf("for the replica with none overdue: %v, want job_id=\"\" at 0", got)
			}
		}
		if len(got) != want || got["studio_jobs_overdue"] != 0 {
			t.Errorf("per job %v, none overdue: %v", perJob, got)
		}
	}
}

// Started, it reads on its cadence until stopped; a read that fails counts
// and keeps the last sample.
func TestSamplerReadsOnItsCadence(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	exec(t, pool, replica("web-1", "ready", "1 hour"), status("web-1", "sweep", "installation", "5 minutes", ""))
	s := overdue.NewSampler(overdue.SamplerOptions{DB: pool, Every: 20 * time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Samples() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads in 30s at a cadence of 20ms", s.Samples())
		}
		time.Sleep(5 * time.Millisecond) // a poll, not a synchronisation
	}
	s.Stop()
	s.Stop() // safe twice
	n := s.Samples()
	exec(t, pool, `DROP FUNCTION studio_overdue_jobs(interval)`)
	if err := s.Sample(context.Background()); err == nil {
		t.Fatal("a read without the function succeeded")
	}
	got := series(t, reg)
	if got["studio_job_overdue_check_failures_total"] != 1 || got["studio_jobs_overdue"] != 1 || s.Samples() != n {
		t.Fatalf("after a failed read: %v (%d reads, were %d), want 1 failure and the last sample kept", got, s.Samples(), n)
	}
}
