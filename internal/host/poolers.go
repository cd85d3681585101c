package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
)

// Poolers (docs/poolers.md). The bus (LISTEN), the heartbeat (its session
// is the replica's incarnation) and the migrations (a session advisory
// lock) need a session of their own. The pool needs none: behind a pooler
// in transaction mode it runs without session state (db.ForPooler), and
// database.listen_url gives the rest a direct connection.

// ErrListenURL marks a database.listen_url that does not reach the
// database database.url reaches (exit 2).
var ErrListenURL = errors.New("database.listen_url (STUDIO_DATABASE_LISTEN_URL) does not reach the database of database.url")

// configError is a configuration the replica refuses: its text says
// what and how to fix it, and errors.Is finds err (exit 2).
type configError struct {
	err error
	msg string
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.err }

// sameDatabaseTimeout bounds the wait for the NOTIFY that proves both URLs
// reach one database.
const sameDatabaseTimeout = 5 * time.Second

// sessionConnString is the connection string of what needs a session of
// its own: database.listen_url when set, else database.url.
func (h *Host) sessionConnString() string {
	if h.o.ListenConnString != "" {
		return h.o.ListenConnString
	}
	return h.o.ConnString
}

// pooledByConfig: a listen URL of its own says the pool may go through a
// pooler in transaction mode, found by SharesSessions or not.
func (h *Host) pooledByConfig() bool {
	return h.o.ListenConnString != "" && h.o.ListenConnString != h.o.ConnString
}

// scrub hides the passwords of both URLs in err's text.
func (h *Host) scrub(err error) error {
	err = db.Scrub(err, h.o.ConnString)
	if h.o.SQLConnString != "" {
		err = db.Scrub(err, h.o.SQLConnString)
	}
	if h.o.ListenConnString != "" {
		err = db.Scrub(err, h.o.ListenConnString)
	}
	return err
}

// checkSessions refuses, before anything is written, a pool URL that goes
// through a pooler in transaction mode without a listen URL, a listen URL
// that goes through one, and a listen URL that reaches another database.
func (h *Host) checkSessions(ctx context.Context, pcfg *pgxpool.Config) error {
	shared, err := sharesSessions(ctx, pcfg.ConnConfig, h.o.ConnString, "database.url (STUDIO_DATABASE_URL)")
	if err != nil {
		return err
	}
	if shared && h.o.ListenConnString != "" && !h.pooledByConfig() {
		return &configError{err: db.ErrSharedSessions, msg: fmt.Sprintf("database.listen_url (STUDIO_DATABASE_LISTEN_URL) is database.url itself, "+
			"which reaches %s through a connection pooler in transaction or statement mode (PgBouncer pool_mode=transaction); set "+
			"database.listen_url to a direct connection to PostgreSQL (or to a pooler in session mode) and keep database.url on the pooler "+
			"(docs/poolers.md)", db.Describe(pcfg.ConnConfig))}
	}
	if shared && !h.pooledByConfig() {
		return &configError{err: db.ErrSharedSessions, msg: fmt.Sprintf("database.url (STUDIO_DATABASE_URL) reaches %s through a connection pooler "+
			"in transaction or statement mode (PgBouncer pool_mode=transaction), where LISTEN, session advisory locks and session settings "+
			"do not work, and the replica needs them for its bus, its heartbeat and its migrations; set database.listen_url "+
			"(STUDIO_DATABASE_LISTEN_URL) to a direct connection to PostgreSQL (or to a pooler in session mode) and keep database.url on "+
			"the pooler, or use pool_mode=session (docs/poolers.md)", db.Describe(pcfg.ConnConfig))}
	}
	if shared {
		if err := refusesTransactions(ctx, pcfg, h.o.ConnString); err != nil {
			return err
		}
	}
	if h.o.ListenConnString == "" {
		return nil
	}
	lcfg, err := db.ParseConnConfig(h.o.ListenConnString)
	if err != nil {
		return fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)
	}
	lshared, err := sharesSessions(ctx, lcfg, h.o.ListenConnString, "")
	if err != nil {
		// An unreachable listen URL is a failure (exit 1), named.
		return fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)
	}
	if lshared {
		return &configError{err: db.ErrSharedSessions, msg: fmt.Sprintf("database.listen_url (STUDIO_DATABASE_LISTEN_URL) reaches %s through a "+
			"connection pooler in transaction or statement mode; it must be a direct connection to PostgreSQL (or a pooler in session "+
			"mode): the bus, the heartbeat and the migrations need a session of their own (docs/poolers.md)", db.Describe(lcfg))}
	}
	if err := sameDatabase(ctx, pcfg, lcfg, h.o.ConnString, h.o.ListenConnString); err != nil {
		return err
	}
	mode := "a session of its own"
	if shared {
		mode = "a pooler in transaction mode"
	}
	h.log.Info("the pool keeps no session state; the bus, the heartbeat and the migrations use database.listen_url",
		"database", db.Describe(pcfg.ConnConfig), "pool_sessions", mode, "listen", db.Describe(lcfg))
	return nil
}

// sessionCheckTimeout bounds one URL's check for a pooler: a pooler with
// no free server connection accepts the probe's connections and leaves
// their statements waiting (PgBouncer's query_wait_timeout is 120 s),
// and the start hung without a word meanwhile.
const sessionCheckTimeout = 20 * time.Second

// sharesSessions is db.SharesSessions within sessionCheckTimeout; key
// names the URL in the timeout's error ("": the caller names it).
func sharesSessions(ctx context.Context, cfg *pgx.ConnConfig, cs, key string) (bool, error) {
	sctx, cancel := context.WithTimeout(ctx, sessionCheckTimeout)
	defer cancel()
	shared, err := db.SharesSessions(sctx, cfg, cs)
	if err != nil && sctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("the check for a connection pooler on %s did not finish within %s: a connection pooler with no free "+
			"server connection (PgBouncer in session mode with every one of its default_pool_size connections held by other "+
			"clients), or an overloaded server (docs/poolers.md)", db.Describe(cfg), sessionCheckTimeout)
		if key != "" {
			err = fmt.Errorf("%s: %w", key, err)
		}
	}
	return shared, err
}

// refusesTransactions refuses (exit 2) a pool URL whose pooler refuses
// transactions (PgBouncer pool_mode=statement): the pool's lock calls,
// history writes and lease rounds run in transactions, and would fail
// every time once the replica is ready.
func refusesTransactions(ctx context.Context, pcfg *pgxpool.Config, cs string) error {
	ctx, cancel := context.WithTimeout(ctx, db.ConnectTimeout+sameDatabaseTimeout)
	defer cancel()
	conn, err := db.Connect(ctx, pcfg.ConnConfig.Copy(), cs)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT 1`)
		if rerr := tx.Rollback(ctx); err == nil {
			err = rerr
		}
	}
	if err != nil && db.StatementPooling(err) {
		return &configError{err: db.ErrSharedSessions, msg: fmt.Sprintf("database.url (STUDIO_DATABASE_URL) reaches %s through a connection "+
			"pooler in statement mode (PgBouncer pool_mode=statement), which refuses transactions, and the replica's lock calls, history "+
			"writes and lease rounds run in transactions; use pool_mode=transaction (with database.listen_url) or pool_mode=session "+
			"(docs/poolers.md)", db.Describe(pcfg.ConnConfig))}
	}
	return db.Scrub(err, cs)
}

// sameDatabase proves that both URLs reach one database: a NOTIFY sent
// through the pool's URL must reach a LISTEN on the listen URL. Only that
// makes the bus hear what the pool's transactions send.
func sameDatabase(ctx context.Context, pcfg *pgxpool.Config, lcfg *pgx.ConnConfig, cs, lcs string) error {
	ctx, cancel := context.WithTimeout(ctx, db.ConnectTimeout+sameDatabaseTimeout)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	channel := "studio_probe_" + hex.EncodeToString(b)
	lconn, err := db.Connect(ctx, lcfg.Copy(), lcs)
	if err != nil {
		return err
	}
	defer lconn.Close(context.WithoutCancel(ctx))
	if _, err := lconn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return db.Scrub(fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): listen: %w", err), lcs)
	}
	pconfig := pcfg.ConnConfig.Copy()
	pconn, err := db.Connect(ctx, pconfig, cs)
	if err != nil {
		return err
	}
	defer pconn.Close(context.WithoutCancel(ctx))
	if _, err := pconn.Exec(ctx, `SELECT pg_notify($1, '')`, channel); err != nil {
		return db.Scrub(fmt.Errorf("database.url: notify: %w", err), cs)
	}
	wctx, wcancel := context.WithTimeout(ctx, sameDatabaseTimeout)
	defer wcancel()
	if _, err := lconn.WaitForNotification(wctx); err != nil {
		if wctx.Err() != nil {
			return &configError{err: ErrListenURL, msg: fmt.Sprintf("%s: a NOTIFY sent through database.url (%s) did not reach a LISTEN on "+
				"database.listen_url (%s) within %s; both must reach the same PostgreSQL database (docs/poolers.md)",
				ErrListenURL, db.Describe(pconfig), db.Describe(lcfg), sameDatabaseTimeout)}
		}
		return db.Scrub(fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err), lcs)
	}
	return nil
}

// migrate applies the migrations over a session of their own: goose holds
// a session advisory lock while it migrates. While another session holds
// it, the wait is logged with who holds it, and a drain or a stop ends the
// wait (migrations.go).
func (h *Host) migrate(ctx context.Context) error {
	if h.o.ListenConnString == "" {
		return h.migrateOn(ctx, h.pool)
	}
	cfg, err := db.ParsePoolConfig(h.o.ListenConnString)
	if err != nil {
		return fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)
	}
	cfg.MaxConns = 2 // goose's lock session and its migrations
	pool, err := db.OpenConfig(ctx, cfg, h.o.ListenConnString)
	if err != nil {
		return err
	}
	defer pool.Close()
	return h.migrateOn(ctx, pool)
}

// secrets are the passwords a job's output must never show: the pool's and
// the listen URL's, wherever they came from (URL, PGPASSWORD, passfile).
func (h *Host) secrets() []string {
	out := []string{h.pool.Config().ConnConfig.Password}
	if h.o.SQLConnString != "" {
		if cfg, err := db.ParseConnConfig(h.o.SQLConnString); err == nil && cfg.Password != "" {
			out = append(out, cfg.Password)
		}
	}
	if h.o.ListenConnString != "" {
		if cfg, err := db.ParseConnConfig(h.o.ListenConnString); err == nil && cfg.Password != "" {
			out = append(out, cfg.Password)
		}
	}
	return out
}

// errSessionSource: a sql job's task never takes a connection of its
// database handle; it opens one of its own from Config.
var errSessionSource = errors.New("sql jobs open connections of their own (database.listen_url)")

// sessionSource is the database of sql jobs when database.listen_url is
// set: their connections are opened from the listen URL, so each run has
// a server session of its own that ends with the run, as
// docs/jobs-sql.md promises. Through a pooler in transaction mode,
// closing the job's connection would not end its server session:
// whatever the text set (SET, SET ROLE, default_transaction_read_only, a
// session advisory lock, anything after a COMMIT in the text) would stay
// on a server session the replica's own pool and other clients get next.
type sessionSource struct{ cfg *pgxpool.Config }

// Config is what tasks.SQL opens its connection from (a copy: the task
// changes it).
func (s sessionSource) Config() *pgxpool.Config { return s.cfg.Copy() }

// Begin is never called by tasks.SQL (see errSessionSource).
func (s sessionSource) Begin(context.Context) (pgx.Tx, error) { return nil, errSessionSource }

// sqlJobsDB is the database handle sql jobs are bound to: with
// database.sql_url, a sessionSource on it (the jobs' own role); else the
// pool, or, with database.listen_url, a sessionSource on that.
func (h *Host) sqlJobsDB() (interface {
	Begin(context.Context) (pgx.Tx, error)
}, error) {
	if h.o.SQLConnString != "" {
		cfg, err := db.ParsePoolConfig(h.o.SQLConnString)
		if err != nil {
			return nil, fmt.Errorf("database.sql_url (STUDIO_DATABASE_SQL_URL): %w", db.Scrub(err, h.o.SQLConnString))
		}
		return sessionSource{cfg: cfg}, nil
	}
	if !h.pooledByConfig() {
		return h.pool, nil
	}
	cfg, err := db.ParsePoolConfig(h.o.ListenConnString)
	if err != nil {
		return nil, fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)
	}
	return sessionSource{cfg: cfg}, nil
}
