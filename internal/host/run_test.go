package host_test

import (
	"context"
	"errors"
	"os"

	"github.com/studioctl/studioctl/internal/host"
)

// runHost hosts h as `studioctl run` does: signals served by
// HandleSignals, Prepare, Start, then the end. A stop while it prepares
// ends cleanly, as Wait says.
func runHost(h *host.Host, ctx context.Context, sigs <-chan os.Signal) error {
	defer h.HandleSignals(sigs)()
	if err := h.Prepare(ctx); err != nil {
		if errors.Is(err, host.ErrStoppedWhilePreparing) {
			return h.Wait()
		}
		return err
	}
	if err := h.Start(ctx); err != nil {
		if errors.Is(err, host.ErrStoppedWhilePreparing) {
			return h.Wait() // a stop while it waited out a database error
		}
		return err
	}
	return h.Wait()
}

// prepareStart is Prepare then Start.
func prepareStart(ctx context.Context, h *host.Host) error {
	if err := h.Prepare(ctx); err != nil {
		return err
	}
	return h.Start(ctx)
}
