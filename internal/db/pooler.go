package db

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// Pooled reports whether ForPooler prepared cfg: its sessions may be
// shared, so nothing may rely on session state (a sql job's
// statement_timeout is then set for its transaction only).
func Pooled(cfg *pgx.ConnConfig) bool {
	return cfg.DefaultQueryExecMode == pgx.QueryExecModeExec && cfg.StatementCacheCapacity == 0 &&
		cfg.DescriptionCacheCapacity == 0 && cfg.AfterConnect == nil
}

// sharedSessionRounds is how many times SharesSessions tries to catch two
// client connections on one server session.
const sharedSessionRounds = 3

// SharesSessions reports whether client connections made from cfg share
// server sessions: a pooler in transaction or statement mode. It opens two
// connections (A and B) and, a few times: A asks for its backend's pid;
// B, inside a transaction, asks for its own; then A again. With sessions
// of their own A's pid never changes and B's is never A's. A pooler in
// transaction mode hands B the server A has just released (PgBouncer
// reuses the most recent one), or gives A another server while B holds
// one, so one of the two shows. A pooler in statement mode refuses B's
// transaction, which says the same. Session-mode poolers and direct
// connections report false.
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

// PidQuerier is what SharedSessions needs of a client connection: a
// *pgx.Conn, or a *pgxpool.Conn acquired from a pool.
type PidQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SharedSessions is SharesSessions over two client connections of one
// connection string, open and idle.
func SharedSessions(ctx context.Context, a, b PidQuerier) (bool, error) {
	pid := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (int32, error) {
		var p int32
		err := q.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p)
		return p, err
	}
	fail := func(err error) (bool, error) { return false, fmt.Errorf("detect a connection pooler: %w", err) }
	for range sharedSessionRounds {
		p1, err := pid(a)
		if err != nil {
			return fail(err)
		}
		tx, err := b.Begin(ctx)
		if err != nil {
			if strings.Contains(err.Error(), "statement pooling mode") {
				return true, nil
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
			return true, nil
		}
		p3, err := pid(a)
		if err != nil {
			return fail(err)
		}
		if p3 != p1 {
			return true, nil
		}
	}
	return false, nil
}
