package overdue

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/studioctl/studioctl/internal/startstop"
)

// SampleEvery is how often a replica reads the overdue jobs for its
// metrics: a scrape reads the last sample, never the database, so the
// cost is one query per replica per 15 s whatever the scrapers do.
const SampleEvery = 15 * time.Second

// sampleTimeout bounds one read.
const sampleTimeout = 10 * time.Second

// SamplerOptions configure a Sampler.
type SamplerOptions struct {
	DB Querier
	// Every is the cadence (SampleEvery when 0); Grace the grace
	// (DefaultGrace when 0).
	Every time.Duration
	Grace time.Duration
	// PerJob says whether the replica keeps per-job series
	// (metrics.per_job, docs/metrics.md); nil: it does not.
	PerJob func() bool
	Logger *slog.Logger
}

// Sampler reads the overdue jobs on a cadence and exports them as
// Prometheus series (docs/occurrences-overdue.md):
//
//   - studio_jobs_overdue: how many jobs (job and scope key) are overdue;
//   - studio_job_overdue_seconds{job_id}: with per-job series, each
//     overdue job's worst scope (absent when it is not overdue); without,
//     one series job_id="" with the worst of all (0 when none);
//   - studio_job_overdue_check_failures_total: reads that failed (the
//     series above then keep the last sample, aging).
//
// Until the first read succeeds, the first two are absent. A value is the
// sample's overdue seconds plus the time since the sample, so it grows
// between samples as the lateness does.
type Sampler struct {
	startstop.Base
	o SamplerOptions

	mu      sync.Mutex
	jobs    []Job
	at      time.Time // when jobs was read (monotonic)
	sampled bool

	failures atomic.Int64
	samples  atomic.Int64

	countDesc, secondsDesc, failuresDesc *prometheus.Desc
}

// NewSampler builds a Sampler; register it with a Prometheus registry
// and Start it.
func NewSampler(o SamplerOptions) *Sampler {
	if o.Every <= 0 {
		o.Every = SampleEvery
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler{o: o,
		countDesc: prometheus.NewDesc("studio_jobs_overdue",
			"Jobs (job and scope key) past their due time plus the grace with no run started, as studio_overdue_jobs computes it (docs/occurrences-overdue.md).", nil, nil),
		secondsDesc: prometheus.NewDesc("studio_job_overdue_seconds",
			"How long ago an overdue job was due (its worst scope key); job_id=\"\" without per-job series: the worst of all, 0 when none.", []string{"job_id"}, nil),
		failuresDesc: prometheus.NewDesc("studio_job_overdue_check_failures_total",
			"Reads of studio_overdue_jobs that failed.", nil, nil),
	}
}

// Start reads at once, then every Every, until Stop.
func (s *Sampler) Start(ctx context.Context) error {
	ctx, err := s.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start overdue sampler: %w", err)
	}
	if !s.Go(func() { s.loop(ctx) }) {
		return fmt.Errorf("start overdue sampler: %w", startstop.ErrStopped)
	}
	s.MarkStarted()
	return nil
}

func (s *Sampler) loop(ctx context.Context) {
	t := time.NewTicker(s.o.Every)
	defer t.Stop()
	for {
		if err := s.Sample(ctx); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("overdue: could not read the overdue jobs; the metric keeps the last sample", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample reads the overdue jobs once and keeps them for Collect.
func (s *Sampler) Sample(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	js, err := List(rctx, s.o.DB, s.o.Grace)
	if err != nil {
		// A read cut short by the caller (Stop) is not a failed check.
		if ctx.Err() == nil {
			s.failures.Add(1)
		}
		return err
	}
	s.mu.Lock()
	s.jobs, s.at, s.sampled = js, time.Now(), true
	s.mu.Unlock()
	s.samples.Add(1)
	return nil
}

// Samples is how many reads succeeded.
func (s *Sampler) Samples() int64 { return s.samples.Load() }

// Describe implements prometheus.Collector.
func (s *Sampler) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.countDesc
	ch <- s.secondsDesc
	ch <- s.failuresDesc
}

// Collect implements prometheus.Collector: the last sample, aged.
func (s *Sampler) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.failuresDesc, prometheus.CounterValue, float64(s.failures.Load()))
	s.mu.Lock()
	js, at, sampled := s.jobs, s.at, s.sampled
	s.mu.Unlock()
	if !sampled {
		return
	}
	age := time.Since(at).Seconds()
	ch <- prometheus.MustNewConstMetric(s.countDesc, prometheus.GaugeValue, float64(len(js)))
	if s.o.PerJob == nil || !s.o.PerJob() {
		worst := 0.0
		for _, j := range js {
			worst = max(worst, j.OverdueSeconds+age)
		}
		ch <- prometheus.MustNewConstMetric(s.secondsDesc, prometheus.GaugeValue, worst, "")
		return
	}
	per := map[string]float64{}
	for _, j := range js {
		per[j.JobID] = max(per[j.JobID], j.OverdueSeconds+age)
	}
	for id, v := range per {
		ch <- prometheus.MustNewConstMetric(s.secondsDesc, prometheus.GaugeValue, v, id)
	}
}
