// Package pgtest is the test harness of SPEC §11. TestMain calls Main, which
// starts one throwaway PostgreSQL cluster per test binary from the local
// binaries (or uses STUDIO_TEST_DATABASE_URL) and migrates a template
// database. Each test then gets its own database cloned from that template
// with NewDB.
//
// The cluster's default time zone is America/Los_Angeles, so code that
// forgets to put its sessions in UTC fails a test.
//
// The harness keeps its state in the process environment (the variables
// below), which child processes such as replicas started by a test inherit.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/tasks"
)

// Environment variables.
const (
	// EnvURL names an existing server to test against, as a superuser URL.
	EnvURL = "STUDIO_TEST_DATABASE_URL"
	// envAdmin and envTemplate carry the harness state to tests and children.
	envAdmin    = "STUDIO_TEST_ADMIN_URL"
	envTemplate = "STUDIO_TEST_TEMPLATE"
	envDataDir  = "STUDIO_TEST_PGDATA"
	envError    = "STUDIO_TEST_PG_ERROR"
)

// TimeZone is the throwaway cluster's default time zone: deliberately not UTC.
const TimeZone = "America/Los_Angeles"

// serverSettings make a throwaway cluster fast and observable.
var serverSettings = []string{
	"fsync=off", "synchronous_commit=off", "full_page_writes=off",
	"max_connections=400", "shared_preload_libraries=pg_stat_statements",
}

// M is the part of *testing.M that Main needs.
type M interface{ Run() int }

// Main starts the harness, runs the tests and stops the cluster. Use it as
// `func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }`.
//
// A test binary started again as a job shim (a test ran a job command)
// runs the shim instead, and exits.
func Main(m M) int {
	if tasks.IsShim() {
		os.Exit(tasks.ShimMain())
	}
	stop, err := start()
	if err != nil {
		// Tests that need the database report the error when they ask for one.
		os.Setenv(envError, err.Error())
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	return code
}

func start() (stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := os.Getenv(EnvURL)
	if admin == "" {
		dir, err := os.MkdirTemp("", "studioctl-pgtest-")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		port, err := pgcluster.FreePort()
		if err != nil {
			return nil, err
		}
		c, err := pgcluster.New(filepath.Join(dir, "data"), port, TimeZone, serverSettings...)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := c.Init(ctx); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		stop = func() {
			c.Stop(context.Background())
			os.RemoveAll(dir)
		}
		admin = c.URL("postgres")
		os.Setenv(envDataDir, c.DataDir)
	}
	template := "studio_template_" + randomHex(4)
	if err := makeTemplate(ctx, admin, template); err != nil {
		if stop != nil {
			stop()
		}
		return nil, err
	}
	os.Setenv(envAdmin, admin)
	os.Setenv(envTemplate, template)
	prev := stop
	return func() {
		dropDatabase(admin, template)
		if prev != nil {
			prev()
		}
	}, nil
}

func makeTemplate(ctx context.Context, admin, template string) error {
	conn, err := connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	pool, err := db.Open(ctx, withDatabase(admin, template))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		// Not fatal: only measurements use it.
		fmt.Fprintf(os.Stderr, "pgtest: pg_stat_statements unavailable: %v\n", err)
	}
	_, err = migrate.Up(ctx, pool)
	return err
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		return nil, err
	}
	return db.Connect(ctx, cfg, url)
}

// withDatabase returns admin with its database replaced by name.
func withDatabase(admin, name string) string {
	u, err := url.Parse(admin)
	if err != nil || u.Scheme == "" {
		return admin + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func dropDatabase(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// unavailable fails the test, always saying why. A test never passes by
// skipping: no PostgreSQL binaries, a server that did not start, or a
// migration that failed on the template is a failure, with or without CI.
func unavailable(t testing.TB, why string) {
	t.Helper()
	t.Fatalf("PostgreSQL is required and unavailable (install the server packages, e.g. apt-get install postgresql; .ci/run does): %s", why)
}

// NewDB creates a fresh, migrated database for t and returns its URL. The
// database is dropped when the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	return newDB(t, true)
}

// NewEmptyDB creates a fresh database without any migration applied.
func NewEmptyDB(t testing.TB) string {
	t.Helper()
	return newDB(t, false)
}

func newDB(t testing.TB, migrated bool) string {
	t.Helper()
	if msg := os.Getenv(envError); msg != "" {
		unavailable(t, msg)
	}
	url, drop, err := CreateDB(t.Name(), migrated)
	if err != nil {
		unavailable(t, err.Error())
	}
	t.Cleanup(drop)
	return url
}

// CreateDB creates a database named after label (cloned from the migrated
// template when migrated) and returns its URL and a func that drops it. It is
// the building block of NewDB for harnesses that have no testing.TB, such as
// testscript's Setup.
func CreateDB(label string, migrated bool) (url string, drop func(), err error) {
	if msg := os.Getenv(envError); msg != "" {
		return "", nil, fmt.Errorf("postgresql unavailable: %s", msg)
	}
	admin, template := os.Getenv(envAdmin), os.Getenv(envTemplate)
	if admin == "" {
		return "", nil, fmt.Errorf("pgtest.Main was not called from TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	name := "t_" + sanitize(label) + "_" + randomHex(4)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if migrated {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return "", nil, fmt.Errorf("create test database: %w", err)
	}
	return withDatabase(admin, name), func() { dropDatabase(admin, name) }, nil
}

// Unavailable reports whether the harness has no database, and why. A
// caller must treat that as a failure.
func Unavailable() (bool, string) {
	msg := os.Getenv(envError)
	return msg != "", msg
}

func sanitize(name string) string {
	name = strings.ToLower(name)
	var b strings.Builder
	for _, r := range name {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// AdminURL is the superuser URL of the harness's server.
func AdminURL(t testing.TB) string {
	t.Helper()
	if msg := os.Getenv(envError); msg != "" {
		unavailable(t, msg)
	}
	return os.Getenv(envAdmin)
}

// Cluster returns the throwaway cluster for fault tests that restart the
// server. It fails the test when the harness runs against an external server.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	dir := os.Getenv(envDataDir)
	if dir == "" {
		t.Fatalf("this test needs the harness's own cluster (unset %s)", EnvURL)
	}
	u, err := url.Parse(os.Getenv(envAdmin))
	if err != nil {
		t.Fatal(err)
	}
	var port int
	fmt.Sscanf(u.Port(), "%d", &port)
	c, err := pgcluster.New(dir, port, TimeZone, serverSettings...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MainNoLeaks is Main followed by a goroutine leak check: the test binary
// fails if any goroutine is left once the tests pass. Packages that start
// goroutines use it from TestMain, as STYLE.md asks.
func MainNoLeaks(m M) int {
	code := Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// Beginner is the part of a pool or connection that ExecWithoutTriggers needs.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ExecWithoutTriggers runs sql in a transaction that skips triggers
// (session_replication_role = replica): a test that backdates rows as time
// would have, where a guard trigger refuses every change but the product's
// own (migrations/00005 on studio_request).
func ExecWithoutTriggers(t testing.TB, q Beginner, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	tx, err := q.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
