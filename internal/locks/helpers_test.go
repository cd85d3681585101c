package locks_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// pollEvery is the pause between two tries of a poll; waitFor is how long a
// poll may take before the test fails. Neither is a synchronisation: every
// poll checks a condition in the database.
const (
	pollEvery = 10 * time.Millisecond
	waitFor   = 15 * time.Second
)

// dbNowSQL is ShedLock's notion of now (a UTC wall clock).
const dbNowSQL = "SELECT timezone('utc', CURRENT_TIMESTAMP)"

// openPool opens a pool on url the way studioctl does (sessions in UTC) with
// room for maxConns connections, closed when the test ends.
func openPool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := db.OpenConfig(context.Background(), cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newPool is a pool on a fresh migrated database.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return openPool(t, pgtest.NewDB(t), 0)
}

// newProvider is locks.NewProvider that fails the test on error.
func newProvider(t testing.TB, q locks.Querier, table locks.Table, lockedBy string) *locks.Provider {
	t.Helper()
	p, err := locks.NewProvider(q, table, lockedBy)
	if err != nil {
		t.Fatalf("new provider %q: %v", lockedBy, err)
	}
	return p
}

// newAdmin is locks.NewAdmin that fails the test on error.
func newAdmin(t testing.TB, q locks.Querier, table locks.Table) *locks.Admin {
	t.Helper()
	a, err := locks.NewAdmin(q, table)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mustLock takes a lock that the test expects to be free.
func mustLock(t testing.TB, p *locks.Provider, name string, atMostFor, atLeastFor time.Duration) *locks.Lock {
	t.Helper()
	l, err := p.TryLock(t.Context(), name, atMostFor, atLeastFor)
	if err != nil {
		t.Fatalf("%s: lock %q: %v", p.LockedBy(), name, err)
	}
	return l
}

// mustBeRefused checks that p cannot take name now.
func mustBeRefused(t testing.TB, p *locks.Provider, name string) {
	t.Helper()
	l, err := p.TryLock(t.Context(), name, time.Minute, 0)
	if !errors.Is(err, locks.ErrHeldElsewhere) {
		t.Fatalf("%s: lock %q: got lock %v, error %v; want locks.ErrHeldElsewhere", p.LockedBy(), name, l != nil, err)
	}
}

// mustUnlock unlocks l.
func mustUnlock(t testing.TB, l *locks.Lock) {
	t.Helper()
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("unlock %q: %v", l.Name(), err)
	}
}

// lockRow is one row of a lock table, times in UTC.
type lockRow struct {
	LockedBy  string
	LockedAt  time.Time
	LockUntil time.Time
}

// readRow reads the row of name from table.
func readRow(t testing.TB, q locks.Querier, table locks.Table, name string) lockRow {
	t.Helper()
	sql := "SELECT " + locks.ColumnSQL(table.LockedBy) + ", " + locks.ColumnSQL(table.LockedAt) + ", " + locks.ColumnSQL(table.LockUntil) +
		" FROM " + locks.TableSQL(table) + " WHERE " + locks.ColumnSQL(table.NameCol) + " = $1"
	var r lockRow
	if err := q.QueryRow(t.Context(), sql, name).Scan(&r.LockedBy, &r.LockedAt, &r.LockUntil); err != nil {
		t.Fatalf("read lock row %q: %v", name, err)
	}
	r.LockedAt, r.LockUntil = r.LockedAt.UTC(), r.LockUntil.UTC()
	return r
}

// dbNow is the database's now as ShedLock computes it, in UTC.
func dbNow(t testing.TB, q locks.Querier) time.Time {
	t.Helper()
	var now time.Time
	if err := q.QueryRow(t.Context(), dbNowSQL).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now.UTC()
}

// isFree says whether name's lock_until has passed in database time.
func isFree(t testing.TB, q locks.Querier, table locks.Table, name string) bool {
	t.Helper()
	sql := "SELECT " + locks.ColumnSQL(table.LockUntil) + " <= timezone('utc', CURRENT_TIMESTAMP) FROM " + locks.TableSQL(table) +
		" WHERE " + locks.ColumnSQL(table.NameCol) + " = $1"
	var free bool
	if err := q.QueryRow(t.Context(), sql, name).Scan(&free); err != nil {
		t.Fatalf("read lock row %q: %v", name, err)
	}
	return free
}

// waitFree polls until name's lock_until has passed in database time.
func waitFree(t testing.TB, q locks.Querier, table locks.Table, name string) {
	t.Helper()
	eventually(t, "lock "+name+" to expire", func() bool { return isFree(t, q, table, name) })
}

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", waitFor, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what)
		case <-time.After(pollEvery):
		}
	}
}

// lockEventually polls TryLock until it succeeds; any error other than
// ErrHeldElsewhere fails the test.
func lockEventually(t testing.TB, p *locks.Provider, name string, atMostFor, atLeastFor time.Duration) *locks.Lock {
	t.Helper()
	var l *locks.Lock
	eventually(t, p.LockedBy()+" to take "+name, func() bool {
		var err error
		l, err = p.TryLock(t.Context(), name, atMostFor, atLeastFor)
		if err != nil && !errors.Is(err, locks.ErrHeldElsewhere) {
			t.Fatalf("%s: lock %q: %v", p.LockedBy(), name, err)
		}
		return err == nil
	})
	return l
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// exec runs statements on q, failing the test on the first error.
func exec(t testing.TB, q locks.Querier, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := q.Exec(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// countingQuerier counts the statements sent through it.
type countingQuerier struct {
	q locks.Querier
	n atomic.Int64
}

func (c *countingQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.q.Exec(ctx, sql, args...)
}

func (c *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.q.Query(ctx, sql, args...)
}

func (c *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.q.QueryRow(ctx, sql, args...)
}
