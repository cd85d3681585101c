package locks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/natsort"
)

// State of a lock row.
type State string

const (
	StateHeld  State = "held"  // lock_until is ahead, the holder is live or unknown
	StateFree  State = "free"  // lock_until has passed
	StateStale State = "stale" // lock_until is ahead, but the holder replica is gone
)

// HolderState of a lock's locked_by.
type HolderState string

const (
	HolderLive    HolderState = "live"    // a replica with a recent heartbeat that is not stopped
	HolderGone    HolderState = "gone"    // a known replica that is not live
	HolderUnknown HolderState = "unknown" // not a replica id (a Java host, say)
)

// Info is one row of the lock table, judged against database time.
type Info struct {
	Name        string
	LockedBy    string
	LockedAt    time.Time // UTC
	LockUntil   time.Time // UTC
	State       State
	HolderState HolderState
	Remaining   time.Duration // lock_until - now; negative when free
}

var (
	// ErrNotFound: no row with that name.
	ErrNotFound = errors.New("no such lock")
	// ErrRefused: releasing would need --force.
	ErrRefused = errors.New("refused")
	// ErrChanged: the lock changed between read and release (another
	// holder, a new locked_at, an extended lock_until). It is a refusal
	// (exit 3): the release was confirmed on values that no longer hold.
	ErrChanged = fmt.Errorf("%w: lock changed since it was read", ErrRefused)
)

// Admin is the operator's view of a lock table.
type Admin struct {
	q     Querier
	table Table
}

// NewAdmin returns an Admin over q.
func NewAdmin(q Querier, table Table) (*Admin, error) {
	if err := table.Validate(); err != nil {
		return nil, err
	}
	return &Admin{q: q, table: table}, nil
}

// CheckSchema verifies the lock table.
func (a *Admin) CheckSchema(ctx context.Context) error { return CheckSchema(ctx, a.q, a.table) }

func (a *Admin) selectSQL(withReplicas bool, where string) string {
	t := a.table
	live, known := "false", "false"
	join := ""
	if withReplicas {
		live = liveness.LiveSQL("r")
		known = "r.id IS NOT NULL"
		join = " LEFT JOIN studio_replica r ON r.id = l." + col(t.LockedBy)
	}
	at, until := clampTime("l."+col(t.LockedAt)), clampTime("l."+col(t.LockUntil))
	return "SELECT l." + col(t.NameCol) + ", l." + col(t.LockedBy) + ", " + at + ", " + until +
		", EXTRACT(EPOCH FROM (" + until + " - " + now + "))::float8, " + known + ", " + live +
		" FROM " + t.ident() + " l" + join + where
}

// clampTime is the timestamp expr, kept within the years 0001 to 9999.
// Another writer of the lock table (a Java node, a hand-made row) may store
// 'infinity', '-infinity' or a year past 9999, which PostgreSQL accepts:
// one such row made every list, show and release fail ("cannot subtract
// infinite timestamps"), pgx cannot scan an infinity into a time.Time, and
// JSON cannot show a year past 9999. Read and compared clamped, such a lock
// is shown as held until 9999-12-31 and can be released.
func clampTime(expr string) string {
	return "LEAST(GREATEST(" + expr + ", '0001-01-01 00:00:00'), '9999-12-31 23:59:59.999999')"
}

// secondsDuration converts seconds to a Duration, saturating where a
// Duration (about 292 years) cannot hold them.
func secondsDuration(sec float64) time.Duration {
	const max = float64(math.MaxInt64) / float64(time.Second)
	switch {
	case sec >= max:
		return math.MaxInt64
	case sec <= -max:
		return math.MinInt64
	}
	return time.Duration(sec * float64(time.Second))
}

func hasReplicaTable(ctx context.Context, q Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT to_regclass('studio_replica') IS NOT NULL`).Scan(&ok)
	return ok, err
}

func (a *Admin) query(ctx context.Context, where string, args ...any) ([]Info, error) {
	withReplicas, err := hasReplicaTable(ctx, a.q)
	if err != nil {
		return nil, fmt.Errorf("read locks: %w", err)
	}
	rows, err := a.q.Query(ctx, a.selectSQL(withReplicas, where), args...)
	if err != nil {
		return nil, fmt.Errorf("read locks from %s: %w", a.table.Name, err)
	}
	var out []Info
	for rows.Next() {
		var in Info
		var remaining float64
		var known, live bool
		if err := rows.Scan(&in.Name, &in.LockedBy, &in.LockedAt, &in.LockUntil, &remaining, &known, &live); err != nil {
			return nil, fmt.Errorf("read locks from %s: %w", a.table.Name, err)
		}
		in.LockedAt, in.LockUntil = asUTC(in.LockedAt), asUTC(in.LockUntil)
		in.Remaining = secondsDuration(remaining).Round(time.Millisecond)
		in.HolderState, in.State = judge(known, live, in.Remaining)
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read locks from %s: %w", a.table.Name, err)
	}
	// By name in natural order (sync-2 before sync-10), which ORDER BY
	// cannot give.
	slices.SortFunc(out, func(x, y Info) int { return natsort.Compare(x.Name, y.Name) })
	return out, nil
}

// asUTC returns the same wall-clock reading in UTC. A timestamp (without
// time zone) column comes back as a UTC wall clock already; a timestamptz
// one in the session zone, which is UTC too; this makes it explicit.
func asUTC(t time.Time) time.Time { return t.UTC() }

func judge(known, live bool, remaining time.Duration) (HolderState, State) {
	h := HolderUnknown
	switch {
	case live:
		h = HolderLive
	case known:
		h = HolderGone
	}
	switch {
	case remaining <= 0:
		return h, StateFree
	case h == HolderGone:
		return h, StateStale
	default:
		return h, StateHeld
	}
}

// List returns every row of the lock table, by name.
func (a *Admin) List(ctx context.Context) ([]Info, error) {
	return a.query(ctx, "")
}

// Get returns one lock, or ErrNotFound.
func (a *Admin) Get(ctx context.Context, name string) (Info, error) {
	if err := ValidateName(name); err != nil {
		return Info{}, err
	}
	rows, err := a.query(ctx, " WHERE l."+col(a.table.NameCol)+" = $1", name)
	if err != nil {
		return Info{}, err
	}
	if len(rows) == 0 {
		return Info{}, fmt.Errorf("lock %q: %w", name, ErrNotFound)
	}
	return rows[0], nil
}

// CheckRelease says whether in may be released: a lock whose lock_until is
// ahead and whose holder is live or unknown needs force. A free lock or one
// held by a gone replica is never refused.
func CheckRelease(in Info, force bool) error {
	if force || in.State != StateHeld {
		return nil
	}
	holder := fmt.Sprintf("live replica %q", in.LockedBy)
	if in.HolderState == HolderUnknown {
		holder = fmt.Sprintf("%q, which is not a known replica (a Java host?)", in.LockedBy)
	}
	return fmt.Errorf("%w: lock %q is held by %s for another %s; use --force to release it anyway",
		ErrRefused, in.Name, holder, in.Remaining.Round(time.Second))
}

// ReleaseRequest is a release decided on the values of in.
type ReleaseRequest struct {
	Info   Info   // as read just before
	Force  bool   // release a live lock
	Actor  string // for the audit row
	Reason string
}

// ReleaseResult says what Release changed.
type ReleaseResult struct {
	Changed bool      // false when the lock was already free (when read, or since)
	Audited bool      // false when the studio_audit table is absent (a plain ShedLock database)
	Before  Info      // as read
	Until   time.Time // the new lock_until (database now), when Changed
	// FreedSince: the lock was read held, but when the release came it had
	// been released (by another operator, or its holder) or had expired,
	// with the same holder and locked_at. Nothing changed.
	FreedSince bool
}

// Release ends the lock read as req.Info, exactly once under concurrency.
// It is a compare-and-set on every value read: name, locked_by, locked_at
// and lock_until, and lock_until must still be ahead of database now. The
// values are compared in SQL as the parameters pgx round-trips them (the
// microseconds PostgreSQL stores, a timestamp column as its UTC wall clock,
// a timestamptz one as an instant), so a timestamp(3) Java table compares
// exactly too. Of two concurrent releases of one lock, the second waits for
// the first's row lock and then finds lock_until changed.
//
// It sets lock_until to database now, never deletes the row, and writes the
// audit row in the same transaction, only when the row changed. When the
// row did not match, the same transaction reads it again to say why:
// FreedSince (free now, same holder and locked_at: exit 0, nothing to do),
// ErrChanged (another holder, a new locked_at or an extended lock_until:
// refused, read it again), or ErrNotFound (the row was deleted).
func (a *Admin) Release(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, req ReleaseRequest) (ReleaseResult, error) {
	in := req.Info
	res := ReleaseResult{Before: in}
	if err := ValidateName(in.Name); err != nil {
		return res, err
	}
	if err := CheckRelease(in, req.Force); err != nil {
		return res, err
	}
	if in.State == StateFree {
		return res, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("release lock %q: %w", in.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	t := a.table
	name, by, at, until := col(t.NameCol), col(t.LockedBy), col(t.LockedAt), col(t.LockUntil)
	stmt := "UPDATE " + t.ident() + " SET " + until + " = " + now +
		" WHERE " + name + " = $1 AND " + by + " = $2 AND " + clampTime(at) + " = $3 AND " + clampTime(until) + " = $4" +
		" AND " + until + " > " + now + " RETURNING " + until
	var after time.Time
	err = tx.QueryRow(ctx, stmt, in.Name, in.LockedBy, in.LockedAt, in.LockUntil).Scan(&after)
	if errors.Is(err, pgx.ErrNoRows) {
		return a.explainNoChange(ctx, tx, res)
	}
	if err != nil {
		return res, fmt.Errorf("release lock %q: %w", in.Name, err)
	}
	res.Changed, res.Until = true, asUTC(after)
	var hasAudit bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('studio_audit') IS NOT NULL`).Scan(&hasAudit); err != nil {
		return res, fmt.Errorf("release lock %q: %w", in.Name, err)
	}
	if hasAudit {
		err := audit.Write(ctx, tx, audit.Entry{
			Actor: req.Actor, Action: "locks.release", Target: in.Name, Reason: req.Reason,
			Detail: map[string]any{
				"table": t.Name, "locked_by": in.LockedBy, "holder_state": in.HolderState, "state": in.State,
				"locked_at": in.LockedAt, "lock_until_before": in.LockUntil, "lock_until_after": res.Until, "force": req.Force,
			},
		})
		if err != nil {
			return res, err
		}
		res.Audited = true
	}
	// Watching clients re-read at once (replicas ignore the kind).
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindLockReleased, in.Name)); err != nil {
		return res, fmt.Errorf("release lock %q: %w", in.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("release lock %q: commit: %w", in.Name, err)
	}
	return res, nil
}

// explainNoChange reads the row again after a compare-and-set that matched
// nothing and says why; it changes nothing. "Free" is judged at the
// statement's own time: the transaction's start (ShedLock's now) may come
// before the concurrent release that freed it.
func (a *Admin) explainNoChange(ctx context.Context, tx pgx.Tx, res ReleaseResult) (ReleaseResult, error) {
	in, t := res.Before, a.table
	atSQL, untilSQL := clampTime(col(t.LockedAt)), clampTime(col(t.LockUntil))
	stmt := "SELECT " + col(t.LockedBy) + ", " + atSQL + ", " + untilSQL +
		", " + col(t.LockedBy) + " = $2 AND " + atSQL + " = $3, " + col(t.LockUntil) + " <= timezone('utc', clock_timestamp())" +
		" FROM " + t.ident() + " WHERE " + col(t.NameCol) + " = $1"
	var by string
	var at, until time.Time
	var same, free bool
	err := tx.QueryRow(ctx, stmt, in.Name, in.LockedBy, in.LockedAt).Scan(&by, &at, &until, &same, &free)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("release lock %q: %w: the row was deleted since it was read; nothing changed", in.Name, ErrNotFound)
	}
	if err != nil {
		return res, fmt.Errorf("release lock %q: %w", in.Name, err)
	}
	if same && free {
		res.FreedSince = true
		return res, nil
	}
	return res, fmt.Errorf("release lock %q: %w: read held by %s since %s until %s, now held by %s since %s until %s; nothing changed, read it again",
		in.Name, ErrChanged, in.LockedBy, in.LockedAt.Format(time.RFC3339Nano), in.LockUntil.Format(time.RFC3339Nano),
		by, asUTC(at).Format(time.RFC3339Nano), asUTC(until).Format(time.RFC3339Nano))
}
