package embedded

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
)

// connectURL opens one connection to url (a test helper: url's password
// may show in its error, which only the test log sees).
func connectURL(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", cfg.User, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func sqlJobPassword(t *testing.T, e *Embedded) string {
	t.Helper()
	pw, err := readPassFile(e.SQLPasswordFile())
	if err != nil || pw == "" {
		t.Fatalf("read the sql jobs' password: %q, %v", pw, err)
	}
	return pw
}

// Issue 21, item 3, on the embedded default: Ensure provisions the group
// role studio_sql_job and a login of it with a generated password in a
// 0600 file beside pgpass, with a schema of its own; the login's
// connection reaches the studio database as that role, with none of the
// postgres role's rights.
func TestEnsureProvisionsALoginOfStudioSQLJob(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	ensure(t, ctx, e)

	fi, err := os.Stat(e.SQLPasswordFile())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("sql jobs' password file mode %#o, want 0600", perm)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		t.Errorf("sql jobs' password file owned by uid %d, want %d", uid, os.Geteuid())
	}
	jobPW := sqlJobPassword(t, e)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(jobPW) || jobPW == password(t, e) {
		t.Errorf("the sql jobs' password is not 32 random bytes of its own")
	}
	url, err := e.SQLJobURL()
	if err != nil || url == "" {
		t.Fatalf("SQLJobURL: %q, %v", db.Redact(url), err)
	}
	conn := connectURL(t, ctx, url)
	var user, schema string
	var member, super, createRole bool
	if err := conn.QueryRow(ctx, `SELECT current_user, current_schema(), pg_has_role('studio_sql_job', 'USAGE'), rolsuper, rolcreaterole
		FROM pg_roles WHERE rolname = current_user`).Scan(&user, &schema, &member, &super, &createRole); err != nil {
		t.Fatal(err)
	}
	if user != SQLJobUser || schema != SQLJobUser || !member || super || createRole {
		t.Errorf("connected as %q, schema %q, member of studio_sql_job %v, superuser %v, createrole %v; want %s, its own schema, a member, neither",
			user, schema, member, super, createRole, SQLJobUser)
	}
	// Its own tables go in its own schema; public is not its to change.
	if _, err := conn.Exec(ctx, `CREATE TABLE mine (x int); INSERT INTO mine VALUES (1)`); err != nil {
		t.Errorf("the login cannot make a table of its own: %v", err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE public.theirs (x int)`); !isDenied(err) {
		t.Errorf("CREATE TABLE in public: %v, want permission denied", err)
	}

	// A second Ensure keeps the password; a lost file gets a new one, which
	// the role then has (the old one no longer works).
	ensure(t, ctx, e)
	if sqlJobPassword(t, e) != jobPW {
		t.Fatal("a second Ensure changed the sql jobs' password")
	}
	if err := os.Remove(e.SQLPasswordFile()); err != nil {
		t.Fatal(err)
	}
	ensure(t, ctx, e)
	newPW := sqlJobPassword(t, e)
	if newPW == jobPW {
		t.Fatal("the lost password file was not replaced by a new password")
	}
	if err := dial(ctx, Host, port(t, e), SQLJobUser, jobPW, nil); !isAuthError(err) {
		t.Errorf("the old password still works: %v", err)
	}
	if err := dial(ctx, Host, port(t, e), SQLJobUser, newPW, nil); err != nil {
		t.Errorf("the new password does not work: %v", err)
	}
}

// isDenied reports PostgreSQL's insufficient_privilege (42501).
func isDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// Issue 21, item 3: the hostile statements, run as the embedded
// default's sql jobs login on a migrated studio database, each fail with
// permission denied; no forged event or run row appears; and the failed
// transaction, left open, holds nothing the event writer waits for.
func TestTheEmbeddedSQLJobsLoginCannotForgeRunsOrStallTheEventWriter(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	url, _ := ensure(t, ctx, e)
	owner := connectURL(t, ctx, url)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	pool.Close()
	jobURL, err := e.SQLJobURL()
	if err != nil {
		t.Fatal(err)
	}
	job := connectURL(t, ctx, jobURL)
	for _, c := range []struct{ name, stmt string }{
		{"the issue's forged run event", `select studio_event_runs(array['{"job_id":"forged","outcome":"succeeded","seq":424242,"replica_id":"r1"}'::jsonb])`},
		{"any event", `select studio_event_add('run', '{"job_id":"forged","outcome":"succeeded"}'::jsonb)`},
		{"a run row", `INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('forged', 'r1', now(), 'succeeded')`},
		{"the event writer's lock", `SELECT 1 FROM studio_event_writer FOR UPDATE`},
		{"the event table's lock", `LOCK TABLE studio_event IN ACCESS EXCLUSIVE MODE`},
		{"a replica's heartbeat", `UPDATE studio_replica SET heartbeat_at = 'infinity'`},
		{"the audit", `DELETE FROM studio_audit`},
		{"the triggers", `ALTER TABLE studio_job_run DISABLE TRIGGER ALL`},
	} {
		stmt := c.stmt
		t.Run(c.name, func(t *testing.T) {
			_, err := job.Exec(ctx, "BEGIN; "+stmt)
			job.Exec(ctx, "ROLLBACK")
			if !isDenied(err) {
				t.Errorf("%s: %v, want permission denied", stmt, err)
			}
			if err != nil && strings.Contains(err.Error(), sqlJobPassword(t, e)) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}

	// A hostile job's transaction, left open after its denied call, holds
	// no lock of the event writer: the owner's writer gets it at once.
	if _, err := job.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Exec(ctx, `SELECT 1 FROM studio_event_writer FOR UPDATE`); !isDenied(err) {
		t.Fatalf("the writer's lock: %v, want permission denied", err)
	}
	tx, err := owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT studio_event_add('lock', '{"probe": true}'::jsonb)`); err != nil {
		t.Fatalf("the owner's event writer, beside the hostile transaction: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	job.Exec(ctx, "ROLLBACK")

	var forgedEvents, runs int
	if err := owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM studio_event WHERE data->>'job_id' = 'forged'), (SELECT count(*) FROM studio_job_run)`).
		Scan(&forgedEvents, &runs); err != nil {
		t.Fatal(err)
	}
	if forgedEvents != 0 || runs != 0 {
		t.Errorf("%d forged events and %d run rows, want none", forgedEvents, runs)
	}
}
