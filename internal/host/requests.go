package host

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/replicas"
)

const (
	// requestTimeout bounds one claim of control requests.
	requestTimeout = 5 * time.Second
	// requestRetry is how soon a claim that failed is tried again (every
	// request it may have missed, not only the one that woke it).
	requestRetry = 2 * time.Second
)

// requests claims the control requests (studio_request rows) of this
// replica: drains of its incarnation and triggers of the jobs it hosts. A
// bus signal only wakes it; it acts on the rows it claims alone, so a
// signal that anyone can send with pg_notify does nothing without a row
// that only a role with INSERT on studio_request can write. Wake-ups are
// coalesced and handled one claim at a time on its own goroutine, off the
// bus listener's.
type requests struct {
	mu    sync.Mutex
	drain bool            // a replica.drain signal for this id arrived
	jobs  map[string]bool // job.trigger signals for these jobs arrived
	all   bool            // poll everything (start, bus resync, retry)

	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
	stopped bool

	drainsClaimed   atomic.Int64
	triggersClaimed atomic.Int64
	drainsEmpty     atomic.Int64 // replica.drain signals without a request
	triggersEmpty   atomic.Int64 // job.trigger signals without a request
}

func newRequests() *requests {
	return &requests{jobs: map[string]bool{}, kick: make(chan struct{}, 1)}
}

func (q *requests) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// wantDrain: a replica.drain signal for this replica arrived.
func (q *requests) wantDrain() {
	q.mu.Lock()
	q.drain = true
	q.mu.Unlock()
	q.wake()
}

// wantJob: a job.trigger signal for job arrived.
func (q *requests) wantJob(job string) {
	q.mu.Lock()
	q.jobs[job] = true
	q.mu.Unlock()
	q.wake()
}

// wantAll: look for every pending request of this replica (a NOTIFY may
// have been lost while the bus was down).
func (q *requests) wantAll() {
	q.mu.Lock()
	q.all = true
	q.mu.Unlock()
	q.wake()
}

// start runs the claim loop for h, whose pool, registry and runner are set;
// the first pass looks for everything, so a request made while the replica
// was starting is not lost.
func (q *requests) start(h *Host) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started || q.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	q.started, q.cancel, q.done = true, cancel, make(chan struct{})
	q.all = true
	q.wake()
	go q.loop(ctx, h)
}

// stop ends the loop and waits for it; safe before start and twice.
func (q *requests) stop() {
	q.mu.Lock()
	q.stopped = true
	cancel, done := q.cancel, q.done
	q.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (q *requests) loop(ctx context.Context, h *Host) {
	defer close(q.done)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
		case <-retry:
			retry = nil
			q.wantAll()
			continue
		}
		q.mu.Lock()
		drain, all, signalled := q.drain, q.all, q.jobs
		q.drain, q.all, q.jobs = false, false, map[string]bool{}
		q.mu.Unlock()
		if err := q.claim(ctx, h, drain, all, signalled); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("could not read control requests; trying again", "error", err, "retry_in", requestRetry.String())
			if retry == nil {
				retry = time.After(requestRetry)
			}
		}
	}
}

// claim takes what is pending: drains when drain or all, triggers of the
// signalled jobs (of every hosted job when all).
func (q *requests) claim(ctx context.Context, h *Host, drain, all bool, signalled map[string]bool) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var firstErr error
	if drain || all {
		got, err := replicas.ClaimDrain(ctx, h.pool, h.o.ID, h.registry.Incarnation())
		switch {
		case err != nil:
			firstErr = err
		case len(got) > 0:
			q.drainsClaimed.Add(int64(len(got)))
			d := got[len(got)-1]
			h.log.Info("drain requested", "request_seq", d.Seq, "requested_by", d.RequestedBy, "reason", d.Reason, "requests", len(got))
			select {
			case h.drainReq <- fmt.Sprintf("drain requested by %s (request %d)", d.RequestedBy, d.Seq):
			default:
			}
		case drain:
			q.drainsEmpty.Add(1)
			h.log.Debug("replica.drain signal without a drain request; ignored")
		}
	}
	var ids []string
	if all {
		ids = h.runner.JobIDs()
	} else {
		for id := range signalled {
			if h.runner.Hosts(id) {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return firstErr
	}
	sort.Strings(ids)
	got, err := jobs.ClaimTriggers(ctx, h.pool, ids, h.o.ID, h.registry.Incarnation())
	if err != nil {
		if firstErr == nil {
			firstErr = err
		}
		return firstErr
	}
	q.triggersClaimed.Add(int64(len(got)))
	fired := map[string]bool{}
	for _, t := range got {
		h.log.Info("job trigger requested", "job_id", t.JobID, "request_seq", t.Seq, "requested_by", t.RequestedBy, "reason", t.Reason)
		if fired[t.JobID] {
			continue // several requests of one job: one run
		}
		fired[t.JobID] = true
		if !h.runner.Trigger(t.JobID) {
			h.log.Info("job trigger ignored: the job is running or the runner is stopping", "job_id", t.JobID, "request_seq", t.Seq)
		}
	}
	for id := range signalled {
		if h.runner.Hosts(id) && !fired[id] {
			q.triggersEmpty.Add(1)
			h.log.Debug("job.trigger signal without a trigger request for this replica; ignored", "job_id", id)
		}
	}
	return firstErr
}
