package locks

// Measurements of issue 2 (docs/benchmarks.md, scripts/bench-locks.sh): the
// cost of one lock cycle against pgbench running the same two statements,
// and the proof that an acquire is one statement in one round trip.
//
// This file is an internal test (package locks, not locks_test) so that it
// can compare the provider's own SQL with the pgbench script. Every
// identifier is prefixed with bench to stay clear of the other test files.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// benchAtMostFor is the lockAtMostFor of every measured acquire; atLeastFor
// is 0, so an unlock frees the lock at once and the next cycle takes it.
const benchAtMostFor = time.Minute

// benchRoundTrips counts the round trips on one connection: a round trip
// starts when the client writes after having read (or for the first time).
// A flush split into several writes is still one round trip.
type benchRoundTrips struct {
	trips    atomic.Int64
	lastRead atomic.Bool // the last I/O was a read: the next write starts a trip
}

func (c *benchRoundTrips) reset() {
	c.trips.Store(0)
	c.lastRead.Store(true)
}

// dial is a pgconn DialFunc that counts the round trips of its connections.
func (c *benchRoundTrips) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.lastRead.Store(true)
	return &benchCountingConn{Conn: conn, c: c}, nil
}

type benchCountingConn struct {
	net.Conn
	c *benchRoundTrips
}

func (b *benchCountingConn) Write(p []byte) (int, error) {
	if b.c.lastRead.Swap(false) {
		b.c.trips.Add(1)
	}
	return b.Conn.Write(p)
}

func (b *benchCountingConn) Read(p []byte) (int, error) {
	n, err := b.Conn.Read(p)
	if n > 0 {
		b.c.lastRead.Store(true)
	}
	return n, err
}

// benchPool opens a pool of at most one connection on url, the way studioctl
// opens its pools (db.OpenConfig: sessions in UTC), with its round trips
// counted. With noPing the pool never pings a connection it hands out (by
// default pgxpool pings one idle for over a second), so that every round
// trip counted is the provider's.
func benchPool(tb testing.TB, url string, trips *benchRoundTrips, noPing bool) *pgxpool.Pool {
	tb.Helper()
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.DialFunc = trips.dial
	if noPing {
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	pool, err := db.OpenConfig(context.Background(), cfg, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func benchProvider(tb testing.TB, q Querier, lockedBy string) *Provider {
	tb.Helper()
	p, err := NewProvider(q, DefaultTable(), lockedBy)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// benchCycle takes and releases name once.
func benchCycle(ctx context.Context, p *Provider, name string) error {
	l, err := p.TryLock(ctx, name, benchAtMostFor, 0)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// BenchmarkAcquireUnlock measures lock cycles (TryLock + Unlock of one name,
// atLeastFor 0) on a pool of one connection, to set beside pgbench running
// the same two statements on one connection with -M prepared
// (scripts/bench-locks.sh). pgx's default statement cache prepares each
// statement once, so both sides then send Bind/Execute/Sync per statement.
// Besides cycles/s it reports the round trips per cycle counted on the wire
// and the client's own CPU time per cycle (user and system, from rusage),
// which the script sets beside pgbench's.
func BenchmarkAcquireUnlock(b *testing.B) {
	ctx := context.Background()
	var trips benchRoundTrips
	pool := benchPool(b, pgtest.NewDB(b), &trips, false)
	benchCycles(ctx, b, benchProvider(b, pool, "bench-replica-1"), "bench-cycle", &trips)
}

// benchCycles runs the measured loop of lock cycles on p and reports
// cycles/s, the round trips per cycle and the client's CPU per cycle.
// The first cycle, not measured, inserts the row and prepares both
// statements.
func benchCycles(ctx context.Context, b *testing.B, p *Provider, name string, trips *benchRoundTrips) {
	if err := benchCycle(ctx, p, name); err != nil {
		b.Fatal(err)
	}
	trips.reset()
	b.ReportAllocs()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		if err := benchCycle(ctx, p, name); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "roundtrips/cycle")
	b.ReportMetric(benchMicros(before.Utime, after.Utime)/float64(b.N), "user-us/cycle")
	b.ReportMetric(benchMicros(before.Stime, after.Stime)/float64(b.N), "sys-us/cycle")
}

// benchMicros is the CPU time between two rusage readings, in microseconds.
func benchMicros(from, to syscall.Timeval) float64 {
	return float64(to.Sec-from.Sec)*1e6 + float64(to.Usec-from.Usec)
}

// benchStatement is one row of pg_stat_statements.
type benchStatement struct {
	query string
	calls int64
	rows  int64
}

// benchObserver reads pg_stat_statements of one database on its own
// connection, which does not track its own statements
// (pg_stat_statements.track = none for that session), so that everything it
// reads comes from the connection under test.
type benchObserver struct {
	conn *pgx.Conn
	dbid uint32
}

func benchObserve(t *testing.T, url string) *benchObserver {
	t.Helper()
	ctx := t.Context()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Connect(ctx, cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	for _, stmt := range []string{
		"CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
		"SET pg_stat_statements.track = 'none'",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v (the server needs shared_preload_libraries=pg_stat_statements and a superuser)", stmt, err)
		}
	}
	o := &benchObserver{conn: conn}
	if err := conn.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&o.dbid); err != nil {
		t.Fatal(err)
	}
	return o
}

// reset forgets the statistics of this database only (other tests may run
// on the same server).
func (o *benchObserver) reset(t *testing.T) {
	t.Helper()
	if _, err := o.conn.Exec(t.Context(), "SELECT pg_stat_statements_reset(0, $1, 0)", o.dbid); err != nil {
		t.Fatal(err)
	}
}

// statements returns every statement run in this database since reset.
func (o *benchObserver) statements(t *testing.T) []benchStatement {
	t.Helper()
	rows, err := o.conn.Query(t.Context(),
		"SELECT query, calls, rows FROM pg_stat_statements WHERE dbid = $1 ORDER BY calls DESC, query", o.dbid)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (benchStatement, error) {
		var s benchStatement
		err := r.Scan(&s.query, &s.calls, &s.rows)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAcquireIsOneStatement proves SPEC §4's "one round trip": n acquires,
// for new rows, for existing free rows and refused for held rows, run
// exactly n executions of the acquire statement and nothing else in the
// database (pg_stat_statements), in exactly n round trips on the wire.
func TestAcquireIsOneStatement(t *testing.T) {
	const n = 25
	ctx := t.Context()
	url := pgtest.NewDB(t)
	obs := benchObserve(t, url)
	var trips, otherTrips benchRoundTrips
	p := benchProvider(t, benchPool(t, url, &trips, true), "bench-replica-1")
	other := benchProvider(t, benchPool(t, url, &otherTrips, true), "bench-replica-2")
	// Prepare the statements of both providers (pgx's statement cache), so
	// that what follows is the steady state.
	if err := benchCycle(ctx, p, "bench-warm-up"); err != nil {
		t.Fatal(err)
	}
	if err := benchCycle(ctx, other, "bench-warm-up"); err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%02d", i)
	}
	held := make([]*Lock, n)

	phases := []struct {
		name     string
		trips    *benchRoundTrips
		wantRows int64
		before   func() error // not measured
		acquire  func(i int) error
	}{
		{"acquires of new names insert a row each", &trips, n, nil, func(i int) error {
			l, err := p.TryLock(ctx, names[i], benchAtMostFor, 0)
			held[i] = l
			return err
		}},
		{"acquires of held names are refused", &otherTrips, 0, nil, func(i int) error {
			if _, err := other.TryLock(ctx, names[i], benchAtMostFor, 0); !errors.Is(err, ErrHeldElsewhere) {
				return fmt.Errorf("got %v, want ErrHeldElsewhere", err)
			}
			return nil
		}},
		{"acquires of free existing names update a row each", &otherTrips, n, func() error {
			for _, l := range held {
				if err := l.Unlock(ctx); err != nil {
					return err
				}
			}
			return nil
		}, func(i int) error {
			_, err := other.TryLock(ctx, names[i], benchAtMostFor, 0)
			return err
		}},
	}
	for _, ph := range phases {
		if ph.before != nil {
			if err := ph.before(); err != nil {
				t.Fatalf("%s: %v", ph.name, err)
			}
		}
		obs.reset(t)
		ph.trips.reset()
		for i := range n {
			if err := ph.acquire(i); err != nil {
				t.Fatalf("%s: acquire %d: %v", ph.name, i, err)
			}
		}
		got := obs.statements(t)
		if len(got) != 1 {
			t.Fatalf("%s: %d acquires ran %d distinct statements, want exactly 1 (the acquire):\n%s", ph.name, n, len(got), benchFormat(got))
		}
		s := got[0]
		if !strings.HasPrefix(s.query, `INSERT INTO "shedlock"`) || !strings.Contains(s.query, "ON CONFLICT") {
			t.Errorf("%s: the statement is not the acquire:\n%s", ph.name, benchFormat(got))
		}
		if s.calls != n || s.rows != ph.wantRows {
			t.Errorf("%s: acquire statement ran %d times affecting %d rows; want %d times, %d rows", ph.name, s.calls, s.rows, n, ph.wantRows)
		}
		if rt := ph.trips.trips.Load(); rt != n {
			t.Errorf("%s: %d acquires took %d round trips, want %d", ph.name, n, rt, n)
		}
	}
}

func benchFormat(ss []benchStatement) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "  calls=%d rows=%d %s\n", s.calls, s.rows, s.query)
	}
	return b.String()
}

// TestBenchPgbenchScriptRunsTheProviderStatements checks that the pgbench
// script in scripts/bench-locks.sh runs exactly the provider's acquire and
// unlock statements, so the comparison stays fair when the SQL changes.
func TestBenchPgbenchScriptRunsTheProviderStatements(t *testing.T) {
	path := filepath.Join("..", "..", "scripts", "bench-locks.sh")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stmts []string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "<<'PGBENCH'"):
			in = true
		case in && line == "PGBENCH":
			in = false
		case in && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "\\") && !strings.HasPrefix(line, "--"):
			stmts = append(stmts, strings.TrimSuffix(line, ";"))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// pgbench variables stand for the provider's parameters.
	params := strings.NewReplacer(":lockname", "$1", ":atmostfor", "$2", ":atleastfor", "$2", ":lockedby", "$3")
	for i := range stmts {
		stmts[i] = params.Replace(stmts[i])
	}
	p := benchProvider(t, nil, "bench-replica-1")
	want := []string{p.acquireSQL, p.unlockSQL}
	if len(stmts) != len(want) {
		t.Fatalf("%s: found %d statements in the PGBENCH here-document, want 2 (acquire, unlock): %q", path, len(stmts), stmts)
	}
	for i := range want {
		if stmts[i] != want[i] {
			t.Errorf("%s: statement %d differs from the provider's\n got: %s\nwant: %s", path, i+1, stmts[i], want[i])
		}
	}
}
