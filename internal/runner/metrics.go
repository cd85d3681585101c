package runner

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/studioctl/studioctl/internal/jobs"
)

// Per-job series (metrics.per_job, docs/metrics.md). With them every job
// has its own series of each metric, labelled job_id; without them the
// replica has one series of each (job_id=""), whatever its number of jobs.
// The failing gauge is per job in both modes: it exists only while a job
// is failing.
const (
	PerJobAuto = "auto" // per-job series up to PerJobLimit jobs
	PerJobOn   = "on"
	PerJobOff  = "off"
	// DefaultPerJobLimit is metrics.per_job_limit's default: per-job series
	// at 1,000 jobs are about 15,000 series once every job has run, a
	// scrape of 1 MB; at 10,000 they are ten times that (docs/metrics.md).
	DefaultPerJobLimit = 1000
)

// ResolvePerJob says whether a runner with n jobs keeps per-job series
// under mode (auto, on, off; "" is auto) and limit (auto's largest number
// of jobs with per-job series; 0 with auto: none).
func ResolvePerJob(mode string, limit, n int) (bool, error) {
	switch mode {
	case PerJobOn:
		return true, nil
	case PerJobOff:
		return false, nil
	case PerJobAuto, "":
		return n <= limit, nil
	}
	return false, fmt.Errorf("metrics per job %q: want auto, on or off", mode)
}

// installationJob is the job_id of the installation-level series.
const installationJob = ""

// metrics are the Prometheus series of SPEC §5.3. The runner calls
// m.<series>.WithLabelValues(job id[, outcome]).Inc() / .Observe(d); each
// series folds the job id away when per-job series are off.
type metrics struct {
	perJob   bool
	runs     runsVec
	duration durationVec
	overruns counterVec
	timeouts counterVec
	lockLost counterVec
	skipped  counterVec
	// lateness is each run's start minus its nominal time (docs/occurrences.md).
	lateness durationVec
	// failing is 1 for each job whose last run did not succeed
	// (jobs.Outcome.Failing), in both modes; a success removes the series.
	failing *failingSet
}

func newMetrics(reg prometheus.Registerer, perJob bool) (*metrics, error) {
	m := &metrics{
		perJob: perJob,
		runs: runsVec{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "studio_job_runs_total", Help: "Job runs by outcome."},
			[]string{"job_id", "outcome"})},
		duration: durationVec{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "studio_job_run_duration_seconds", Help: "Job run duration.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, []string{"job_id"})},
		overruns: newCounterVec("studio_job_overruns_total", "Runs that ended after their next fire was due.", perJob),
		timeouts: newCounterVec("studio_job_timeouts_total", "Runs cancelled at their timeout.", perJob),
		lockLost: newCounterVec("studio_job_lock_lost_total", "Runs cancelled because their lock was lost.", perJob),
		skipped:  newCounterVec("studio_job_skipped_elsewhere_total", "Ticks skipped because another replica held the lock.", perJob),
		failing: &failingSet{keys: map[string]string{}, jobs: map[string]int{}, gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "studio_job_failing",
			Help: "1 while the job's last run on this replica did not succeed (absent otherwise), with or without per-job series."}, []string{"job_id"})},
	}
	m.runs.perJob, m.runs.failing = perJob, m.failing
	m.lateness = durationVec{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "studio_job_start_lateness_seconds",
		Help:    "Job run start minus its nominal time (the due time it is the occurrence of).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"job_id"})}
	m.duration.perJob, m.lateness.perJob = perJob, perJob
	if !perJob {
		m.duration.inst = m.duration.vec.WithLabelValues(installationJob)
		m.lateness.inst = m.lateness.vec.WithLabelValues(installationJob)
	}
	mode := prometheus.NewGauge(prometheus.GaugeOpts{Name: "studio_job_metrics_per_job",
		Help: "1 when the studio_job_* series are per job (label job_id), 0 when they are for the whole replica (job_id=\"\"); metrics.per_job."})
	if perJob {
		mode.Set(1)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.runs.vec, m.duration.vec, m.overruns.vec, m.timeouts.vec, m.lockLost.vec, m.skipped.vec, m.lateness.vec, m.failing.gauge, mode} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// counterVec is a counter with a job_id label, folded to job_id="" when
// per-job series are off.
type counterVec struct {
	vec  *prometheus.CounterVec
	inst prometheus.Counter // per-job off: the only series
}

func newCounterVec(name, help string, perJob bool) counterVec {
	c := counterVec{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"job_id"})}
	if !perJob {
		c.inst = c.vec.WithLabelValues(installationJob)
	}
	return c
}

// WithLabelValues is job's counter.
func (c counterVec) WithLabelValues(job string) prometheus.Counter {
	if c.inst != nil {
		return c.inst
	}
	return c.vec.WithLabelValues(job)
}

// durationVec is the run duration histogram, folded like counterVec.
type durationVec struct {
	vec    *prometheus.HistogramVec
	perJob bool
	inst   prometheus.Observer
}

// WithLabelValues is job's histogram.
func (d durationVec) WithLabelValues(job string) prometheus.Observer {
	if !d.perJob {
		return d.inst
	}
	return d.vec.WithLabelValues(job)
}

// runsVec counts runs by job and outcome (the outcome label stays in both
// modes: five series at most without per-job series) and keeps the
// failing gauge of the job.
type runsVec struct {
	vec     *prometheus.CounterVec
	perJob  bool
	failing *failingSet
}

// WithLabelValues is the run counter of job and outcome, for the run of
// key: the job's id, or a per-cluster duty's (jobs.DutyKey), whose failing state
// is its own but whose series are the job's.
func (r runsVec) WithLabelValues(job, key, outcome string) runCounter {
	return runCounter{r: r, job: job, key: key, outcome: outcome}
}

// runCounter is one run's counter: Inc counts the run and sets (or, on a
// success, removes) its job's failing gauge.
type runCounter struct {
	r                 runsVec
	job, key, outcome string
}

// Inc counts the run.
func (c runCounter) Inc() {
	label := c.job
	if !c.r.perJob {
		label = installationJob
	}
	c.r.vec.WithLabelValues(label, c.outcome).Inc()
	if c.key != "" { // "": a run of a duty that has left this replica
		c.r.failing.set(c.job, c.key, jobs.Outcome(c.outcome).Failing())
	}
}

// failingSet is the failing gauge: a series for each job with a failing
// run key on this replica. A per-cluster job's duties fail or succeed each
// on its own; its series is there while any of them is failing, and a
// duty that moves away takes its part with it (forget).
type failingSet struct {
	gauge *prometheus.GaugeVec
	n     atomic.Int64 // len(keys), read without mu: a success with no failing job takes no lock
	mu    sync.Mutex
	keys  map[string]string // failing run key -> its job's id
	jobs  map[string]int    // job id -> its failing keys
}

// set records whether the last run of key (of job) failed.
func (f *failingSet) set(job, key string, failing bool) {
	if !failing && f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, was := f.keys[key]; was == failing {
		return
	}
	if failing {
		f.keys[key] = job
		if f.jobs[job]++; f.jobs[job] == 1 {
			f.gauge.WithLabelValues(job).Set(1)
		}
	} else {
		f.forgetLocked(key)
	}
	f.n.Store(int64(len(f.keys)))
}

// forget drops key's failing state: a duty whose cluster left this
// replica no longer fails here.
func (f *failingSet) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetLocked(key)
	f.n.Store(int64(len(f.keys)))
}

func (f *failingSet) forgetLocked(key string) {
	job, ok := f.keys[key]
	if !ok {
		return
	}
	delete(f.keys, key)
	if f.jobs[job]--; f.jobs[job] == 0 {
		delete(f.jobs, job)
		f.gauge.DeleteLabelValues(job)
	}
}

// observeLateness observes a run's start minus its nominal time (never
// below zero: a nominal time a few milliseconds after the start is on
// time). A run without a nominal time is not observed.
func (m *metrics) observeLateness(job string, d time.Duration) {
	if d > 1<<62 || d < -(1<<62) {
		return // no nominal time
	}
	m.lateness.WithLabelValues(job).Observe(max(d, 0).Seconds())
}
