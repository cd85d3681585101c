package host

import (
	"context"
	"errors"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/replicas"
)

// stop is one step of the drain sequence.
type stop struct {
	name string
	run  func()
}

// stops is the drain sequence of SPEC §8, in order (docs/services.md).
// A failed start runs the same list (drained false: no draining state and
// no delay), so whatever started is stopped and a registered replica
// records stopped either way. Each step is safe for a service that never
// started.
func (h *Host) stops(drained bool) []stop {
	return []stop{
		{"mark draining", func() {
			if !drained || h.lost.Load() || !h.registered.Load() {
				return
			}
			// Readiness fails at once.
			h.state.Store(replicas.StateDraining)
			if err := h.registry.SetState(context.Background(), replicas.StateDraining); err != nil {
				if errors.Is(err, replicas.ErrIncarnationLost) {
					h.loseID(err)
					return
				}
				h.log.Warn("could not record state draining", "error", err)
			}
		}},
		{"release leases", func() {
			if h.leases == nil {
				return
			}
			// Draining: every duty stops, every lease goes in one
			// statement, then a signal, so the others claim at once. Not
			// after a lost id: the rows are the other process's now.
			if drained && !h.lost.Load() && h.registered.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), leases.DutyStopWait+leases.StatementDeadline)
				if _, err := h.leases.ReleaseAll(ctx); err != nil {
					h.log.Warn("could not release leases; they expire after the TTL", "error", err)
				}
				cancel()
			}
			h.leases.Stop() // the loop ends; any duty left is cancelled
		}},
		{"drain delay", func() {
			if !drained || h.o.DrainDelay <= 0 {
				return
			}
			t := time.NewTimer(h.o.DrainDelay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-h.now:
			case <-h.lostNotice:
			}
		}},
		{"stream clients", func() {
			// Every /v1/events client gets reconnect and its stream ends;
			// new ones are refused (503), so a load balancer sends them to
			// another replica, where they replay from their last id.
			if h.stream != nil {
				h.stream.Reconnect()
				h.stream.Stop()
			}
		}},
		{"overdue metric", func() {
			if h.overdue != nil {
				h.overdue.Stop()
			}
		}},
		// No more claims: a stopping runner would drop a claimed trigger,
		// which another replica can still run.
		{"control requests", h.req.Stop},
		{"runner", func() {
			if h.runner != nil {
				h.runner.Stop() // waits ShutdownWait; StopNow interrupts
			}
			if h.httpClient != nil {
				h.httpClient.CloseIdleConnections() // the http jobs' keep-alive
			}
		}},
		{"run store", func() {
			if h.store != nil {
				h.store.Stop() // the last flush
			}
		}},
		{"bus", func() {
			if h.listener != nil {
				h.listener.Stop()
			}
		}},
		{"registry", func() {
			if h.registry == nil {
				return
			}
			if h.registered.Load() && !h.lost.Load() && !h.keepRow {
				h.writeStopped()
			}
			h.registry.Stop()
		}},
		{"http server", func() {
			if h.http != nil {
				h.http.Stop()
			}
		}},
		{"pool", func() {
			if h.pool != nil {
				h.pool.Close()
			}
			if h.leasePool != nil {
				h.leasePool.Close()
			}
		}},
	}
}

// stopAll runs the steps in order, each to its end.
func (h *Host) stopAll(steps []stop) {
	for _, s := range steps {
		h.log.Debug("drain step", "step", s.name)
		s.run()
	}
}

// writeStopped records state stopped, within stopStateTimeout. A
// transient error (a restart of PostgreSQL, a terminated backend) is tried
// again within that time: a stop left unwritten keeps the row live for
// GoneAfter, and a restart with the same id is refused as a live duplicate
// until then.
func (h *Host) writeStopped() {
	h.state.Store(replicas.StateStopped)
	ctx, cancel := context.WithTimeout(context.Background(), stopStateTimeout)
	defer cancel()
	wait := startRetryFirst
	for tries := 1; ; tries++ {
		err := h.registry.SetState(ctx, replicas.StateStopped)
		if err == nil {
			if tries > 1 {
				h.log.Info("recorded state stopped", "tries", tries)
			}
			return
		}
		if !db.IsTransient(err) || ctx.Err() != nil {
			h.log.Warn("could not record state stopped", "error", h.scrub(err), "tries", tries)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			h.log.Warn("could not record state stopped", "error", h.scrub(err), "tries", tries)
			return
		}
		wait = min(2*wait, time.Second)
	}
}
