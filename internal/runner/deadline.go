package runner

// The deadline of a run's command (tasks.Env.Deadline): the time by which
// its job shim ends every process of the run unless this replica moves it
// later. The replica stops a run itself when it loses a lease or a lock;
// the deadline is for when it cannot, because it is paused (SIGSTOP) or
// stalled, while another replica takes over (docs/jobs-faults.md). Jobs of
// scope instance have no deadline: nobody else runs them, and a paused
// replica enforces their timeout at once when it is continued.

import (
	"sync"
	"time"

	"github.com/studioctl/studioctl/internal/leases"
)

const (
	// dutyDeadlineSlack is how long past the end of its lease's trust
	// window a duty's command may run: it covers the command's refresh
	// period (tasks.DeadlineRefreshEvery), so a lease renewed in time never
	// ends a run. leases.LeaseTTL - leases.TrustWindow (5 s) after the
	// trust window's end another replica may claim the lease; the shim's
	// SIGKILL (1 s of slack, plus at most 2 s for the processes to go)
	// ends before that.
	dutyDeadlineSlack = time.Second
	// lockDeadlineMargin is how long before lock_until an installation
	// job's command must be gone. lock_until is at least lockAtMostFor
	// after the start of the statement that took or extended the lock,
	// measured here on the monotonic clock (the database sets it at its
	// own, later, now()); the keep-alive moves it on every half of
	// lockAtMostFor (30 s at least), far sooner than this margin.
	lockDeadlineMargin = 5 * time.Second
)

// deadline returns the deadline of a run of the duty: the end of its
// lease's trust window plus dutyDeadlineSlack. It returns nil for a job
// that is not a duty, and for a duty context that does not come from a
// lease loop (leases.TrustedUntil).
// generation is the duty's lease generation, its runs' fencing token
// (docs/fencing.md); ok is false for a job that is not a duty, or a duty
// whose context is not a lease's (tests).
func (d *duty) generation() (int64, bool) {
	if d == nil {
		return 0, false
	}
	return leases.Generation(d.ctx)
}

func (d *duty) deadline() func() time.Time {
	if d == nil {
		return nil
	}
	ctx := d.ctx
	if _, ok := leases.TrustedUntil(ctx); !ok {
		return nil
	}
	return func() time.Time {
		until, _ := leases.TrustedUntil(ctx)
		return until.Add(dutyDeadlineSlack)
	}
}

// lockDeadline follows the lock of a running installation job: the start
// of the statement that took or last extended it, on the real monotonic
// clock (the job shim is real, whatever the runner's clock).
type lockDeadline struct {
	atMostFor time.Duration
	mu        sync.Mutex
	from      time.Time
}

func newLockDeadline(from time.Time, atMostFor time.Duration) *lockDeadline {
	return &lockDeadline{atMostFor: atMostFor, from: from}
}

// extended records that an extension whose statement began at from
// succeeded.
func (l *lockDeadline) extended(from time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.from = from
}

// deadline is from + lockAtMostFor - lockDeadlineMargin.
func (l *lockDeadline) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.from.Add(l.atMostFor - lockDeadlineMargin)
}

// deadlineText is the error recorded for a run whose job shim ended it at
// its deadline (tasks.ErrDeadline) before this replica stopped it itself.
func deadlineText(js *jobState) string {
	if js.duty != nil {
		return "cluster lease lost: no renewal within the trust window (the replica was paused or stalled)"
	}
	return "lock lost while running: the replica did not extend the lock in time (it was paused or stalled)"
}
