package demo

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
)

// DatabasePrefix begins the name of every database the demo creates.
const DatabasePrefix = "studioctl_demo_"

// newDatabaseName is DatabasePrefix and 8 random hex digits.
func newDatabaseName() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return DatabasePrefix + hex.EncodeToString(b), nil
}

// target is the demo's database as the demo reaches it (with the password)
// and as its children reach it (without: the password is in a pgpass file).
type target struct {
	// secret is the demo's own connection string to the demo database,
	// password included. It never leaves this process.
	secret string
	// public is the same without the password; children add
	// application_name to it.
	public string
	// passfile is the 0600 pgpass file that holds the password for the
	// demo database, "" when there is no password.
	passfile string
	// isURL: public is a URL (else a keyword/value string).
	isURL bool
	// jobs is public as the sql: jobs' login (addJobsLogin), "" if none.
	jobs string
}

// addJobsLogin makes the sql: jobs' login, user with pw, the one their
// connections use (jobs), its password in the pgpass file beside the
// demo's own. Only a URL target has one (the embedded default's).
func (t *target) addJobsLogin(user, pw, name, dir string) error {
	if !t.isURL {
		return nil
	}
	u, _ := url.Parse(t.public)
	u.User = url.User(user)
	t.jobs = u.String()
	if pw == "" {
		return nil
	}
	if t.passfile == "" {
		t.passfile = filepath.Join(dir, "pgpass")
	}
	f, err := os.OpenFile(t.passfile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write password file: %w", err)
	}
	_, err = f.WriteString("*:*:" + pgpassField(name) + ":" + pgpassField(user) + ":" + pgpassField(pw) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write password file: %w", err)
	}
	return nil
}

// jobsWithApp is the jobs' login's connection string naming the session's
// application_name, the replica app, which the demo's sql jobs record.
func (t *target) jobsWithApp(app string) string {
	u, _ := url.Parse(t.jobs)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// newTarget derives the demo database's connection strings from admin (the
// embedded or configured database; "" means the PG* variables) and writes
// the pgpass file into dir.
func newTarget(admin, name, dir string) (*target, error) {
	cfg, err := pgconn.ParseConfig(admin)
	if err != nil {
		return nil, db.Scrub(fmt.Errorf("parse database url: %w", err), admin)
	}
	t := &target{}
	if u, ok := asURL(admin); ok {
		u.User = url.User(cfg.User)
		u.Path = "/" + name
		q := u.Query()
		q.Del("password")
		q.Del("dbname")
		u.RawQuery = q.Encode()
		t.public, t.isURL = u.String(), true
	} else {
		t.public = fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=%s",
			quoteKV(cfg.Host), cfg.Port, quoteKV(cfg.User), quoteKV(name), sslMode(cfg.TLSConfig))
	}
	t.secret = t.public
	if cfg.Password != "" {
		if t.isURL {
			u, _ := url.Parse(t.public)
			u.User = url.UserPassword(cfg.User, cfg.Password)
			t.secret = u.String()
		} else {
			t.secret += " password=" + quoteKV(cfg.Password)
		}
		t.passfile = filepath.Join(dir, "pgpass")
		line := "*:*:" + pgpassField(name) + ":" + pgpassField(cfg.User) + ":" + pgpassField(cfg.Password) + "\n"
		if err := os.WriteFile(t.passfile, []byte(line), 0o600); err != nil {
			return nil, fmt.Errorf("write password file: %w", err)
		}
	}
	return t, nil
}

// asURL parses a postgres:// or postgresql:// connection string.
func asURL(s string) (*url.URL, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		return nil, false
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, false
	}
	return u, true
}

// withApp is the public connection string naming the session's
// application_name, which the demo's sql jobs record as the replica.
func (t *target) withApp(app string) string {
	if t.isURL {
		u, _ := url.Parse(t.public)
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return t.public + " application_name=" + quoteKV(app)
}

// sslMode names the libpq sslmode closest to a parsed TLS configuration:
// the keyword/value form is rebuilt from the parsed fields. (Certificate
// files set through PGSSLROOTCERT and the like reach the children through
// their environment.)
func sslMode(c *tls.Config) string {
	switch {
	case c == nil:
		return "disable"
	case c.InsecureSkipVerify && c.VerifyPeerCertificate == nil:
		return "require"
	default:
		return "verify-full"
	}
}

// quoteKV quotes a keyword/value value as libpq reads it.
func quoteKV(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\\") {
		return s
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// pgpassField escapes ':' and '\' as a pgpass file needs.
func pgpassField(s string) string {
	return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s)
}

// createDatabase creates the demo database through the admin connection.
func createDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create the demo database %s (the role needs CREATEDB): %w", name, err)
	}
	return nil
}

// dropDatabase ends the sessions left in the demo database and drops it.
func dropDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
		return fmt.Errorf("drop the demo database %s: %w", name, err)
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop the demo database %s: %w", name, err)
	}
	return nil
}
