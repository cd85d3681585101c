package e2e

import (
	"context"
	"os"

	"github.com/studioctl/studioctl/internal/host"
)

// runHost is what `studioctl run` does with a host: Start, then the first
// signal drains and a second stops at once, until the host has ended.
func runHost(h *host.Host, ctx context.Context, sigs <-chan os.Signal) error {
	if err := h.Start(ctx); err != nil {
		return err
	}
	draining := false
	for {
		select {
		case s := <-sigs:
			if !draining {
				draining = true
				h.Drain("signal " + s.String())
				continue
			}
			h.StopNow()
		case <-h.Done():
			return h.Wait()
		}
	}
}
