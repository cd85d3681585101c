package runner

// The cap on concurrent runs (runner.max_concurrent_runs) and the spread
// of a new duty's first fire: acquiring 1,000 clusters at once must not
// start 1,000 processes in one instant (issue 21; docs/jobs-processes.md,
// "How many runs at once").

import (
	"hash/fnv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxConcurrentRuns is runner.max_concurrent_runs's default: four
// runs per core of a 2-core host. A command run is two processes (the
// shim and the command); eight of them at once leave the replica's own
// goroutines (heartbeat, lease renewal, history writes) a fair share of
// two cores even when every command is busy on the CPU, while runs that
// mostly wait (http, sql, sleep) still start eight at a time.
const DefaultMaxConcurrentRuns = 8

// slots is the cap: a buffered channel with a token per run in progress
// (nil: no cap). Waiters are served in arrival order (a channel's blocked
// senders queue FIFO).
type slots struct {
	ch      chan struct{}
	waiting prometheus.Gauge
	delayed prometheus.Counter
}

func newSlots(n int) *slots {
	s := &slots{
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "studio_runner_runs_waiting",
			Help: "Runs due now that wait for a slot (runner.max_concurrent_runs)."}),
		delayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "studio_runner_runs_delayed_total",
			Help: "Runs that had to wait for a slot (runner.max_concurrent_runs) before they started."}),
	}
	if n > 0 {
		s.ch = make(chan struct{}, n)
	}
	return s
}

func (s *slots) collectors(limit int) []prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "studio_runner_max_concurrent_runs",
		Help: "runner.max_concurrent_runs: the most runs this replica starts at once (0: no cap)."})
	g.Set(float64(limit))
	return []prometheus.Collector{s.waiting, s.delayed, g}
}

// acquire takes a slot for a run of js; it waits while every slot is
// taken, until the runner stops or js's lease ends (then false). r.mu not
// held.
func (r *Runner) acquireSlot(js *jobState) bool {
	s := r.slots
	if s.ch == nil || js.job.Builtin {
		return true // no cap; studio-housekeeping never waits behind duties
	}
	select {
	case s.ch <- struct{}{}:
		return true
	default:
	}
	s.delayed.Inc()
	s.waiting.Inc()
	defer s.waiting.Dec()
	over := js.duty.ended() // nil (never) for a job that is not per cluster
	select {
	case s.ch <- struct{}{}:
		return true
	case <-r.quit:
	case <-over:
	}
	return false
}

func (r *Runner) releaseSlot(js *jobState) {
	if r.slots.ch == nil || js.job.Builtin {
		return
	}
	<-r.slots.ch
}

// spreadFrom: a replica that hosts at most spreadFrom x max_concurrent_runs
// duties starts a new one's first fire at once (the handover of a drain,
// which docs/leases.md promises at once); past that, first fires spread.
const spreadFrom = 4

// dutySpread is the default delay of a new duty's first fire: a fixed
// fraction of the duty key's hash over a window, the smaller of the
// duty's interval and one second per max_concurrent_runs duties hosted
// here (n). One cluster acquired fires (nearly) at once; 1,000 acquired
// together start about max_concurrent_runs a second, each at the same
// offset every time its key is added.
func dutySpread(maxRuns int) func(key string, every time.Duration, n int) time.Duration {
	if maxRuns <= 0 {
		maxRuns = DefaultMaxConcurrentRuns
	}
	return func(key string, every time.Duration, n int) time.Duration {
		if n <= spreadFrom*maxRuns {
			// A few rounds of the cap: they fire at once and queue for a
			// slot, so a drain's handover starts its duties at once.
			return 0
		}
		window := min(every, time.Duration(n)*time.Second/time.Duration(maxRuns))
		if window <= 0 {
			return 0
		}
		h := fnv.New64a()
		h.Write([]byte(key))
		return time.Duration(h.Sum64() % uint64(window))
	}
}
