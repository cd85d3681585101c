package host

import (
	"context"
	"fmt"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/replicas"
)

// A start that meets a transient database error after the wait for a
// writable primary (a restart of PostgreSQL, terminated backends, a
// promoted standby whose old primary is gone) waits it out instead of
// exiting 1 (docs/failover.md, "A fault during the start"): whatever the
// try had started is stopped, as a failed start stops it but without
// recording stopped (the next try registers again over its own row, with
// the same incarnation), and the whole start is tried again, from the
// pools to the state ready, after a backoff. A permanent error (a refused
// login, a missing privilege, a schema too new, a bad configuration)
// fails at once, as before; so does a transient one once the retries have
// gone on for Options.StartRetryFor.

// DefaultStartRetryFor is how long a start waits out transient database
// errors, from the first one: as long as a replica waits for another
// session's migration lock.
const DefaultStartRetryFor = 5 * time.Minute

// The backoff between two tries: the first after startRetryFirst, each
// next one twice as late, at most startRetryMax.
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 4 * time.Second
)

// retryingReason is what /readyz says between two tries.
const retryingReason = "starting: waiting out a database error"

// errStopWhileRetrying: a drain, a stop at once or Stop came between two
// tries of the start.
var errStopWhileRetrying = fmt.Errorf("stopped while waiting out a database error at start: %w", ErrStoppedWhilePreparing)

// withRetries runs try until it succeeds, fails for good, or the start is
// stopped. Between tries it stops what the failed try started, logs the
// retry once, and answers the probes (/livez ok, /readyz 503) on
// replica.listen while it waits.
func (h *Host) withRetries(ctx context.Context, try func(context.Context) error) error {
	for {
		err := try(ctx)
		if err == nil {
			if h.retries > 0 {
				h.log.Info("start: the database errors passed; starting went through",
					"tries", h.retries+1, "waited", time.Since(h.retryBegan).Round(time.Millisecond).String())
				h.retries = 0
				h.retryBegan = time.Time{}
			}
			return nil
		}
		if !db.IsTransient(err) || h.o.StartRetryFor < 0 || ctx.Err() != nil || h.runCtx.Err() != nil || h.lost.Load() {
			return err
		}
		if h.retryBegan.IsZero() {
			h.retryBegan = time.Now()
		}
		left := h.o.StartRetryFor - time.Since(h.retryBegan)
		if left <= 0 {
			return fmt.Errorf("%w (the start waited out database errors for %s and gave up)", err, h.o.StartRetryFor)
		}
		h.retries++
		wait := min(startRetryFirst<<min(h.retries-1, 8), startRetryMax, left)
		h.unwind()
		if err := h.pauseBeforeRetry(ctx, wait, h.scrub(err).Error(), left); err != nil {
			return err
		}
	}
}

// unwind stops what a failed try started, in the drain order and without
// recording stopped, and forgets it, so the next try builds everything
// again: the pools, the services, the HTTP listener (on the same address).
// The registry of the try stays: its row is this incarnation's, which
// the next try registers again, or the end of the start records stopped.
func (h *Host) unwind() {
	h.keepRow = true
	h.stopAll(h.stops(false))
	h.keepRow = false
	h.pool, h.leasePool, h.provider = nil, nil, nil
	h.listener, h.runner, h.store, h.leases = nil, nil, nil, nil
	h.stream, h.overdue, h.http, h.metrics, h.httpClient = nil, nil, nil, nil, nil
	h.req = newRequests()
	h.readOnly.Store(false)
	h.state.Store(replicas.StateStarting)
	h.built = false
}

// pauseBeforeRetry waits before the next try, answering the probes on
// replica.listen meanwhile; a Drain, StopNow or Stop ends it with
// errStopWhileRetrying.
func (h *Host) pauseBeforeRetry(ctx context.Context, wait time.Duration, why string, left time.Duration) error {
	listen := ""
	if srv, err := h.serveWaiting(); err == nil {
		srv.reason.Store(retryingReason + ": " + why)
		listen = srv.addr
		h.o.Listen = srv.addr // the next try listens where the probes were answered
		defer srv.stop()
	}
	h.log.Warn("start: a database error that may pass; stopped what had started, trying the start again",
		"error", why, "try", h.retries+1, "retry_in", wait.String(), "gives_up_in", left.Round(time.Second).String(), "listen", listen)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.runCtx.Done():
		return errStopWhileRetrying
	case why := <-h.drainReq:
		h.log.Info("stopping while waiting out a database error at start", "reason", why)
		return errStopWhileRetrying
	case <-h.now:
		return errStopWhileRetrying
	}
}
