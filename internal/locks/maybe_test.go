package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/locks"
)

// A try whose answer is lost (here: its statement deadline passes while it
// waits on a row lock, and the statement goes on without its client)
// returns a MaybeHeldError. Its Lock gives the lock
// back as the run's unlock would have, if the row is this holder's, and
// changes nothing when it is another's.
func TestATryWhoseAnswerIsLostReturnsALockThatGivesBackOnlyItsOwnRow(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p1 := newProvider(t, pool, defaultTable, "r1")
	p2 := newProvider(t, pool, defaultTable, "r2")
	mustUnlock(t, mustLock(t, p2, "job", time.Minute, 0)) // the row exists, free

	try := func() *locks.MaybeHeldError {
		t.Helper()
		tx, err := pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(t.Context(), `SELECT 1 FROM shedlock WHERE name = 'job' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		l, err := p1.TryLock(ctx, "job", time.Minute, 5*time.Second)
		var mh *locks.MaybeHeldError
		if !errors.As(err, &mh) || l != nil {
			t.Fatalf("a try whose deadline passed while it waited: lock %v, error %v; want a MaybeHeldError", l != nil, err)
		}
		if mh.Lock.Name() != "job" {
			t.Fatalf("MaybeHeldError's lock is %q, want job", mh.Lock.Name())
		}
		return mh
	}
	// The try's statement goes on waiting in the server after the client
	// gave up; once the row lock goes, it takes the lock, commits, and
	// finds no one to answer: the lock is taken and its answer lost.
	taken := try()
	deadline := time.Now().Add(waitFor)
	for readRow(t, pool, defaultTable, "job").LockedBy != "r1" {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned try never took the lock")
		}
		time.Sleep(pollEvery)
	}
	row := readRow(t, pool, defaultTable, "job")
	if got := row.LockUntil.Sub(row.LockedAt); got != time.Minute {
		t.Fatalf("the abandoned try's lock: lock_until - locked_at = %v, want its atMostFor 1m", got)
	}
	if err := taken.Lock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	row = readRow(t, pool, defaultTable, "job")
	if got := row.LockUntil.Sub(row.LockedAt); got != 5*time.Second {
		t.Fatalf("after giving back its own row: lock_until - locked_at = %v, want the atLeastFor 5s", got)
	}

	// Another holder's row: nothing changes. (Its lock_until ahead, the
	// second try's abandoned statement cannot take it either.)
	if _, err := pool.Exec(t.Context(), `UPDATE shedlock SET locked_by = 'r2', locked_at = timezone('utc', now()),
		lock_until = timezone('utc', now()) + interval '1 minute' WHERE name = 'job'`); err != nil {
		t.Fatal(err)
	}
	notTaken := try()
	before := readRow(t, pool, defaultTable, "job")
	if err := notTaken.Lock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if after := readRow(t, pool, defaultTable, "job"); after != before {
		t.Fatalf("giving back a lock another holder has changed its row: %+v, was %+v", after, before)
	}
}
