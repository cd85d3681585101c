package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/liveness"
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
	// ErrChanged: the lock changed between read and release.
	ErrChanged = errors.New("lock changed since it was read")
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
	return "SELECT l." + col(t.NameCol) + ", l." + col(t.LockedBy) + ", l." + col(t.LockedAt) + ", l." + col(t.LockUntil) +
		", EXTRACT(EPOCH FROM (l." + col(t.LockUntil) + " - " + now + "))::float8, " + known + ", " + live +
		" FROM " + t.ident() + " l" + join + where + " ORDER BY l." + col(t.NameCol)
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
		in.Remaining = time.Duration(remaining * float64(time.Second)).Round(time.Millisecond)
		in.HolderState, in.State = judge(known, live, in.Remaining)
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read locks from %s: %w", a.table.Name, err)
	}
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
	Changed bool      // false when the lock was already free
	Audited bool      // false when the studio_audit table is absent (a plain ShedLock database)
	Before  Info      //
	Until   time.Time // the new lock_until (database now)
}

// Release ends the lock read as req.Info: a compare-and-set on name,
// locked_by and locked_at, so a lock that changed hands since is not
// touched (ErrChanged). It sets lock_until to database now, never deletes
// the row, and writes an audit row in the same transaction.
func (a *Admin) Release(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, req ReleaseRequest) (ReleaseResult, error) {
	in := req.Info
	res := ReleaseResult{Before: in}
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
	stmt := "UPDATE " + t.ident() + " SET " + col(t.LockUntil) + " = " + now +
		" WHERE " + col(t.NameCol) + " = $1 AND " + col(t.LockedBy) + " = $2 AND " + col(t.LockedAt) + " = $3" +
		" AND " + col(t.LockUntil) + " > " + now + " RETURNING " + col(t.LockUntil)
	var until time.Time
	err = tx.QueryRow(ctx, stmt, in.Name, in.LockedBy, in.LockedAt).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("release lock %q: %w (it was released, expired or taken by another holder); nothing changed, read it again", in.Name, ErrChanged)
	}
	if err != nil {
		return res, fmt.Errorf("release lock %q: %w", in.Name, err)
	}
	res.Changed, res.Until = true, asUTC(until)
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
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("release lock %q: commit: %w", in.Name, err)
	}
	return res, nil
}
