package jobstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// waitFor bounds every wait for something that must happen; it only decides
// how long a broken build takes to fail. pollEvery is the pause of a poll
// that checks a condition in the database (never a synchronisation).
const (
	waitFor   = 30 * time.Second
	pollEvery = 10 * time.Millisecond
)

// childEnv names the test that a child process of this test binary runs
// (main_test.go: such a child skips the database harness).
const childEnv = "STUDIO_JOBS_TEST_CHILD"

// newPool opens a pool the way studioctl does (sessions in UTC) on a fresh
// migrated database; it is closed when the test ends.
func newPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewDB(t)
	return openPool(t, url), url
}

func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// listen opens a dedicated connection that runs LISTEN studio, closed when
// the test ends.
func listen(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Connect(ctx, cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+bus.Channel); err != nil {
		t.Fatal(err)
	}
	return conn
}

// nextMessage waits for the next bus message on conn. It skips the event
// stream's frames (internal/stream), which every transaction that writes
// runs, audit rows or replica rows sends: these tests are about signals
// and seqs.
func nextMessage(t testing.TB, conn *pgx.Conn) bus.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("wait for a bus message: %v", err)
		}
		m, err := bus.Decode(n.Payload)
		if err != nil {
			t.Fatalf("bus payload %q: %v", n.Payload, err)
		}
		if m.Type == bus.TypeFrame && m.Stream == "events" {
			continue
		}
		return m
	}
}

// expectNoMessage proves that nothing was sent on the bus before now: it
// sends a sentinel signal and checks that it is the next message on conn
// (notifications arrive in commit order).
func expectNoMessage(t testing.TB, pool *pgxpool.Pool, conn *pgx.Conn) {
	t.Helper()
	if err := bus.Notify(t.Context(), pool, bus.Signal("test.sentinel", t.Name())); err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != "test.sentinel" {
		t.Fatalf("got bus message %+v, want nothing before the sentinel", m)
	}
}

// dbNow is the database's now().
func dbNow(t testing.TB, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) time.Time {
	t.Helper()
	var now time.Time
	if err := q.QueryRow(t.Context(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now.UTC()
}

// insertReplica adds a studio_replica row in state whose heartbeat is age
// old in database time.
func insertReplica(t testing.TB, pool *pgxpool.Pool, id, state string, age time.Duration) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at)
VALUES ($1, gen_random_uuid(), 'host-1', 4242, 'v0.0.0-test', $2, now() - make_interval(secs => $3))`,
		id, state, age.Seconds())
	if err != nil {
		t.Fatalf("insert replica %s: %v", id, err)
	}
}

func ptr[T any](v T) *T { return &v }

// countingQuerier counts the statements sent through it (not those sent
// inside a transaction it began) and keeps their text.
type countingQuerier struct {
	jobstore.Querier
	mu    sync.Mutex
	texts []string
	args  [][]any
}

func (c *countingQuerier) note(sql string, args []any) {
	c.mu.Lock()
	c.texts = append(c.texts, sql)
	c.args = append(c.args, args)
	c.mu.Unlock()
}

func (c *countingQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.note(sql, args)
	return c.Querier.Exec(ctx, sql, args...)
}

func (c *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.note(sql, args)
	return c.Querier.Query(ctx, sql, args...)
}

func (c *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.note(sql, args)
	return c.Querier.QueryRow(ctx, sql, args...)
}

func (c *countingQuerier) Begin(ctx context.Context) (pgx.Tx, error) {
	c.note("BEGIN", nil)
	return c.Querier.Begin(ctx)
}

// calls returns how many statements went through c, and resets the count.
func (c *countingQuerier) calls() (n int, texts []string, args [][]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, texts, args = len(c.texts), c.texts, c.args
	c.texts, c.args = nil, nil
	return n, texts, args
}

func every(t testing.TB, d time.Duration) jobs.Schedule {
	t.Helper()
	s, err := jobs.Every(d)
	if err != nil {
		t.Fatalf("Every(%s): %v", d, err)
	}
	return s
}

func cron(t testing.TB, expr string) jobs.Schedule {
	t.Helper()
	s, err := jobs.ParseCron(expr)
	if err != nil {
		t.Fatalf("ParseCron(%q): %v", expr, err)
	}
	return s
}
