package e2enemesis

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

const (
	// queryTimeout bounds one statement of the test.
	queryTimeout = 10 * time.Second
	// dbName is the database of the pair.
	dbName = "studio"
	// testAppName marks the test's own sessions (never terminated by the
	// nemesis).
	testAppName = "nemesis-test"
	// syncTimeout bounds the wait for a synchronous standby.
	syncTimeout = 60 * time.Second
)

// pgPair is a primary and a synchronous hot standby on two fixed ports.
// A promotion swaps their roles: the standby becomes the primary, and a
// new standby is made from it on the old primary's port, so the replicas'
// URLs (both ports, target_session_attrs=read-write) never change.
type pgPair struct {
	t     *testing.T
	dir   string
	ports [2]int
	mu    sync.Mutex
	nodes [2]*pgcluster.Cluster // nodes[i] listens on ports[i]
	prim  int                   // index of the primary
	gen   int                   // data folders made so far
}

// newPGPair starts a primary, creates and migrates the studio database
// with schema, and starts a synchronous standby of it.
func newPGPair(t *testing.T, schema string) *pgPair {
	t.Helper()
	if gone, why := pgtest.Unavailable(); gone {
		t.Fatalf("PostgreSQL is required and unavailable: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "studioctl-nemesis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &pgPair{t: t, dir: dir}
	for i := range p.ports {
		if p.ports[i], err = pgcluster.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	settings := []string{"fsync=off", "full_page_writes=off", "max_connections=300", "wal_level=replica",
		"max_wal_senders=5", "synchronous_commit=on", "wal_sender_timeout=5s", "wal_receiver_status_interval=1s"}
	prim, err := pgcluster.New(p.nextDir(), p.ports[0], pgtest.TimeZone, settings...)
	if err != nil {
		t.Fatal(err)
	}
	if err := prim.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := prim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.nodes[0] = prim
	t.Cleanup(p.stopAll)
	if err := createAndMigrate(ctx, prim, schema); err != nil {
		t.Fatal(err)
	}
	if err := p.newStandby(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pgPair) nextDir() string {
	p.gen++
	return filepath.Join(p.dir, "node"+strconv.Itoa(p.gen))
}

func (p *pgPair) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.nodes {
		if c == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if c.Running(ctx) {
			c.StopImmediate(ctx)
		}
		cancel()
	}
}

// URL is the multi-host URL of both ports for the test's own sessions.
func (p *pgPair) URL() string {
	return multiHostURL(testAppName, 10, p.ports[0], p.ports[1])
}

// multiHostURL lists the ports with target_session_attrs=read-write: pgx
// tries them in order and keeps the first that accepts writes. The
// connect timeout is per host, in seconds.
func multiHostURL(app string, connectTimeout int, ports ...int) string {
	var hosts []string
	for _, p := range ports {
		hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(p))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + dbName +
		"?sslmode=disable&target_session_attrs=read-write&connect_timeout=" + strconv.Itoa(connectTimeout) + "&application_name=" + app
}

func createAndMigrate(ctx context.Context, p *pgcluster.Cluster, schema string) error {
	admin, err := db.Open(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+dbName)
	admin.Close()
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	pool, err := db.Open(ctx, p.URL(dbName))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	return nil
}

// newStandby makes a standby of the primary on the other port (its data
// folder new) and makes it synchronous. The base backup is taken before
// synchronous_standby_names is set, so the standby, once promoted, waits
// for no standby of its own.
func (p *pgPair) newStandby(ctx context.Context) error {
	prim := p.nodes[p.prim]
	other := 1 - p.prim
	s, err := pgcluster.StartStandby(ctx, prim, p.nextDir(), p.ports[other])
	if err != nil {
		return err
	}
	p.nodes[other] = s
	pool, err := db.Open(ctx, prim.URL(dbName)+"&application_name="+testAppName)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	deadline := time.Now().Add(syncTimeout)
	for {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).Scan(&n)
		if err == nil && n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no synchronous standby after %s (%v)", syncTimeout, err)
		}
		time.Sleep(replicaproc.PollEvery)
	}
}

// restartPrimary restarts the primary with pg_ctl restart -m fast.
func (p *pgPair) restartPrimary(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[p.prim].Restart(ctx)
}

// promote stops the primary with -m immediate (with synchronous commit,
// everything committed is on the standby), promotes the standby, and makes
// a new synchronous standby on the old primary's port.
func (p *pgPair) promote(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nodes[1-p.prim] == nil {
		// The last promote's new standby failed to start: make it now,
		// or there is nothing to promote (a nil standby panicked here).
		if err := p.newStandby(ctx); err != nil {
			return fmt.Errorf("no standby to promote, and making one failed: %w", err)
		}
	}
	old := p.nodes[p.prim]
	if err := old.StopImmediate(ctx); err != nil {
		return fmt.Errorf("stop the primary: %w", err)
	}
	if err := p.nodes[1-p.prim].Promote(ctx); err != nil {
		return err
	}
	p.prim = 1 - p.prim
	os.RemoveAll(old.DataDir)
	p.nodes[1-p.prim] = nil
	return p.newStandby(ctx)
}

// testPool opens a pool on url, closed when the test ends.
func testPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
