package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pressly/goose/v3/lock"
)

// LockID is the session advisory lock goose holds while it migrates
// (goose's default): every studioctl, whichever command or replica,
// migrates under it.
const LockID = lock.DefaultLockID

// Holder is the session that holds the migration lock.
type Holder struct {
	PID         int
	Application string     // application_name ("" if the role may not see it)
	User        string     // its role
	Client      string     // its client address, "local" for a socket
	Since       *time.Time // when its current transaction or statement began, if visible
	State       string     // pg_stat_activity.state ("" if not visible)
}

// String is the holder as a log line or an error shows it.
func (h Holder) String() string {
	if h.PID == 0 {
		return "a session that could not be read (it may have let go meanwhile)"
	}
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Application != "" {
		s += fmt.Sprintf(" (application_name %q)", h.Application)
	}
	if h.User != "" {
		s += " as " + h.User
	}
	if h.Client != "" {
		s += " from " + h.Client
	}
	if h.State != "" {
		s += ", " + h.State
	}
	if h.Since != nil {
		s += " since " + h.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// dests are the Scan destinations of holderSQL's columns.
func (h *Holder) dests() []any {
	return []any{&h.PID, &h.Application, &h.User, &h.Client, &h.Since, &h.State}
}

// holderSQL finds the session holding goose's lock in this database: a
// bigint advisory lock is classid (high 32 bits) and objid (low 32 bits),
// objsubid 1.
const holderSQL = `SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.usename, ''),
  coalesce(host(a.client_addr), CASE WHEN a.pid IS NOT NULL AND a.client_port = -1 THEN 'local' ELSE '' END),
  coalesce(a.xact_start, a.query_start), coalesce(a.state, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
  AND l.pid <> pg_backend_pid()
LIMIT 1`

// ErrGaveUp: Options.GiveUp ended the wait for the migration lock; nothing
// was applied.
var ErrGaveUp = errors.New("gave up waiting for the migration lock")

// Options of UpWith.
type Options struct {
	// Waiting is called at each try (every second) that finds the lock
	// held by another session, with that session (zero if it could not be
	// read, or let go meanwhile).
	Waiting func(Holder)
	// GiveUp, once closed, ends a wait for the lock (never a migration in
	// progress): UpWith returns ErrGaveUp.
	GiveUp <-chan struct{}
}

// sessionLocker is goose's session lock (the same advisory lock, the same
// polling: every lockPollSeconds, lockPollTries times) that says who holds
// it while it waits, and stops waiting at GiveUp.
type sessionLocker struct{ o Options }

func (l sessionLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	for try := 1; ; try++ {
		var ok bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, int64(LockID)).Scan(&ok); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if ok {
			return nil
		}
		var h Holder
		if err := conn.QueryRowContext(ctx, holderSQL, int64(LockID)).Scan(h.dests()...); err != nil {
			h = Holder{}
		}
		if try >= lockPollTries {
			return fmt.Errorf("the migration lock was held by another session for %ds (now %s); nothing was applied", lockPollTries*lockPollSeconds, h)
		}
		if l.o.Waiting != nil {
			l.o.Waiting(h)
		}
		t := time.NewTimer(lockPollSeconds * time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-l.o.GiveUp:
			t.Stop()
			return ErrGaveUp
		}
	}
}

func (l sessionLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var err error
	for range 10 {
		var ok bool
		if err = conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, int64(LockID)).Scan(&ok); err == nil {
			if !ok {
				return errors.New("release the migration lock: it was not held")
			}
			return nil
		}
		t := time.NewTimer(time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("release the migration lock: %w", ctx.Err())
		}
	}
	return fmt.Errorf("release the migration lock: %w", err)
}
