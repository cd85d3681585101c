package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/studioctl/studioctl/internal/db"
)

// hintPooler is the fix for a pooler in transaction mode where a session
// of its own is needed (docs/poolers.md).
const hintPooler = "set database.listen_url (STUDIO_DATABASE_LISTEN_URL) to a direct connection to PostgreSQL and keep database.url on the pooler, or use PgBouncer pool_mode=session (docs/poolers.md)"

// hintPinned is the fix for server-side timeouts on a transaction
// pooler's server sessions.
const hintPinned = "add connect_query = 'SET statement_timeout = 0; SET lock_timeout = 0; SET idle_in_transaction_session_timeout = 0' " +
	"to the database's entry in pgbouncer.ini, or drop the role or database default (docs/poolers.md)"

// pinnedTimeouts are the settings db.pinnedSettings pins to 0 on the
// replica's own sessions; a pool behind a transaction pooler (db.ForPooler)
// runs without that SET.
var pinnedTimeouts = []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"}

// unpinnedSettings lists, as "name=value, ...", the pinned timeouts that a
// server session of the pool has set ("": none).
func unpinnedSettings(ctx context.Context, e *env) (string, error) {
	var out []string
	for _, name := range pinnedTimeouts {
		var v string
		if err := e.pool.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return "", err
		}
		if v != "0" {
			out = append(out, name+"="+v)
		}
	}
	return strings.Join(out, ", "), nil
}

// checkPooler: does database.url reach a connection pooler in transaction
// or statement mode (db.SharesSessions), and if so, does
// database.listen_url give the bus, the heartbeat and the migrations a
// session of their own? `studioctl run` refuses the first without the
// second (exit 2).
func checkPooler(ctx context.Context, e *env) Result {
	shared, err := poolSharesSessions(ctx, e)
	if errors.Is(err, errTwoConns) {
		// The bus check, which needs a second connection too, says why.
		return Result{Status: Skip, Detail: "not checked: " + err.Error()}
	}
	if err != nil {
		return Result{Status: Fail, Detail: "could not check: " + err.Error(), Hint: hintPooler}
	}
	listen := e.o.ListenConnConfig
	var lshared bool
	if listen != nil {
		if lshared, err = db.SharesSessions(ctx, listen, ""); err != nil {
			return Result{Status: Fail, Detail: "could not check database.listen_url: " + err.Error(), Hint: hintPooler}
		}
	}
	switch {
	case lshared:
		return Result{Status: Fail, Detail: "database.listen_url goes through a connection pooler in transaction or statement mode: " +
			"LISTEN, the heartbeat's session and the migrations' advisory lock do not work there, and `studioctl run` refuses it (exit 2)", Hint: hintPooler}
	case shared && listen == nil:
		return Result{Status: Fail, Detail: "database.url goes through a connection pooler in transaction or statement mode " +
			"(PgBouncer pool_mode=transaction) and no database.listen_url is set: LISTEN, the heartbeat's session and the migrations' " +
			"advisory lock do not work there, and `studioctl run` refuses it (exit 2)", Hint: hintPooler}
	case shared && statementMode(ctx, e):
		return Result{Status: Fail, Detail: "database.url goes through a connection pooler in statement mode (PgBouncer " +
			"pool_mode=statement), which refuses transactions: the replica's lock calls, history writes and lease rounds run in " +
			"transactions, and `studioctl run` refuses it (exit 2)", Hint: "use pool_mode=transaction with database.listen_url, or " +
			"pool_mode=session (docs/poolers.md)"}
	case shared:
		if unpinned, err := unpinnedSettings(ctx, e); err != nil {
			return Result{Status: Fail, Detail: "could not read the pooled sessions' timeouts: " + err.Error(), Hint: hintPooler}
		} else if unpinned != "" {
			return Result{Status: Warn, Detail: "database.url goes through a connection pooler in transaction mode, and its server sessions " +
				"have " + unpinned + " (a role or database default): behind a transaction pooler a replica cannot pin them to 0 as it does on " +
				"its own sessions, so the server may cancel its lock calls and history writes", Hint: hintPinned}
		}
		return Result{Status: OK, Detail: "database.url goes through a connection pooler in transaction mode, which replicas use " +
			"without session state; database.listen_url gives the bus, the heartbeat and the migrations sessions of their own"}
	case listen != nil:
		return Result{Status: OK, Detail: "each connection of database.url and of database.listen_url has a session of its own " +
			"(direct, or a pooler in session mode)"}
	default:
		return Result{Status: OK, Detail: "each connection has a session of its own (direct, or a pooler in session mode)"}
	}
}

// statementMode: the pool's pooler refuses transactions.
func statementMode(ctx context.Context, e *env) bool {
	tx, err := e.pool.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT 1`)
		tx.Rollback(ctx)
	}
	return db.StatementPooling(err)
}

// errTwoConns: the pool could not open the two connections the check
// compares.
var errTwoConns = errors.New("could not open two connections")

// poolSharesSessions asks SharedSessions of two connections of the pool.
func poolSharesSessions(ctx context.Context, e *env) (bool, error) {
	a, err := e.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: %v", errTwoConns, err)
	}
	defer a.Release()
	b, err := e.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: %v", errTwoConns, err)
	}
	defer b.Release()
	return db.SharedSessions(ctx, a, b)
}
