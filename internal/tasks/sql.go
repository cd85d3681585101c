package tasks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// rollbackTimeout bounds the rollback of a failed transaction, which runs
// when ctx may be done.
const rollbackTimeout = 2 * time.Second

// setStatementTimeout is SET LOCAL statement_timeout with the value as a
// parameter (SET takes none).
const setStatementTimeout = `SELECT set_config('statement_timeout', $1, true)`

// SQL runs one statement on the shared database in a transaction of its own.
type SQL struct {
	Statement string
	DB        interface {
		Begin(context.Context) (pgx.Tx, error)
	} // a *pgxpool.Pool
}

// Kind returns "sql".
func (SQL) Kind() string { return KindSQL }

// Run begins a transaction, sets statement_timeout (SET LOCAL) to the time
// left until ctx's deadline when it has one, runs the statement and
// commits. The output is the command tag ("DELETE 3"); with several
// statements in Statement, the tag of the last one. The statement text is
// sent with the simple protocol, so it may hold several statements but no
// parameters.
//
// When ctx is done while the statement runs, pgx closes the connection and
// sends the server a cancel request, so the work stops on the server too (a
// lost lock must not leave it running there), and Run returns an error that
// wraps context.Cause(ctx). Nothing is committed then.
func (s SQL) Run(ctx context.Context, env Env) Result {
	if s.DB == nil {
		return Result{Err: errors.New("run sql: no database")}
	}
	tx, err := s.DB.Begin(ctx)
	if err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("begin transaction: %w", err))}
	}
	defer func() {
		// A no-op after Commit; otherwise it ends the transaction and
		// returns the connection to its pool.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		tx.Rollback(rctx)
	}()

	if deadline, ok := ctx.Deadline(); ok {
		ms := max(time.Until(deadline).Milliseconds(), 1)
		if _, err := tx.Exec(ctx, setStatementTimeout, strconv.FormatInt(ms, 10)+"ms"); err != nil {
			return Result{Err: withCause(ctx, fmt.Errorf("set statement_timeout: %w", err))}
		}
	}

	tag, err := tx.Exec(ctx, s.Statement)
	if err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("execute statement: %w", err))}
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{Err: withCause(ctx, fmt.Errorf("commit: %w", err))}
	}
	return Result{Output: tag.String()}
}
