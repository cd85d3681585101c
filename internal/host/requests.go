package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/startstop"
)

const (
	// requestTimeout bounds one claim of control requests.
	requestTimeout = 5 * time.Second
	// requestRetry is how soon a claim that failed is tried again (every
	// request it may have missed, not only the one that woke it).
	requestRetry = 2 * time.Second
	// requestMinGap is the least time between two claims. Anyone who can
	// connect may send signals; a flood of them is coalesced into at most
	// one claim per gap, so it cannot turn into a flood of statements.
	requestMinGap = 50 * time.Millisecond
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
	// backfill: look for pending backfill occurrences (backfill.go).
	backfill bool

	kick chan struct{}
	deps requestDeps // set before Start
	startstop.Base

	claims          atomic.Int64 // claim passes (each one or two statements)
	drainsClaimed   atomic.Int64
	triggersClaimed atomic.Int64
	drainsEmpty     atomic.Int64 // replica.drain signals without a request
	triggersEmpty   atomic.Int64 // job.trigger signals without a request
}

// requestDeps are what the claimer needs: the database, who this replica
// is, the jobs it hosts and what to do with a claimed drain.
type requestDeps struct {
	DB          *pgxpool.Pool
	ReplicaID   string
	Incarnation func() uuid.UUID // the registered incarnation
	Jobs        hostedJobs
	ReadOnly    func() bool  // the database refuses writes now: claim nothing
	Drain       func(string) // a claimed drain request, with its reason
	Logger      *slog.Logger
}

// hostedJobs is the runner as the claimer sees it.
type hostedJobs interface {
	JobIDs() []string
	Hosts(id string) bool
	Trigger(id string) bool
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

// setDeps gives the claimer what it needs; before Start.
func (q *requests) setDeps(d requestDeps) { q.deps = d }

// Start runs the claim loop; setDeps came first. The first pass looks for
// everything, so a request made while the replica was starting is not
// lost.
func (q *requests) Start(ctx context.Context) error {
	runCtx, err := q.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start control requests: %w", err)
	}
	d := q.deps
	if d.DB == nil || d.Incarnation == nil || d.Jobs == nil || d.ReadOnly == nil || d.Drain == nil || d.Logger == nil {
		q.StartFailed()
		return fmt.Errorf("start control requests: the database, incarnation, jobs, read-only check, drain and logger must be set first")
	}
	q.wantAll()
	if !q.Go(func() { q.loop(runCtx, d) }) {
		return fmt.Errorf("start control requests: %w", startstop.ErrStopped)
	}
	q.MarkStarted()
	return nil
}

func (q *requests) loop(ctx context.Context, d requestDeps) {
	var retry <-chan time.Time
	poll := time.NewTicker(backfillPollEvery) // backfill.go
	defer poll.Stop()
	var soon <-chan time.Time // backfill.go: again soon while one is pending
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
		case <-poll.C:
			q.wantBackfill()
			continue
		case <-soon:
			soon = nil
			q.wantBackfill()
			continue
		case <-retry:
			retry = nil
			q.wantAll()
			continue
		}
		if d.ReadOnly() {
			// Nothing is claimed from a read-only database; back to
			// writable, setReadOnly asks for every pending request.
			continue
		}
		q.mu.Lock()
		drain, all, signalled, backfill := q.drain, q.all, q.jobs, q.backfill || q.all
		q.drain, q.all, q.jobs, q.backfill = false, false, map[string]bool{}, false
		q.mu.Unlock()
		var err error
		if drain || all || len(signalled) > 0 { // not for a backfill's look alone
			err = q.claim(ctx, d, drain, all, signalled)
		}
		if backfill {
			pending, berr := q.claimBackfills(ctx, d) // backfill.go
			err = errors.Join(err, berr)
			if pending && soon == nil {
				soon = time.After(backfillBusyEvery)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.Logger.Warn("could not read control requests; trying again", "error", err, "retry_in", requestRetry.String())
			if retry == nil {
				retry = time.After(requestRetry)
			}
		}
		gap := time.NewTimer(requestMinGap)
		select {
		case <-ctx.Done():
			gap.Stop()
			return
		case <-gap.C:
		}
	}
}

// claim takes what is pending: drains when drain or all, triggers of the
// signalled jobs (of every hosted job when all).
func (q *requests) claim(ctx context.Context, d requestDeps, drain, all bool, signalled map[string]bool) error {
	q.claims.Add(1)
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var firstErr error
	if drain || all {
		got, err := replicas.ClaimDrain(ctx, d.DB, d.ReplicaID, d.Incarnation())
		switch {
		case err != nil:
			firstErr = err
		case len(got) > 0:
			q.drainsClaimed.Add(int64(len(got)))
			last := got[len(got)-1]
			d.Logger.Info("drain requested", "request_seq", last.Seq, "requested_by", last.RequestedBy, "reason", last.Reason, "requests", len(got))
			d.Drain(fmt.Sprintf("drain requested by %s (request %d)", last.RequestedBy, last.Seq))
		case drain:
			q.drainsEmpty.Add(1)
			d.Logger.Debug("replica.drain signal without a drain request; ignored")
		}
	}
	var ids []string
	if all {
		ids = d.Jobs.JobIDs()
	} else {
		for id := range signalled {
			if d.Jobs.Hosts(id) {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return firstErr
	}
	sort.Strings(ids)
	got, err := jobstore.ClaimTriggers(ctx, d.DB, ids, d.ReplicaID, d.Incarnation())
	if err != nil {
		if firstErr == nil {
			firstErr = err
		}
		return firstErr
	}
	q.triggersClaimed.Add(int64(len(got)))
	fired := map[string]bool{}
	for _, t := range got {
		d.Logger.Info("job trigger requested", "job_id", t.JobID, "request_seq", t.Seq, "requested_by", t.RequestedBy, "reason", t.Reason)
		if fired[t.JobID] {
			continue // several requests of one job: one run
		}
		fired[t.JobID] = true
		if !d.Jobs.Trigger(t.JobID) {
			d.Logger.Info("job trigger ignored: the job is running or the runner is stopping", "job_id", t.JobID, "request_seq", t.Seq)
		}
	}
	for id := range signalled {
		if d.Jobs.Hosts(id) && !fired[id] {
			q.triggersEmpty.Add(1)
			d.Logger.Debug("job.trigger signal without a trigger request for this replica; ignored", "job_id", id)
		}
	}
	return firstErr
}
