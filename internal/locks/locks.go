// Package locks is a ShedLock-compatible lock provider for PostgreSQL
// (SPEC §4): the same table, the same statements in database time, so Go and
// Java processes can share locks. It also has the operator side: list,
// inspect and release.
package locks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/lockname"
)

// MaxNameChars is the length of ShedLock's name column, VARCHAR(64): 64
// characters, not bytes (a German or Japanese name takes more bytes).
const MaxNameChars = lockname.MaxChars

// MaxLockedByChars is the length of ShedLock's locked_by column,
// VARCHAR(255), in characters.
const MaxLockedByChars = 255

// now is ShedLock's database-time expression.
const now = "timezone('utc', CURRENT_TIMESTAMP)"

var (
	// ErrHeldElsewhere: the lock is held by someone else (or by us, unexpired).
	ErrHeldElsewhere = errors.New("lock is held elsewhere")
	// ErrLockLost: an extend found the lock gone (expired or taken over).
	ErrLockLost = errors.New("lock was lost")
	// ErrLockUsed: a lock object was used after Unlock or a successful Extend.
	ErrLockUsed = errors.New("lock object already used: it is single-use after unlock or extend")
	// ErrInvalid marks bad arguments.
	ErrInvalid = lockname.ErrInvalid
)

// Querier is the part of a pool, connection or transaction the package uses.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Provider takes, extends and releases locks as one holder (locked_by).
type Provider struct {
	q        Querier
	table    Table
	lockedBy string
	fenced   bool // Fenced: acquireSQL advances the lock's token

	acquireSQL, extendSQL, unlockSQL, giveBackSQL string
}

// FenceTable holds each lock's fencing token (migration 00017,
// docs/fencing.md).
const FenceTable = "studio_fence"

// Fenced makes p advance a lock's fencing token (FenceTable) in the
// statement that takes the lock, and returns p: each Lock's Token is then
// strictly greater than every earlier holder's token of the same lock.
// The ShedLock table is unchanged. Without Fenced (a database with the
// ShedLock table only) Token is 0. Call it before first use.
func (p *Provider) Fenced() *Provider {
	if !p.fenced {
		p.fenced = true
		p.acquireSQL = "WITH l AS (" + p.acquireSQL + " RETURNING " + col(p.table.NameCol) + " AS lock_name)" +
			" INSERT INTO " + FenceTable + " AS f (lock_name, token) SELECT lock_name, 1 FROM l" +
			" ON CONFLICT (lock_name) DO UPDATE SET token = f.token + 1, updated_at = now() RETURNING token"
	}
	return p
}

// NewProvider returns a provider over q for holder lockedBy (the replica
// id: unique per process, never a bare host name). It does not touch the
// database; call CheckSchema before first use.
func NewProvider(q Querier, table Table, lockedBy string) (*Provider, error) {
	if err := table.Validate(); err != nil {
		return nil, err
	}
	if lockedBy == "" {
		return nil, fmt.Errorf("%w: locked_by must not be empty", ErrInvalid)
	}
	if err := validText("locked_by", lockedBy, MaxLockedByChars); err != nil {
		return nil, err
	}
	p := &Provider{q: q, table: table, lockedBy: lockedBy}
	tbl, name, until, at, by := table.ident(), col(table.NameCol), col(table.LockUntil), col(table.LockedAt), col(table.LockedBy)
	atMost := now + " + make_interval(secs => $2)"
	// One statement, one round trip, for a new row and for an expired one.
	p.acquireSQL = "INSERT INTO " + tbl + "(" + name + ", " + until + ", " + at + ", " + by + ") VALUES($1, " + atMost + ", " + now + ", $3)" +
		" ON CONFLICT (" + name + ") DO UPDATE SET " + until + " = " + atMost + ", " + at + " = " + now + ", " + by + " = $3" +
		" WHERE " + tbl + "." + name + " = $1 AND " + tbl + "." + until + " <= " + now
	p.extendSQL = "UPDATE " + tbl + " SET " + until + " = " + atMost +
		" WHERE " + name + " = $1 AND " + by + " = $3 AND " + until + " > " + now
	atLeast := at + " + make_interval(secs => $2)"
	p.unlockSQL = "UPDATE " + tbl + " SET " + until + " = CASE WHEN " + atLeast + " > " + now + " THEN " + atLeast + " ELSE " + now + " END" +
		" WHERE " + name + " = $1 AND " + by + " = $3"
	// A try whose answer was lost is given back only if it took the row:
	// this holder's, still held, with lock_until exactly locked_at +
	// the try's atMostFor (what the acquire writes; an unlock or an
	// extension changes it), taken no earlier than the try was sent ($4:
	// seconds since then, with a slack). No run ran under it: it ends now.
	p.giveBackSQL = "UPDATE " + tbl + " SET " + until + " = " + now +
		" WHERE " + name + " = $1 AND " + by + " = $3 AND " + until + " > " + now +
		" AND " + until + " = " + at + " + make_interval(secs => $2)" +
		" AND " + at + " >= " + now + " - make_interval(secs => $4)"
	return p, nil
}

// LockedBy is this provider's holder id.
func (p *Provider) LockedBy() string { return p.lockedBy }

// Table is the lock table this provider uses.
func (p *Provider) Table() Table { return p.table }

// CheckSchema verifies the lock table for this holder (CheckTable), without
// its warnings.
func (p *Provider) CheckSchema(ctx context.Context) error {
	_, err := CheckTable(ctx, p.q, p.table, p.lockedBy)
	return err
}

// seconds renders d as seconds with millisecond precision, as ShedLock does.
func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// ValidateName checks a lock name as ShedLock's VARCHAR(64) takes it
// (lockname.Validate): not empty, valid UTF-8 without NUL, at most 64
// characters (runes, not bytes).
func ValidateName(name string) error { return lockname.Validate(name) }

// validText checks a value for a VARCHAR(max) column (lockname.ValidText).
func validText(what, s string, max int) error { return lockname.ValidText(what, s, max) }

func validateDurations(atMostFor, atLeastFor time.Duration) error {
	if atMostFor < time.Millisecond {
		return fmt.Errorf("%w: lockAtMostFor must be positive (at least 1ms), got %v", ErrInvalid, atMostFor)
	}
	if atLeastFor < 0 {
		return fmt.Errorf("%w: lockAtLeastFor must not be negative, got %v", ErrInvalid, atLeastFor)
	}
	if atLeastFor > atMostFor {
		return fmt.Errorf("%w: lockAtLeastFor %v is longer than lockAtMostFor %v", ErrInvalid, atLeastFor, atMostFor)
	}
	return nil
}

// TryLock takes the lock name for atMostFor in one round trip. It returns
// ErrHeldElsewhere when another holder has it (or this holder, unexpired).
// atLeastFor is applied at Unlock.
func (p *Provider) TryLock(ctx context.Context, name string, atMostFor, atLeastFor time.Duration) (*Lock, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := validateDurations(atMostFor, atLeastFor); err != nil {
		return nil, err
	}
	sent := time.Now()
	if p.fenced {
		var token int64
		err := p.q.QueryRow(ctx, p.acquireSQL, name, seconds(atMostFor), p.lockedBy).Scan(&token)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrHeldElsewhere
		}
		if err != nil {
			return nil, p.acquireFailed(name, atMostFor, atLeastFor, sent, err)
		}
		return &Lock{p: p, name: name, atLeastFor: atLeastFor, token: token}, nil
	}
	tag, err := p.q.Exec(ctx, p.acquireSQL, name, seconds(atMostFor), p.lockedBy)
	if err != nil {
		return nil, p.acquireFailed(name, atMostFor, atLeastFor, sent, err)
	}
	if tag.RowsAffected() == 0 {
		return nil, ErrHeldElsewhere
	}
	return &Lock{p: p, name: name, atLeastFor: atLeastFor}, nil
}

// MaybeHeldError is TryLock's error when its statement may have taken the
// lock all the same: the request reached the server and the answer was
// lost (db.OutcomeUnknown). The lock, if taken, is held until its
// atMostFor unless this holder gives it back: Lock.Unlock (or Release)
// ends it now if that try took the row, and changes nothing otherwise: a
// row of another holder, this holder's earlier lock (its minimum gap
// kept), a row taken before the try was sent (a predecessor process with
// the same id), an extended one. Give it back before this holder's next
// try of the same name: a later acquisition within the try's slack would
// look the same.
type MaybeHeldError struct {
	Lock *Lock
	Err  error
}

func (e *MaybeHeldError) Error() string {
	return e.Err.Error() + " (the lock may have been taken: the answer was lost)"
}

func (e *MaybeHeldError) Unwrap() error { return e.Err }

// acquireFailed is TryLock's error for err: a MaybeHeldError when the
// statement, sent at sent, may have run.
func (p *Provider) acquireFailed(name string, atMostFor, atLeastFor time.Duration, sent time.Time, err error) error {
	err = fmt.Errorf("acquire lock %q: %w", name, err)
	if !db.OutcomeUnknown(err) {
		return err
	}
	return &MaybeHeldError{Lock: &Lock{p: p, name: name, atLeastFor: atLeastFor, maybe: &maybeTry{atMostFor: atMostFor, sent: sent}}, Err: err}
}

// maybeTry is what a lock of a try whose answer was lost knows of the try.
type maybeTry struct {
	atMostFor time.Duration
	sent      time.Time // just before the request was sent (monotonic)
}

// giveBackSlack widens the window a lost try's row may have been taken
// in: the database's clock and this process's measure the same time
// apart by little more than a statement's round trip.
const giveBackSlack = 500 * time.Millisecond

// Lock is one acquired lock. It is single-use: after Unlock, or after an
// Extend that reached the database, further calls return ErrLockUsed.
type Lock struct {
	p          *Provider
	name       string
	atLeastFor time.Duration
	token      int64     // the fencing token; 0 when the provider is not Fenced
	maybe      *maybeTry // a try whose answer was lost (MaybeHeldError)

	mu   sync.Mutex
	used bool
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Token is the lock's fencing token (Fenced): strictly greater than the
// token of every earlier holder of this lock; the same through Extend. 0
// when the provider is not fenced.
func (l *Lock) Token() int64 { return l.token }

// Extend moves lock_until to now + atMostFor while this holder still has the
// lock, and returns the new lock object (this one becomes invalid).
// ErrLockLost means the lock expired or changed hands.
func (l *Lock) Extend(ctx context.Context, atMostFor, atLeastFor time.Duration) (*Lock, error) {
	if err := validateDurations(atMostFor, atLeastFor); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used {
		return nil, ErrLockUsed
	}
	tag, err := l.p.q.Exec(ctx, l.p.extendSQL, l.name, seconds(atMostFor), l.p.lockedBy)
	if err != nil {
		// Not known either way: the caller may try again.
		return nil, fmt.Errorf("extend lock %q: %w", l.name, err)
	}
	l.used = true
	if tag.RowsAffected() == 0 {
		return nil, fmt.Errorf("extend lock %q: %w", l.name, ErrLockLost)
	}
	return &Lock{p: l.p, name: l.name, atLeastFor: atLeastFor, token: l.token}, nil
}

// Unlock ends the lock, keeping it until locked_at + atLeastFor if that is
// still ahead.
func (l *Lock) Unlock(ctx context.Context) error {
	return l.unlock(ctx, l.atLeastFor, "unlock")
}

// Release ends the lock now, whatever its atLeastFor: for a holder that took
// the lock and then found it had nothing to do (the tick already ran), so
// the lock's minimum gap must not hold the next tick back. One statement,
// the same as Unlock's with no minimum.
func (l *Lock) Release(ctx context.Context) error {
	return l.unlock(ctx, 0, "release")
}

func (l *Lock) unlock(ctx context.Context, atLeastFor time.Duration, verb string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used {
		return ErrLockUsed
	}
	if m := l.maybe; m != nil {
		if _, err := l.p.q.Exec(ctx, l.p.giveBackSQL, l.name, seconds(m.atMostFor), l.p.lockedBy, seconds(time.Since(m.sent)+giveBackSlack)); err != nil {
			return fmt.Errorf("%s lock %q: %w", verb, l.name, err)
		}
		l.used = true
		return nil
	}
	if _, err := l.p.q.Exec(ctx, l.p.unlockSQL, l.name, seconds(atLeastFor), l.p.lockedBy); err != nil {
		return fmt.Errorf("%s lock %q: %w", verb, l.name, err)
	}
	l.used = true
	return nil
}
