package replicas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/natsort"
)

var (
	// ErrNotFound: no replica with that id.
	ErrNotFound = errors.New("no such replica")
	// ErrLive: the replica is live; the operation would need it stopped or gone.
	ErrLive = errors.New("replica is live")
	// ErrNotLive: the replica is stopped or gone, so it cannot act on a request.
	ErrNotLive = errors.New("replica is not live")
	// ErrAhead: the row's heartbeat is more than liveness.FutureTolerance
	// ahead of database time, which no replica's heartbeat writes; only
	// ForgetForce removes it.
	ErrAhead = errors.New("heartbeat ahead of database time")
)

// Querier is the part of a pool or transaction the operator side needs.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Info is one row of studio_replica, judged in database time.
type Info struct {
	ID           string
	Host         string
	PID          int
	Version      string
	HTTPAddr     string
	State        State
	StartedAt    time.Time
	HeartbeatAt  time.Time
	StoppedAt    *time.Time
	HeartbeatAge time.Duration
	Uptime       time.Duration // database now - started_at
	RunsInFlight int           // studio_job_run rows of this replica still running
	Live         bool
	Gone         bool // not live: heartbeat older than GoneAfter, or ahead (or stopped)
	Crashed      bool // gone without state stopped
	// Ahead: the heartbeat is more than liveness.FutureTolerance ahead of
	// database time (HeartbeatAge is negative), so the row is not live. No
	// replica's heartbeat writes that (they write the database's now()): a
	// hand-made row, one a role with the replica's grants inserted, or, for
	// at most one heartbeat interval, a failover to a server whose clock is
	// behind. HeartbeatAt shows 'infinity' as 9999-12-31.
	Ahead bool
	// ClockOffset is database time minus the replica's clock, in seconds,
	// as its heartbeat last measured it (nil: not yet, or an older version).
	ClockOffset *float64
	// LastCrashAt is the last heartbeat of an earlier incarnation of this id
	// that ended without a recorded stop (a crash the restart took over; nil:
	// none recorded), LastCrashAge its age in database time, and
	// LastCrashIncarnation that incarnation (migration 00008).
	LastCrashAt          *time.Time
	LastCrashAge         time.Duration
	LastCrashIncarnation string
}

// clampTime is the timestamptz expr kept within the years 0001 to 9999.
// Any role with the replica's grants can write 'infinity' or a year past
// 9999 into studio_replica (issue 21, finding 4): pgx cannot scan an
// infinity into a time.Time, PostgreSQL 15 cannot subtract one ("cannot
// subtract infinite timestamps"), so one such row made every list fail.
// Clamped, it reads as 9999-12-31, far ahead. NULL stays NULL (GREATEST
// alone would turn it into the lower bound).
func clampTime(expr string) string {
	return "CASE WHEN " + expr + " IS NULL THEN NULL ELSE LEAST(GREATEST(" + expr + ", '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END"
}

var (
	heartbeatAt = clampTime("r.heartbeat_at")
	startedAt   = clampTime("r.started_at")
	stoppedAt   = clampTime("r.stopped_at")
	lastCrashAt = clampTime("r.last_crash_at")
)

var selectSQL = `SELECT r.id, r.host, r.pid, r.version, r.http_addr, r.state, ` + startedAt + `, ` + heartbeatAt + `, ` + stoppedAt + `,
  EXTRACT(EPOCH FROM (now() - ` + heartbeatAt + `))::float8, EXTRACT(EPOCH FROM (now() - ` + startedAt + `))::float8,
  (SELECT count(*) FROM studio_job_run j WHERE j.replica_id = r.id AND j.outcome = 'running')::int, ` + liveness.LiveSQL("r") + `, ` + liveness.AheadSQL("r") + `,
  r.clock_offset_seconds, ` + lastCrashAt + `, coalesce(EXTRACT(EPOCH FROM (now() - ` + lastCrashAt + `))::float8, 0),
  coalesce(r.last_crash_incarnation::text, '')
FROM studio_replica r`

// maxAge bounds the ages and uptimes an Info carries: a clamped
// 'infinity' is about 8,000 years away, more than a Duration (about 292
// years) holds, and at its very limit Round and negation overflow.
const maxAge = 100 * 365 * 24 * time.Hour

// secondsDuration converts seconds to a Duration within ±maxAge.
func secondsDuration(sec float64) time.Duration {
	switch limit := maxAge.Seconds(); {
	case sec >= limit:
		return maxAge
	case sec <= -limit:
		return -maxAge
	}
	return time.Duration(sec * float64(time.Second))
}

func scan(rows pgx.Rows) ([]Info, error) {
	var out []Info
	for rows.Next() {
		var in Info
		var age, uptime, crashAge float64
		var state string
		if err := rows.Scan(&in.ID, &in.Host, &in.PID, &in.Version, &in.HTTPAddr, &state, &in.StartedAt, &in.HeartbeatAt, &in.StoppedAt, &age, &uptime, &in.RunsInFlight, &in.Live, &in.Ahead, &in.ClockOffset,
			&in.LastCrashAt, &crashAge, &in.LastCrashIncarnation); err != nil {
			return nil, err
		}
		if in.LastCrashAt != nil {
			t := in.LastCrashAt.UTC()
			in.LastCrashAt = &t
			in.LastCrashAge = secondsDuration(crashAge).Round(time.Millisecond)
		}
		in.State = State(state)
		in.StartedAt, in.HeartbeatAt = in.StartedAt.UTC(), in.HeartbeatAt.UTC()
		if in.StoppedAt != nil {
			t := in.StoppedAt.UTC()
			in.StoppedAt = &t
		}
		in.HeartbeatAge = secondsDuration(age).Round(time.Millisecond)
		in.Uptime = secondsDuration(uptime).Round(time.Second)
		in.Gone = !in.Live
		in.Crashed = in.Gone && in.State != StateStopped
		out = append(out, in)
	}
	return out, rows.Err()
}

// List returns every replica, by id.
func List(ctx context.Context, q Querier) ([]Info, error) {
	rows, err := q.Query(ctx, selectSQL)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	out, err := scan(rows)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	// Natural order (web-2 before web-10), which ORDER BY cannot give.
	slices.SortFunc(out, func(a, b Info) int { return natsort.Compare(a.ID, b.ID) })
	return out, nil
}

// Get returns one replica or ErrNotFound.
func Get(ctx context.Context, q Querier, id string) (Info, error) {
	rows, err := q.Query(ctx, selectSQL+` WHERE r.id = $1`, id)
	if err != nil {
		return Info{}, fmt.Errorf("read replica %q: %w", id, err)
	}
	defer rows.Close()
	out, err := scan(rows)
	if err != nil {
		return Info{}, fmt.Errorf("read replica %q: %w", id, err)
	}
	if len(out) == 0 {
		return Info{}, fmt.Errorf("replica %q: %w", id, ErrNotFound)
	}
	return out[0], nil
}

// Forget deletes the row of a stopped or gone replica, with an audit row.
// A live replica is refused (ErrLive): deleting its row would make it think
// its id was taken over. A row whose heartbeat is ahead of database time
// is refused too (ErrAhead): it is not live, but it might be a replica's
// across a failover to a server whose clock is behind, which its next
// heartbeat heals; ForgetForce removes it.
//
// The delete is one conditional statement (the row exists and is not live
// at that moment), and the audit row records the values it deleted, so of
// any number of concurrent forgets of one id exactly one deletes and
// writes an audit row; the others find nothing (ErrNotFound).
func Forget(ctx context.Context, q Querier, id, actor, reason string) (Info, error) {
	return forget(ctx, q, id, actor, reason, false)
}

// ForgetForce is Forget that also removes a row whose heartbeat is ahead
// of database time (liveness.FutureTolerance), such as one inserted with
// 'infinity' (issue 21, finding 4). A live replica is still refused.
func ForgetForce(ctx context.Context, q Querier, id, actor, reason string) (Info, error) {
	return forget(ctx, q, id, actor, reason, true)
}

func forget(ctx context.Context, q Querier, id, actor, reason string, force bool) (Info, error) {
	tx, err := q.Begin(ctx)
	if err != nil {
		return Info{}, fmt.Errorf("forget replica %q: %w", id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var in Info
	var state string
	var age float64
	err = tx.QueryRow(ctx, `DELETE FROM studio_replica r WHERE r.id = $1 AND NOT `+liveness.LiveSQL("r")+` AND ($2 OR NOT `+liveness.AheadSQL("r")+`)
RETURNING r.id, r.host, r.pid, r.version, r.http_addr, r.state, `+startedAt+`, `+heartbeatAt+`, `+stoppedAt+`,
  EXTRACT(EPOCH FROM (now() - `+heartbeatAt+`))::float8, `+liveness.AheadSQL("r"), id, force).
		Scan(&in.ID, &in.Host, &in.PID, &in.Version, &in.HTTPAddr, &state, &in.StartedAt, &in.HeartbeatAt, &in.StoppedAt, &age, &in.Ahead)
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing deleted: say why, from the row as it is now.
		tx.Rollback(ctx)
		cur, gerr := Get(ctx, q, id)
		if gerr != nil {
			return Info{}, gerr
		}
		if cur.Live {
			return cur, fmt.Errorf("forget replica %q: %w (state %s, heartbeat %s ago): drain it, or wait until it is gone (%s without a heartbeat)",
				id, ErrLive, cur.State, cur.HeartbeatAge.Round(time.Millisecond), GoneAfter)
		}
		if cur.Ahead && !force {
			return cur, fmt.Errorf("forget replica %q: %w (%s, %s ahead; no replica writes a heartbeat ahead of the database's clock): "+
				"if the database did not just fail over to a server whose clock is behind, the row was written by hand or by a role with the replica's grants; --force removes it",
				id, ErrAhead, cur.HeartbeatAt.Format(time.RFC3339), (-cur.HeartbeatAge).Round(time.Second))
		}
		// Gone now but live when the delete looked: a race with its last
		// heartbeat; the operator may simply try again.
		return cur, fmt.Errorf("forget replica %q: it was live a moment ago; try again", id)
	}
	if err != nil {
		return Info{}, fmt.Errorf("forget replica %q: %w", id, err)
	}
	in.State = State(state)
	in.StartedAt, in.HeartbeatAt = in.StartedAt.UTC(), in.HeartbeatAt.UTC()
	if in.StoppedAt != nil {
		t := in.StoppedAt.UTC()
		in.StoppedAt = &t
	}
	in.HeartbeatAge = secondsDuration(age).Round(time.Millisecond)
	in.Gone, in.Crashed = true, in.State != StateStopped
	detail := map[string]any{"state": in.State, "host": in.Host, "pid": in.PID, "heartbeat_at": in.HeartbeatAt, "crashed": in.Crashed}
	if force {
		detail["force"] = true
	}
	if in.Ahead {
		detail["ahead"] = true
	}
	err = audit.Write(ctx, tx, audit.Entry{Actor: actor, Action: "replicas.forget", Target: id, Reason: reason, Detail: detail})
	if err != nil {
		return in, err
	}
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindReplicaState, id)); err != nil {
		return in, fmt.Errorf("forget replica %q: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return in, fmt.Errorf("forget replica %q: %w", id, err)
	}
	return in, nil
}

// Control requests (migrations/00003_requests.sql).
const (
	// RequestKindDrain is the studio_request kind of a drain.
	RequestKindDrain = "replica.drain"
	// DrainRequestTTL: a drain request that its replica has not claimed by
	// then is void.
	DrainRequestTTL = 10 * time.Minute
)

// RequestDrain asks replica id to drain: a studio_request row addressed to
// the replica's current incarnation, written in the same transaction as the
// audit row, and a replica.drain signal that wakes the replica when the
// transaction commits. The replica acts on the row, never on the signal
// alone. A stopped replica needs nothing (done=true); a gone one cannot
// hear it (ErrNotLive).
func RequestDrain(ctx context.Context, q Querier, id, actor, reason string) (in Info, done bool, err error) {
	in, err = Get(ctx, q, id)
	if err != nil {
		return in, false, err
	}
	if in.State == StateStopped {
		return in, true, nil
	}
	if in.Ahead {
		return in, false, fmt.Errorf("drain replica %q: %w: its heartbeat is %s ahead of database time (%s), which no replica writes; `replicas forget --force` removes it",
			id, ErrNotLive, (-in.HeartbeatAge).Round(time.Second), in.HeartbeatAt.Format(time.RFC3339))
	}
	if !in.Live {
		return in, false, fmt.Errorf("drain replica %q: %w: it is gone (last heartbeat %s ago) and cannot hear the request; `replicas forget` removes it", id, ErrNotLive, in.HeartbeatAge.Round(time.Second))
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return in, false, fmt.Errorf("drain replica %q: %w", id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	auditSeq, err := audit.Insert(ctx, tx, audit.Entry{Actor: actor, Action: "replicas.drain", Target: id, Reason: reason,
		Detail: map[string]any{"state": in.State, "host": in.Host, "pid": in.PID}})
	if err != nil {
		return in, false, err
	}
	// The row is written only while the replica is live, for the
	// incarnation that is live: a later process with the same id is not
	// drained by it.
	var seq int64
	err = tx.QueryRow(ctx, `
INSERT INTO studio_request (kind, target, replica_id, incarnation, requested_by, reason, audit_seq, expires_at)
SELECT $1, r.id, r.id, r.incarnation, $3, $4, $5, now() + make_interval(secs => $6)
FROM studio_replica r WHERE r.id = $2 AND `+liveness.LiveSQL("r")+`
RETURNING seq`, RequestKindDrain, id, actor, reason, auditSeq, DrainRequestTTL.Seconds()).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		tx.Rollback(ctx)
		cur, gerr := Get(ctx, q, id)
		if gerr != nil {
			return in, false, gerr
		}
		if cur.State == StateStopped {
			return cur, true, nil
		}
		return cur, false, fmt.Errorf("drain replica %q: %w: it went away while the request was written", id, ErrNotLive)
	}
	if err != nil {
		return in, false, fmt.Errorf("drain replica %q: write request: %w", id, err)
	}
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindReplicaDrain, id)); err != nil {
		return in, false, fmt.Errorf("drain replica %q: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return in, false, fmt.Errorf("drain replica %q: %w", id, err)
	}
	return in, false, nil
}

// DrainRequest is a drain request a replica claimed.
type DrainRequest struct {
	Seq         int64
	RequestedBy string
	Reason      string
}

// ClaimDrain marks every pending drain request of replica id's incarnation
// done, in one conditional UPDATE, and returns them: a request is claimed
// once, by the incarnation it names, before it expires. The replica calls
// it when a replica.drain signal arrives and after every bus reconnect; an
// empty result means the signal had no request behind it.
func ClaimDrain(ctx context.Context, q Querier, id string, incarnation uuid.UUID) ([]DrainRequest, error) {
	rows, err := q.Query(ctx, `
UPDATE studio_request SET done_at = now(), done_by = $2
WHERE kind = $1 AND replica_id = $2 AND incarnation = $3 AND done_at IS NULL AND audit_seq IS NOT NULL AND expires_at > now()
RETURNING seq, requested_by, reason`, RequestKindDrain, id, incarnation)
	if err != nil {
		return nil, fmt.Errorf("claim drain requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DrainRequest, error) {
		var d DrainRequest
		err := r.Scan(&d.Seq, &d.RequestedBy, &d.Reason)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim drain requests: %w", err)
	}
	return out, nil
}
