package doctor

import (
	"context"
	"errors"
	"fmt"

	"github.com/studioctl/studioctl/internal/db"
)

// hintPooler is the fix for a pooler in transaction mode where a session
// of its own is needed (docs/poolers.md).
const hintPooler = "set database.listen_url (STUDIO_DATABASE_LISTEN_URL) to a direct connection to PostgreSQL and keep database.url on the pooler, or use PgBouncer pool_mode=session (docs/poolers.md)"

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
	case shared:
		return Result{Status: OK, Detail: "database.url goes through a connection pooler in transaction mode, which replicas use " +
			"without session state; database.listen_url gives the bus, the heartbeat and the migrations sessions of their own"}
	case listen != nil:
		return Result{Status: OK, Detail: "each connection of database.url and of database.listen_url has a session of its own " +
			"(direct, or a pooler in session mode)"}
	default:
		return Result{Status: OK, Detail: "each connection has a session of its own (direct, or a pooler in session mode)"}
	}
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
