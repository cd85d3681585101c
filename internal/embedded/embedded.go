// Package embedded runs the default database of SPEC §10: with no database
// configured at all, studioctl uses a local PostgreSQL that it runs itself
// from the binaries on the machine. Several processes on one machine share
// it: each takes a file lock before it reads or changes anything in the
// folder, so one of them creates and starts the server and the others find
// it. Every connection proves a generated password (auth.go).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/pgcluster"
)

// DefaultPort is tried first for a new embedded cluster; a free port is
// picked when it is taken.
const DefaultPort = 54329

// Database is the database studioctl creates and uses in the cluster.
const Database = "studio"

// Host is the only address the server listens on; User is the role
// studioctl connects as.
const (
	Host = "127.0.0.1"
	User = "postgres"
)

// rootDir is where root keeps the embedded cluster: the postgres user must
// reach it, which it cannot under /root.
const rootDir = "/var/lib/studioctl/embedded"

// DefaultDir is the embedded cluster's folder: $XDG_DATA_HOME/studioctl/embedded,
// ~/.local/share/studioctl/embedded, or for root /var/lib/studioctl/embedded.
func DefaultDir(getenv func(string) string) string {
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "studioctl", "embedded")
	}
	if os.Geteuid() == 0 {
		return rootDir
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "share", "studioctl", "embedded")
}

// Embedded is one embedded cluster folder: data/, port, pgpass, lock.
type Embedded struct {
	Dir string
}

// Status describes the embedded cluster. It never holds the password.
type Status struct {
	Dir          string `json:"dir" yaml:"dir"`
	Initialized  bool   `json:"initialized" yaml:"initialized"`
	Running      bool   `json:"running" yaml:"running"`
	Host         string `json:"host" yaml:"host"`
	Port         int    `json:"port" yaml:"port"`
	User         string `json:"user" yaml:"user"`
	Database     string `json:"database" yaml:"database"`
	URL          string `json:"url" yaml:"url"`                     // without the password
	PasswordFile string `json:"password_file" yaml:"password_file"` // PGPASSFILE format, 0600
	Connect      string `json:"connect" yaml:"connect"`             // a psql command line
	BinDir       string `json:"bin_dir" yaml:"bin_dir"`
}

func (e *Embedded) dataDir() string  { return filepath.Join(e.Dir, "data") }
func (e *Embedded) portFile() string { return filepath.Join(e.Dir, "port") }

// port reads the port file; when it is missing it falls back on the port of
// a running server (postmaster.pid), else 0.
func (e *Embedded) port() (int, error) {
	b, err := os.ReadFile(e.portFile())
	if errors.Is(err, os.ErrNotExist) {
		return e.pidPort(), nil
	}
	if err != nil {
		return 0, err
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("%s: not a port: %q", e.portFile(), strings.TrimSpace(string(b)))
	}
	return p, nil
}

// pidPort is the port in postmaster.pid (its fourth line), 0 if none.
func (e *Embedded) pidPort() int {
	b, err := os.ReadFile(filepath.Join(e.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(lines[3]))
	return p
}

func (e *Embedded) newCluster() (*pgcluster.Cluster, error) {
	return pgcluster.New(e.dataDir(), 0, "UTC", serverSettings...)
}

// URL is a connection string for database on the embedded server, with the
// password pw when it is not "". A URL with a password is a secret.
func URL(port int, pw, database string) string {
	return userURL(User, port, pw, database)
}

// userURL is URL for the role user.
func userURL(user string, port int, pw, database string) string {
	u := user
	if pw != "" {
		u += ":" + pw
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", u, Host, port, database)
}

// ConnectHint is a psql command line that reaches the embedded database with
// the password file, without showing the password.
func (e *Embedded) ConnectHint(port int) string {
	return fmt.Sprintf("PGPASSFILE=%s psql 'host=%s port=%d user=%s dbname=%s sslmode=disable'", shellQuote(e.PasswordFile()), Host, port, User, Database)
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// lock takes an exclusive file lock on Dir/lock until the returned func runs.
//
// The file is 0600 and must belong to the user running studioctl: flock
// needs only a descriptor open for reading, so another local user who could
// read the file could hold a lock on it for ever and block every studioctl
// of this user. A lock file left 0644 by an older studioctl is made 0600.
func (e *Embedded) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(e.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded database: %w", err)
	}
	if err := ownPrivate(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded database: lock file %s: %w", f.Name(), err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded database: lock %s: %w", f.Name(), err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// ownPrivate checks that f belongs to the user running studioctl and makes
// it 0600.
func ownPrivate(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("belongs to uid %d, not to the user running studioctl (uid %d): another user could hold the lock; remove the file", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o600 {
		return f.Chmod(0o600)
	}
	return nil
}

// Ensure initialises the cluster if needed, secures one made by an older
// studioctl, starts it if it is not running, creates the studio database and
// returns its URL, password included. started says whether this call
// started the server. Everything in Dir is read under the file lock, so
// processes that start at once wait for the first to finish and then find
// its server.
func (e *Embedded) Ensure(ctx context.Context) (url string, started bool, err error) {
	url, started, err = e.ensure(ctx)
	if err != nil {
		return "", started, fmt.Errorf("embedded database: %w", err)
	}
	return url, started, nil
}

func (e *Embedded) ensure(ctx context.Context) (url string, started bool, err error) {
	c, err := e.newCluster()
	if err != nil {
		return "", false, err
	}
	if err := c.PrepareParent(e.Dir); err != nil {
		return "", false, err
	}
	unlock, err := e.lock()
	if err != nil {
		return "", false, err
	}
	defer unlock()

	pw, err := e.readPassword()
	if err != nil {
		return "", false, err
	}
	fresh := !c.Initialized()
	trusting := false
	if !fresh {
		if c.Port, err = e.port(); err != nil {
			return "", false, err
		}
		if c.Port == 0 {
			// The port file is gone and no server runs: any free port will do.
			if c.Port, err = pickPort(); err != nil {
				return "", false, err
			}
			if err := e.writePort(c.Port); err != nil {
				return "", false, err
			}
		}
		if trusting, err = e.trusting(); err != nil {
			return "", false, err
		}
	}
	newPW := pw == ""
	if newPW {
		if !fresh && !trusting && c.Running(ctx) {
			return "", false, fmt.Errorf("the server running in %s asks for a password and the password file %s is missing: "+
				"restore the file, or stop the server (studioctl embedded stop --force) and run again: studioctl then sets a new password", e.dataDir(), e.PasswordFile())
		}
		if pw, err = newPassword(); err != nil {
			return "", false, err
		}
		// Written first: whatever fails later, the password is not lost.
		if err := e.writePassword(pw); err != nil {
			return "", false, fmt.Errorf("write the password file: %w", err)
		}
	}
	switch {
	case fresh:
		if c.Port, err = pickPort(); err != nil {
			return "", false, err
		}
		if err := e.initCluster(ctx, c, pw); err != nil {
			return "", false, err
		}
		if err := e.writePort(c.Port); err != nil {
			return "", false, err
		}
	case trusting || newPW:
		if err := e.secure(ctx, c, pw, trusting); err != nil {
			return "", false, err
		}
	}
	if !c.Running(ctx) {
		err := c.Start(ctx)
		if err != nil && (fresh || !portFree(c.Port)) {
			// Another program may have taken the port since it was found
			// free, or since this server last stopped: no server of this
			// folder runs, and every client reads the port file, so the
			// cluster moves to a free port.
			if c.Port, err = pgcluster.FreePort(); err != nil {
				return "", false, fmt.Errorf("pick a port: %w", err)
			}
			if err := e.writePort(c.Port); err != nil {
				return "", false, err
			}
			err = c.Start(ctx)
		}
		if err != nil {
			return "", false, err
		}
		started = true
	}
	if err := e.prepare(ctx, c.Port, pw); err != nil {
		return "", started, err
	}
	if err := e.provisionSQLJobs(ctx, c.Port, pw); err != nil {
		return "", started, err
	}
	return URL(c.Port, pw, Database), started, nil
}

func (e *Embedded) writePort(port int) error {
	if err := os.WriteFile(e.portFile(), []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the port file: %w", err)
	}
	return nil
}

// pickPort returns DefaultPort when it is free, else a free port.
func pickPort() (int, error) {
	if portFree(DefaultPort) {
		return DefaultPort, nil
	}
	port, err := pgcluster.FreePort()
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	return port, nil
}

// connect opens one connection to url; its errors never show pw.
func connect(ctx context.Context, url, pw string) (*pgx.Conn, error) {
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		return nil, hide(err, pw)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, hide(fmt.Errorf("connect to %s: %w", db.Describe(cfg), err), pw)
	}
	return conn, nil
}

// secretError is an error whose text had the password taken out.
type secretError struct {
	msg string
	err error
}

func (e *secretError) Error() string { return e.msg }
func (e *secretError) Unwrap() error { return e.err }

// hide removes pw from err's text, keeping err for errors.Is and errors.As.
func hide(err error, pw string) error {
	if err == nil || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return &secretError{msg: strings.ReplaceAll(err.Error(), pw, "xxxxx"), err: err}
}

// prepare creates the studio database if needed, and reloads the server's
// configuration when pg_hba.conf changed after it was last read (a secure
// step cut short between writing the file and the reload).
func (e *Embedded) prepare(ctx context.Context, port int, pw string) error {
	conn, err := connect(ctx, URL(port, pw, "postgres"), pw)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if fi, err := os.Stat(e.hbaFile()); err == nil {
		var loaded time.Time
		if err := conn.QueryRow(ctx, `SELECT pg_conf_load_time()`).Scan(&loaded); err != nil {
			return err
		}
		if fi.ModTime().After(loaded) {
			if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
				return fmt.Errorf("reload pg_hba.conf: %w", err)
			}
		}
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, Database).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize())
	return err
}

// Status reports on the cluster without starting it.
func (e *Embedded) Status(ctx context.Context) (Status, error) {
	s := Status{Dir: e.Dir, Host: Host, User: User, Database: Database, PasswordFile: e.PasswordFile()}
	c, err := e.newCluster()
	if err != nil {
		return s, fmt.Errorf("embedded database: %w", err)
	}
	s.BinDir = c.BinDir
	s.Initialized = c.Initialized()
	if s.Initialized {
		if s.Port, err = e.port(); err != nil {
			return s, fmt.Errorf("embedded database: %w", err)
		}
		s.Running = c.Running(ctx)
		if s.Port != 0 {
			s.URL = URL(s.Port, "", Database)
			s.Connect = e.ConnectHint(s.Port)
		}
	}
	return s, nil
}

// ErrNotRunning is returned by Stop when no server runs.
var ErrNotRunning = errors.New("embedded database is not running")

// ErrInUse is returned by Stop when live replicas use the server.
var ErrInUse = errors.New("live replicas use the embedded database")

// Stop stops the server. Unless force, it refuses (ErrInUse) while live
// replicas (liveness.LiveSQL) are registered in the studio database.
func (e *Embedded) Stop(ctx context.Context, force bool) error {
	c, err := e.newCluster()
	if err != nil {
		return fmt.Errorf("embedded database: %w", err)
	}
	if _, err := os.Stat(e.Dir); errors.Is(err, os.ErrNotExist) {
		return ErrNotRunning
	}
	unlock, err := e.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if !c.Initialized() || !c.Running(ctx) {
		return ErrNotRunning
	}
	if !force {
		live, err := e.liveReplicas(ctx)
		if err != nil {
			return fmt.Errorf("embedded database: check for live replicas before stopping: %w (--force stops it without checking)", err)
		}
		if len(live) > 0 {
			return fmt.Errorf("embedded database: refused: %w: %s; stop them first, or use --force to stop the database under them",
				ErrInUse, strings.Join(live, ", "))
		}
	}
	if err := c.Stop(ctx); err != nil {
		return fmt.Errorf("embedded database: %w", err)
	}
	return nil
}

// liveReplicas names the live replicas registered in the studio database:
// "id (host pid N)". No studio database or no studio_replica table: none.
func (e *Embedded) liveReplicas(ctx context.Context) ([]string, error) {
	pw, err := e.readPassword()
	if err != nil {
		return nil, err
	}
	port, err := e.port()
	if err != nil {
		return nil, err
	}
	if pw == "" || port == 0 {
		return nil, fmt.Errorf("no password file or port file in %s", e.Dir)
	}
	conn, err := connect(ctx, URL(port, pw, Database), pw)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT r.id, r.host, r.pid FROM studio_replica r WHERE `+liveness.LiveSQL("r")+` ORDER BY r.id`)
	if err != nil {
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, nil
		}
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, host string
		var pid int
		if err := rows.Scan(&id, &host, &pid); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s (host %s pid %d)", id, host, pid))
	}
	// In pgx's exec mode the missing table shows here, not at Query.
	if err := rows.Err(); err != nil {
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, nil
		}
		return nil, err
	}
	return out, nil
}

func portFree(port int) bool {
	l, err := netListen(port)
	if err != nil {
		return false
	}
	l.Close()
	return true
}
