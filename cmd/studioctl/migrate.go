package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/output"
)

func (a *app) newMigrateCmd() *cobra.Command {
	cmd := groupCmd("migrate", "Apply or inspect the database schema", `studioctl's schema lives in numbered, embedded migrations applied under a
PostgreSQL advisory lock, so processes that start together migrate once.
An existing shedlock table (made by a Java installation) is used as it is.`)
	cmd.AddCommand(newMigrateUpCmd(a, nil), newMigrateStatusCmd(a, nil))
	return cmd
}

// migrateOptions are the dependencies of migrate up and migrate status.
type migrateOptions struct {
	deps
	// ListenURLSet: database.listen_url is set, so SessionDB is its.
	ListenURLSet bool
}

func newMigrateUpCmd(a *app, runF func(context.Context, *migrateOptions) error) *cobra.Command {
	o := &migrateOptions{deps: a.deps()}
	return &cobra.Command{
		Use:     "up",
		Short:   "Apply every pending migration",
		Example: "  studioctl migrate up --database-url postgres://app@db/app",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ListenURLSet = a.cfg.Database.ListenURL != ""
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return migrateUpRun(cmd.Context(), o)
		},
	}
}

// migrateUpRun applies the pending migrations and names each on stderr.
func migrateUpRun(ctx context.Context, o *migrateOptions) error {
	// goose holds a session advisory lock: database.listen_url's session.
	pool, err := o.SessionDB(ctx)
	if err != nil {
		return err
	}
	if err := refuseSharedPool(ctx, pool, o.ListenURLSet, "migrate up holds a session advisory lock while it migrates"); err != nil {
		return err
	}
	// Another session migrating (a replica, another migrate up, a session
	// left holding the lock): say who, once per holder; Ctrl-C ends the wait.
	var said int
	applied, err := migrate.UpWith(ctx, pool, migrate.Options{Waiting: func(h migrate.Holder) {
		if h.PID != said {
			fmt.Fprintf(o.IO.Err, "waiting for the migration lock, held by %s (up to 5 minutes)\n", h)
			said = h.PID
		}
	}})
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(o.IO.Err, "schema is up to date")
	}
	for _, m := range applied {
		fmt.Fprintf(o.IO.Err, "applied %05d %s\n", m.Version, m.Name)
	}
	return nil
}

func newMigrateStatusCmd(a *app, runF func(context.Context, *migrateOptions) error) *cobra.Command {
	o := &migrateOptions{deps: a.deps()}
	return withFormats(&cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Long: `List the embedded migrations and whether each is applied, then any version
applied in the database that this binary does not know (state "unknown"): a
newer studioctl migrated the database, and "studioctl run" refuses it (exit 2).`,
		Example: "  studioctl migrate status -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return migrateStatusRun(cmd.Context(), o)
		},
	}, listFormats...)
}

var migrationColumns = []output.Column{{Header: "VERSION"}, {Header: "NAME"}, {Header: "STATE"}, {Header: "APPLIED AT"}}

// migrateStatusRun lists the migrations and whether each is applied.
func migrateStatusRun(ctx context.Context, o *migrateOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	m, err := migrate.New(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	p := o.Printer()
	rows := make([][]output.Cell, 0, len(st))
	for _, s := range st {
		state, tone := "pending", output.Warn
		switch {
		case s.Unknown:
			state, tone = "unknown (newer than this binary)", output.Bad
		case s.Applied:
			state, tone = "applied", output.Good
		}
		rows = append(rows, []output.Cell{{Text: fmt.Sprintf("%05d", s.Version)}, {Text: s.Name}, {Text: state, Tone: tone}, {Text: p.TimePtr(s.AppliedAt)}})
	}
	return p.Print(st, migrationColumns, rows)
}

// sessionKey names the setting whose connections a command that needs a
// session of its own uses.
func sessionKey(listenURLSet bool) string {
	if listenURLSet {
		return "database.listen_url (STUDIO_DATABASE_LISTEN_URL)"
	}
	return "database.url (STUDIO_DATABASE_URL)"
}

// sharedSessionsError is the refusal of a command that needs a session of
// its own on a connection through a pooler in transaction mode (exit 2).
func sharedSessionsError(listenURLSet bool, why string) error {
	fix := "set database.listen_url (STUDIO_DATABASE_LISTEN_URL) to a direct connection to PostgreSQL (or to a pooler in session mode)"
	if listenURLSet {
		fix = "database.listen_url must be a direct connection to PostgreSQL (or a pooler in session mode)"
	}
	return &usageError{err: &sharedSessions{msg: fmt.Sprintf("%s goes through a connection pooler in transaction or statement mode "+
		"(PgBouncer pool_mode=transaction), and %s, which needs a session of its own: %s (docs/poolers.md)", sessionKey(listenURLSet), why, fix)}}
}

// sharedSessions is db.ErrSharedSessions with a message that says what
// to fix.
type sharedSessions struct{ msg string }

func (e *sharedSessions) Error() string { return e.msg }
func (e *sharedSessions) Unwrap() error { return db.ErrSharedSessions }

// refuseSharedPool refuses (exit 2) a pool whose connections share server
// sessions (db.SharedSessions on two of them).
func refuseSharedPool(ctx context.Context, pool *pgxpool.Pool, listenURLSet bool, why string) error {
	a, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer b.Release()
	shared, err := db.SharedSessions(ctx, a, b)
	if err != nil {
		return err
	}
	if shared {
		return sharedSessionsError(listenURLSet, why)
	}
	return nil
}
