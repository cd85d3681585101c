package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/sdnotify"
)

// notifyEvery is how often run looks at the replica's readiness and state
// for systemd (an atomic read; the readiness check reads the database only
// until it first passes).
const notifyEvery = 100 * time.Millisecond

// notifySystemd tells systemd (Type=notify, NOTIFY_SOCKET) READY=1 when the
// replica's /readyz first passes and STOPPING=1 when it leaves the ready
// state (a drain, a stop) or ends. It does nothing without NOTIFY_SOCKET.
// The returned func waits for its goroutine, which ends with the host.
func notifySystemd(ctx context.Context, h *host.Host, n *sdnotify.Notifier, log *slog.Logger) (wait func()) {
	if !n.Enabled() {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(notifyEvery)
		defer tick.Stop()
		send := func(state string) {
			if err := n.Notify(state); err != nil {
				log.Warn("systemd: could not notify", "state", state, "error", err)
			}
		}
		for ready := false; !ready; {
			select {
			case <-h.Done():
				send(sdnotify.Stopping)
				return
			case <-tick.C:
				ready, _ = h.Ready(ctx)
			}
		}
		send(sdnotify.Ready)
	waiting:
		for h.State() == replicas.StateReady {
			select {
			case <-h.Done():
				break waiting
			case <-tick.C:
			}
		}
		send(sdnotify.Stopping)
	}()
	return func() { <-done }
}
