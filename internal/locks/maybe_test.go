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
		ctx, cancel := context.WithTimeout(t.Context(), time.Second) // long enough to be sent on a loaded machine
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
	// As if the try had taken the lock before its answer was lost (the
	// abandoned statement may do so itself once the row lock goes, or be
	// cancelled first: the row ends the same either way).
	taken := try()
	setRow := func(by, lockedAgo, until string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `UPDATE shedlock SET locked_by = $1, locked_at = timezone('utc', now()) - $2::interval,
			lock_until = timezone('utc', now()) - $2::interval + $3::interval WHERE name = 'job'`, by, lockedAgo, until); err != nil {
			t.Fatal(err)
		}
	}
	setRow("r1", "0 s", "1 minute")
	if err := taken.Lock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isFree(t, pool, defaultTable, "job") {
		t.Fatalf("the lock the try took is still held after its give-back: %+v", readRow(t, pool, defaultTable, "job"))
	}

	// Rows the try did not take: nothing changes.
	for _, c := range []struct{ what, by, ago, until string }{
		{"this holder's earlier lock, held for its minimum gap", "r1", "1 s", "5 minutes"},
		{"this holder's lock taken before the try was sent (a predecessor with the same id)", "r1", "30 s", "1 minute"},
		{"another holder's lock", "r2", "0 s", "1 minute"},
	} {
		setRow(c.by, c.ago, c.until)
		before := readRow(t, pool, defaultTable, "job")
		if err := try().Lock.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		if after := readRow(t, pool, defaultTable, "job"); after != before {
			t.Errorf("%s: the give-back changed it to %+v, was %+v", c.what, after, before)
		}
	}
}
