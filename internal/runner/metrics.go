package runner

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series of SPEC §5.3.
type metrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	overruns *prometheus.CounterVec
	timeouts *prometheus.CounterVec
	lockLost *prometheus.CounterVec
	skipped  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "studio_job_runs_total", Help: "Job runs by outcome."},
			[]string{"job_id", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "studio_job_run_duration_seconds", Help: "Job run duration.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, []string{"job_id"}),
		overruns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "studio_job_overruns_total", Help: "Runs that ended after their next fire was due."},
			[]string{"job_id"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "studio_job_timeouts_total", Help: "Runs cancelled at their timeout."},
			[]string{"job_id"}),
		lockLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "studio_job_lock_lost_total", Help: "Runs cancelled because their lock was lost."},
			[]string{"job_id"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "studio_job_skipped_elsewhere_total", Help: "Ticks skipped because another replica held the lock."},
			[]string{"job_id"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.runs, m.duration, m.overruns, m.timeouts, m.lockLost, m.skipped} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
