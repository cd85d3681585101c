package tasks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
)

// setSession sets, for the whole session (SET takes no parameter),
// statement_timeout (unless $1 is empty) and the run's occurrence:
// studio.scheduled_at, studio.occurrence_key, studio.triggered ("true"
// for a jobs trigger run, else "false") and studio.fencing_token ("" for
// none), which the statement reads
// with current_setting. It runs before the transaction, so that neither a
// COMMIT nor a ROLLBACK in the statement undoes it, in one round trip.
const setSession = `SELECT CASE WHEN $1 <> '' THEN set_config('statement_timeout', $1, false) END,
  set_config('studio.scheduled_at', $2, false), set_config('studio.occurrence_key', $3, false),
  set_config('studio.triggered', $4, false), set_config('studio.fencing_token', $5, false)`

// closeTimeout bounds the rollback and the goodbye of a run's connection,
// which run when ctx may be done.
const closeTimeout = 2 * time.Second

// SQL runs one statement on the shared database in a transaction of its
// own, on a connection of its own.
type SQL struct {
	Statement string
	// DB is the replica's *pgxpool.Pool (its type is what jobtask.Bind
	// passes). Run never takes one of its connections: it opens a
	// connection of its own from the pool's configuration (Config), so
	// nothing the statement does to its session reaches the connections
	// the replica uses for history and locks. A DB without Config is
	// refused.
	DB interface {
		Begin(context.Context) (pgx.Tx, error)
	}
}

// poolConfig is what Run needs of DB: a *pgxpool.Pool has it.
type poolConfig interface {
	Config() *pgxpool.Config
}

// Kind returns "sql".
func (SQL) Kind() string { return KindSQL }

// Run opens a connection of its own, sets statement_timeout for the whole
// session to the time left until ctx's deadline when it has one, begins a
// transaction, runs the statement, commits, and closes the connection.
// The output is the command tag ("DELETE 3"); with several statements in
// Statement, the tag of the last one. The statement text is sent with the
// simple protocol, so it may hold several statements but no parameters.
//
// Because the connection is closed after every run, whatever the statement
// does to its session (SET, SET ROLE, SET SESSION AUTHORIZATION, COMMIT or
// ROLLBACK followed by more statements, temporary tables, session advisory
// locks, LISTEN, PREPARE) ends with the run. A statement that changes
// statement_timeout itself still cannot outlive ctx.
//
// When ctx is done while the statement runs, pgx closes the connection and
// sends the server a cancel request, so the work stops on the server too (a
// lost lock must not leave it running there), and Run returns an error that
// wraps context.Cause(ctx). Nothing is committed then.
func (s SQL) Run(ctx context.Context, env Env) Result {
	if s.DB == nil {
		return Result{Err: errors.New("run sql: no database")}
	}
	src, ok := s.DB.(poolConfig)
	if !ok {
		return Result{Err: fmt.Errorf("run sql: database handle %T cannot open a connection of its own", s.DB)}
	}
	conn, err := connectOwn(ctx, src.Config())
	if err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("run sql: %w", err))}
	}
	defer closeOwn(ctx, conn)

	timeout := ""
	if deadline, ok := ctx.Deadline(); ok {
		ms := max(time.Until(deadline).Milliseconds(), 1)
		timeout = strconv.FormatInt(ms, 10) + "ms"
	}
	if _, err := conn.Exec(ctx, setSession, timeout, env.scheduledAt(), env.OccurrenceKey, env.triggered(), env.fencingToken()); err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("set statement_timeout and the run's occurrence: %w", err))}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("begin transaction: %w", err))}
	}
	defer func() {
		// A no-op after Commit or once the connection is gone; closing the
		// connection would roll back too, but this releases the locks
		// before Run returns.
		if !conn.IsClosed() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			defer cancel()
			tx.Rollback(rctx)
		}
	}()

	tag, err := tx.Exec(ctx, s.Statement)
	if err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("execute statement: %w", err))}
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("commit: %w", err))}
	}
	return Result{Output: tag.String()}
}

// connectOwn opens one connection from the pool's configuration, with the
// pool's connect hooks. statement_timeout is not sent in the startup
// packet: PgBouncer, by default, refuses startup parameters it does not
// track.
func connectOwn(ctx context.Context, pc *pgxpool.Config) (*pgx.Conn, error) {
	cc := pc.ConnConfig // Config returned a copy: ours to change
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cc); err != nil {
			return nil, fmt.Errorf("connect to database: %w", db.Scrub(err, cc.ConnString()))
		}
	}
	conn, err := db.Connect(ctx, cc, cc.ConnString())
	if err != nil {
		return nil, err
	}
	if pc.AfterConnect != nil {
		if err := pc.AfterConnect(ctx, conn); err != nil {
			closeOwn(ctx, conn)
			return nil, fmt.Errorf("connect to database: %w", db.Scrub(err, cc.ConnString()))
		}
	}
	return conn, nil
}

// closeOwn closes a run's connection and waits, briefly, until pgx has sent
// the server its cancel request and goodbye: after Run returns, the session
// is gone or going, and nothing of it is left running here.
func closeOwn(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	conn.Close(cctx)
	select {
	case <-conn.PgConn().CleanupDone():
	case <-cctx.Done():
	}
}
