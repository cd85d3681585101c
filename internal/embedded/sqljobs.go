package embedded

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/jackc/pgx/v5"
)

// The role sql: jobs run as on the embedded database (issue 21, item 3;
// docs/embedded.md, docs/jobs-sql.md). The replica connects as postgres, a
// superuser that owns the studio tables: a job's text on that connection
// could write run rows, call the event writer or drop the triggers. So
// Ensure provisions what docs/roles.sql describes for a server of one's
// own: the group role studio_sql_job (no login, nothing of studioctl's
// granted), and a login member of it, SQLJobUser, whose generated password
// is kept in SQLPasswordFile (0600, like the postgres one). A replica on
// the embedded default without database.sql_url runs its sql: jobs as that
// login (SQLJobURL).
//
// The login gets a schema of its own, named after it: it comes first in
// its default search_path ("$user", public), so the jobs' own tables go
// there, while the replica's search_path (postgres has no schema of its
// name) never looks into it. The login may not create anything in public
// (PostgreSQL 15's default), where an object of its could capture a name
// the replica resolves.
const (
	// SQLJobRole is the group role of docs/roles.sql.
	SQLJobRole = "studio_sql_job"
	// SQLJobUser is the login the embedded default's sql: jobs use.
	SQLJobUser = "studio_sql_job_login"
)

// sqlPassFileName is the sql jobs' login's password file, beside pgpass.
const sqlPassFileName = "pgpass-sql-jobs"

// SQLPasswordFile is where SQLJobUser's password is kept (libpq's
// PGPASSFILE format, mode 0600).
func (e *Embedded) SQLPasswordFile() string { return filepath.Join(e.Dir, sqlPassFileName) }

// SQLJobURL is the connection string of SQLJobUser on the studio database of
// the server that Ensure started, password included (a secret). It is ""
// when the folder holds no such password (Ensure was not called).
func (e *Embedded) SQLJobURL() (string, error) {
	pw, err := readPassFile(e.SQLPasswordFile())
	if err != nil || pw == "" {
		return "", err
	}
	port, err := e.port()
	if err != nil {
		return "", err
	}
	if port == 0 {
		return "", fmt.Errorf("no port file in %s", e.Dir)
	}
	return userURL(SQLJobUser, port, pw, Database), nil
}

// provisionSQLJobs creates SQLJobRole, SQLJobUser and its schema on the
// studio database when they are missing, and gives the login the password
// in SQLPasswordFile (a new one when the file is missing). It connects as
// postgres with pw, under Ensure's file lock. The password reaches the
// server only as its SCRAM verifier.
func (e *Embedded) provisionSQLJobs(ctx context.Context, port int, pw string) error {
	jobPW, err := readPassFile(e.SQLPasswordFile())
	if err != nil {
		return err
	}
	newPW := jobPW == ""
	if newPW {
		if jobPW, err = newPassword(); err != nil {
			return err
		}
		// Written first: the role gets this password below, or on the
		// next Ensure if this one fails before.
		if err := writeFileAtomic(e.SQLPasswordFile(), []byte(Host+":*:*:"+SQLJobUser+":"+jobPW+"\n"), -1, -1); err != nil {
			return fmt.Errorf("write the sql jobs' password file: %w", err)
		}
	}
	conn, err := connect(ctx, URL(port, pw, Database), pw)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var haveGroup, haveLogin, haveSchema bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1), EXISTS (SELECT FROM pg_roles WHERE rolname = $2),
		EXISTS (SELECT FROM pg_namespace WHERE nspname = $2)`, SQLJobRole, SQLJobUser).Scan(&haveGroup, &haveLogin, &haveSchema); err != nil {
		return fmt.Errorf("look up the sql jobs' role: %w", err)
	}
	if haveGroup && haveLogin && haveSchema && !newPW {
		return nil
	}
	v, err := scramVerifier(jobPW)
	if err != nil {
		return err
	}
	group, login := pgx.Identifier{SQLJobRole}.Sanitize(), pgx.Identifier{SQLJobUser}.Sanitize()
	// CREATE and ALTER ROLE take no parameters; v is base64, '$' and ':'
	// only. One transaction: a failure leaves nothing half made.
	var stmts []string
	if !haveGroup {
		stmts = append(stmts, "CREATE ROLE "+group+" NOLOGIN")
	}
	if !haveLogin {
		stmts = append(stmts, "CREATE ROLE "+login+" LOGIN PASSWORD '"+v+"' IN ROLE "+group)
	} else if newPW {
		stmts = append(stmts, "ALTER ROLE "+login+" PASSWORD '"+v+"'")
	}
	if !haveSchema {
		stmts = append(stmts, "CREATE SCHEMA "+login+" AUTHORIZATION "+login)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("provision the sql jobs' role %s: %w", SQLJobUser, err)
		}
	}
	return tx.Commit(ctx)
}
