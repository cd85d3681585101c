package db

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A connection pooler in transaction mode (PgBouncer pool_mode=transaction
// or statement) gives a client connection a server session only for the
// length of one transaction. LISTEN, session advisory locks, SET and named
// prepared statements then land on a session that the next statement may
// not reach (docs/poolers.md). studioctl keeps what needs a session on a
// direct connection (database.listen_url) and runs its pool without any
// session state: ForPooler.

// ErrSharedSessions marks a connection string that reaches a pooler in
// transaction or statement mode where a session of its own is needed.
// `run` exits 2 on it (a configuration to fix).
var ErrSharedSessions = errors.New("the connection goes through a connection pooler in transaction mode")

// ForPooler makes a parsed configuration safe behind a transaction-mode
// pooler: every statement in one round trip with the unnamed statement
// (pgx's QueryExecModeExec: no prepared statement to lose between server
// sessions, and no statement or description cache), and no session
// settings at connect (a SET there would stay on a server session that
// other clients get next, not on ours). Call it right after
// ParsePoolConfig or ParseConnConfig.
func ForPooler(cfg *pgx.ConnConfig) {
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.StatementCacheCapacity = 0
	cfg.DescriptionCacheCapacity = 0
	cfg.AfterConnect = nil
}

// ForPoolerPool is ForPooler for a pool's configuration.
func ForPoolerPool(cfg *pgxpool.Config) { ForPooler(cfg.ConnConfig) }

// sharedSessionRounds is how many times SharesSessions tries to catch two
// client connections on one server session.
const sharedSessionRounds = 3

// listenProofTimeout bounds the wait for the NOTIFY of the LISTEN proof
// (SharedSessions). It runs only where a pooler or proxy stands between
// the client and PostgreSQL (the backend's pid is not the one the
// connection was given), and there a session-mode pooler delivers the
// notification at once.
const listenProofTimeout = 3 * time.Second

// SharesSessions reports whether client connections made from cfg share
// server sessions: a pooler in transaction or statement mode. It opens two
// connections (A and B) and, a few times: A asks for its backend's pid;
// B, inside a transaction, asks for its own; then A again. With sessions
// of their own A's pid never changes and B's is never A's. A pooler in
// transaction mode hands B the server A has just released (PgBouncer
// reuses the most recent one), or gives A another server while B holds
// one, so one of the two shows. A pooler in statement mode refuses B's
// transaction, which says the same. When the pids show nothing, a LISTEN
// proof decides behind a pooler (SharedSessions). Session-mode poolers and
// direct connections report false.
func SharesSessions(ctx context.Context, cfg *pgx.ConnConfig, connString string) (bool, error) {
	probe := cfg.Copy()
	ForPooler(probe)
	a, err := Connect(ctx, probe, connString)
	if err != nil {
		return false, err
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := Connect(ctx, probe.Copy(), connString)
	if err != nil {
		return false, err
	}
	defer b.Close(context.WithoutCancel(ctx))
	shared, err := SharedSessions(ctx, a, b)
	return shared, scrub(err, connString)
}

// StatementPooling reports an error of a pooler in statement mode, which
// refuses transactions (PgBouncer: "transaction blocks not allowed in
// statement pooling mode").
func StatementPooling(err error) bool {
	return err != nil && strings.Contains(err.Error(), "statement pooling mode")
}

// PidQuerier is what SharedSessions needs of a client connection: a
// *pgx.Conn, or a *pgxpool.Conn acquired from a pool.
type PidQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SharedSessions is SharesSessions over two client connections of one
// connection string, open and idle.
//
// Catching the two connections on one server session is a matter of luck
// when other clients keep the pooler's servers busy (A may get its server
// back every time while B gets another). So when the pids show nothing,
// and the backend's pid is not the one PostgreSQL gave the connection (a
// pooler or a proxy hands out keys of its own), a LISTEN proof decides: A
// listens on a channel of its own and B notifies it. A session of its own
// hears it at once; behind a transaction pooler A's LISTEN stays on a
// server session that A no longer holds, and A never hears it.
func SharedSessions(ctx context.Context, a, b PidQuerier) (bool, error) {
	shared, p1, err := sharedPids(ctx, a, b)
	if err != nil || shared {
		return shared, err
	}
	ra, rb := rawConn(a), rawConn(b)
	if ra == nil || rb == nil {
		return false, nil
	}
	if uint32(ra.PgConn().PID()) == uint32(p1) {
		return false, nil // A talks to its backend directly: no pooler
	}
	heard, err := listenProof(ctx, ra, rb)
	if err != nil {
		return false, fmt.Errorf("detect a connection pooler: %w", err)
	}
	return !heard, nil
}

// rawConn is q's *pgx.Conn: q itself, or a pool connection's.
func rawConn(q PidQuerier) *pgx.Conn {
	switch c := q.(type) {
	case *pgx.Conn:
		return c
	case interface{ Conn() *pgx.Conn }:
		return c.Conn()
	}
	return nil
}

// listenProof: does a NOTIFY sent on b reach a LISTEN on a within
// listenProofTimeout?
func listenProof(ctx context.Context, a, b *pgx.Conn) (bool, error) {
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	channel := "studio_pooler_probe_" + hex.EncodeToString(buf)
	if _, err := a.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	if _, err := b.Exec(ctx, `SELECT pg_notify($1, '')`, channel); err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(ctx, listenProofTimeout)
	defer cancel()
	_, err := a.WaitForNotification(wctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if wctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	// A session of its own (a doctor's pool connection goes back to its
	// pool): leave it as it was.
	_, _ = a.Exec(ctx, "UNLISTEN "+pgx.Identifier{channel}.Sanitize())
	return true, nil
}

// sharedPids is the pid test of SharedSessions; p1 is A's last backend
// pid.
func sharedPids(ctx context.Context, a, b PidQuerier) (bool, int32, error) {
	pid := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (int32, error) {
		var p int32
		err := q.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p)
		return p, err
	}
	fail := func(err error) (bool, int32, error) {
		return false, 0, fmt.Errorf("detect a connection pooler: %w", err)
	}
	var last int32
	for range sharedSessionRounds {
		p1, err := pid(a)
		if err != nil {
			return fail(err)
		}
		tx, err := b.Begin(ctx)
		if err != nil {
			if StatementPooling(err) {
				return true, 0, nil
			}
			return fail(err)
		}
		p2, err := pid(tx)
		if err != nil {
			tx.Rollback(ctx)
			return fail(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			return fail(err)
		}
		if p2 == p1 {
			return true, 0, nil
		}
		p3, err := pid(a)
		if err != nil {
			return fail(err)
		}
		if p3 != p1 {
			return true, 0, nil
		}
		last = p3
	}
	return false, last, nil
}
