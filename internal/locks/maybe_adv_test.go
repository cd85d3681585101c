package locks_test

// Adversarial tests of MaybeHeldError (a lock try whose answer was lost).
// The lost answer is made deterministic: the try's commit waits for a
// synchronous standby that does not exist, its deadline passes, pgx
// cancels and closes (pgconn.asyncClose), and PostgreSQL keeps the commit
// (a cancelled synchronous wait does not undo it). The answer never comes
// back: the lock is taken and the client does not know.

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// syncWaits makes every commit of a session with synchronous_commit = on
// wait for a standby that never comes, and every other session commit
// locally (synchronous_commit = 'local' server-wide), until restore. The
// tests that use it are not parallel: parallel tests of the package do not
// run meanwhile.
func syncWaits(t *testing.T) (restore func()) {
	t.Helper()
	admin := openPool(t, pgtest.AdminURL(t), 2)
	restore = func() {
		ctx := context.WithoutCancel(t.Context())
		for _, s := range []string{`ALTER SYSTEM RESET synchronous_standby_names`, `ALTER SYSTEM RESET synchronous_commit`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(ctx, s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	}
	t.Cleanup(restore)
	exec(t, admin, `ALTER SYSTEM SET synchronous_commit = 'local'`,
		`ALTER SYSTEM SET synchronous_standby_names = 'no_such_standby'`, `SELECT pg_reload_conf()`)
	// pg_reload_conf only signals: wait until a new session sees it.
	eventually(t, "the reload to apply", func() bool {
		var v string
		return admin.QueryRow(t.Context(), `SHOW synchronous_standby_names`).Scan(&v) == nil && v == "no_such_standby"
	})
	return restore
}

// syncPool is a pool of one connection on url whose session waits for
// the synchronous standby; the connection is made before syncWaits, so
// that setting it up waits for nothing.
func syncPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool := openPool(t, url+"&synchronous_commit=on", 1)
	var v string
	if err := pool.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&v); err != nil || v != "on" {
		t.Fatalf("the session's synchronous_commit is %q (%v), want on", v, err)
	}
	return pool
}

// lostTry is a try by p whose commit waits until its deadline: the answer
// is lost whatever the statement did. pgx's cancel request reaches the
// server after TryLock returns: the commit becomes visible then
// (waitCommitted).
func lostTry(t *testing.T, p *locks.Provider, name string, atMostFor, atLeastFor time.Duration) *locks.MaybeHeldError {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	l, err := p.TryLock(ctx, name, atMostFor, atLeastFor)
	var mh *locks.MaybeHeldError
	if !errors.As(err, &mh) || l != nil {
		t.Fatalf("a try whose answer was lost: lock %v, error %v (%T); want a MaybeHeldError", l != nil, err, err)
	}
	return mh
}

// waitCommitted waits until the lost try's commit is visible: the row
// is holder's.
func waitCommitted(t *testing.T, pool *pgxpool.Pool, holder string) {
	t.Helper()
	eventually(t, "the lost try's commit to be visible", func() bool {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM shedlock WHERE name = 'job' AND locked_by = $1`, holder).Scan(&n)
		return err == nil && n == 1
	})
}

// The try's commit is kept although its answer was lost: the lock is
// taken, a MaybeHeldError says so, and its give-back frees the lock at
// once (no run ran under it).
// Without the give-back the row would hold every holder off for the whole
// atMostFor. Deterministic, unlike a try abandoned behind a row lock,
// which races pgx's cancel request.
func TestATryCommittedWhileItsAnswerWasLostIsMaybeHeldAndGivenBack(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url, 4)
	lost := newProvider(t, syncPool(t, url), defaultTable, "r1")
	restore := syncWaits(t)
	mh := lostTry(t, lost, "job", time.Hour, 2*time.Second)
	waitCommitted(t, pool, "r1")
	row := readRow(t, pool, defaultTable, "job")
	if row.LockedBy != "r1" || row.LockUntil.Sub(row.LockedAt) != time.Hour {
		t.Fatalf("after the lost answer the row is %+v; want r1's, held for the atMostFor 1h (the commit stands)", row)
	}
	mustBeRefused(t, newProvider(t, pool, defaultTable, "r2"), "job")
	restore()
	if err := mh.Lock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isFree(t, pool, defaultTable, "job") {
		t.Fatalf("after the give-back the row is %+v, want it free (no run ran under the lost try's lock)", readRow(t, pool, defaultTable, "job"))
	}
	lockEventually(t, newProvider(t, pool, defaultTable, "r2"), "job", time.Minute, 0)
}

// The fenced acquire's token moves with the statement, not with the
// answer: a try whose answer was lost used a token, and the next holder's
// token is still strictly greater than every earlier holder's, the lost
// try's included.
func TestAFencedTryWhoseAnswerWasLostStillLeavesTheNextTokenGreater(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url, 4)
	first := mustLock(t, newProvider(t, pool, defaultTable, "r2").Fenced(), "job", time.Minute, 0)
	mustUnlock(t, first)
	lost := newProvider(t, syncPool(t, url), defaultTable, "r1").Fenced()
	restore := syncWaits(t)
	mh := lostTry(t, lost, "job", time.Hour, 0)
	waitCommitted(t, pool, "r1")
	restore()
	var token int64
	if err := pool.QueryRow(t.Context(), `SELECT token FROM `+locks.FenceTable+` WHERE lock_name = 'job'`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if token != first.Token()+1 {
		t.Fatalf("the fence token after the lost try is %d, want %d (the try took the lock and its token)", token, first.Token()+1)
	}
	if err := mh.Lock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	next := lockEventually(t, newProvider(t, pool, defaultTable, "r2").Fenced(), "job", time.Minute, 0)
	if next.Token() <= token {
		t.Fatalf("the next holder's token %d is not greater than the lost try's %d", next.Token(), token)
	}
}

// A try the server refused (a read-only session, as on a standby) took
// nothing: a plain error, no lock to give back.
func TestATryTheServerRefusedIsNotMaybeHeld(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ro := openPool(t, url+"&default_transaction_read_only=on", 2)
	_, err := newProvider(t, ro, defaultTable, "r1").TryLock(t.Context(), "job", time.Minute, 0)
	var mh *locks.MaybeHeldError
	if err == nil || errors.As(err, &mh) || errors.Is(err, locks.ErrHeldElsewhere) {
		t.Fatalf("a try in a read-only session: %v (%T); want a plain error", err, err)
	}
}

// A try that could not connect took nothing: a plain error.
func TestATryThatCouldNotConnectIsNotMaybeHeld(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg, err := pgxpool.ParseConfig("postgres://u:pw@" + addr + "/x?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // lazy: no connection yet
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, err = newProvider(t, pool, defaultTable, "r1").TryLock(t.Context(), "job", time.Minute, 0)
	var mh *locks.MaybeHeldError
	if err == nil || errors.As(err, &mh) {
		t.Fatalf("a try that could not connect: %v (%T); want a plain error", err, err)
	}
}
