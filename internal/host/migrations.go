package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/migrate"
)

// migrationWaitReport is how often a replica that waits for the migration
// lock says so again while the same session holds it.
const migrationWaitReport = 30 * time.Second

// errStopWhileMigrationWait: a drain, a stop at once or Stop came while
// the replica waited for another session's migration lock; it never
// registered, and applied nothing.
var errStopWhileMigrationWait = fmt.Errorf("stopped while waiting for the migration lock: %w", errStopWhileWaiting)

// migrateOn applies the migrations through pool. While another session
// holds the migration lock (another replica migrating, a `studioctl
// migrate up`, or a forgotten session), it logs who holds it, at once and
// every migrationWaitReport, and a drain, a stop at once or Stop ends the
// wait before anything is applied. A drain that comes while migrations are
// being applied waits for them, then drains the replica as it starts.
func (h *Host) migrateOn(ctx context.Context, pool *pgxpool.Pool) error {
	giveUp := make(chan struct{})
	done := make(chan struct{})
	drained := make(chan string, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case why := <-h.drainReq:
			drained <- why
			close(giveUp)
		case <-h.now:
			close(giveUp)
		case <-h.runCtx.Done():
			close(giveUp)
		case <-done:
		}
	}()
	var (
		last      migrate.Holder
		lastSaid  time.Time
		waitBegan time.Time
	)
	_, err := migrate.UpWith(ctx, pool, migrate.Options{
		GiveUp: giveUp,
		Waiting: func(holder migrate.Holder) {
			now := time.Now()
			if waitBegan.IsZero() {
				waitBegan = now
			}
			if holder.PID == last.PID && now.Sub(lastSaid) < migrationWaitReport {
				return
			}
			h.log.Warn("waiting for the migration lock: another session holds it; the replica applies the migrations and starts once it is released, "+
				"or gives up after 5 minutes (a drain or a stop ends the wait)",
				"holder", holder.String(), "waited", now.Sub(waitBegan).Round(time.Second).String())
			last, lastSaid = holder, now
		},
	})
	close(done)
	<-watched
	if !waitBegan.IsZero() && err == nil {
		h.log.Info("took the migration lock", "waited", time.Since(waitBegan).Round(time.Millisecond).String())
	}
	select {
	case why := <-drained:
		if errors.Is(err, migrate.ErrGaveUp) {
			h.log.Info("stopping while waiting for the migration lock", "reason", why)
		} else {
			h.Drain(why) // it came while the migrations ran: the replica drains once started
		}
	default:
	}
	if errors.Is(err, migrate.ErrGaveUp) {
		return errStopWhileMigrationWait
	}
	return err
}
