package locks_test

// ShedLock's provider test cases (SPEC §4), each against its own database.
// Expiry is always judged in database time: a test that waits for a lock to
// expire polls the database, and checks that the next holder's locked_at is
// not before the previous lock_until.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

var defaultTable = locks.DefaultTable()

func TestProviderTakesAFreeLockInOneStatementInDatabaseTime(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	q := &countingQuerier{q: pool}
	a := newProvider(t, q, defaultTable, "replica-a")
	if err := a.CheckSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	q.n.Store(0)

	before := dbNow(t, pool)
	l := mustLock(t, a, "nightly-report", 1001*time.Millisecond, 0)
	after := dbNow(t, pool)
	if n := q.n.Load(); n != 1 {
		t.Errorf("TryLock sent %d statements, want 1", n)
	}
	if l.Name() != "nightly-report" {
		t.Errorf("Name() = %q", l.Name())
	}
	r := readRow(t, pool, defaultTable, "nightly-report")
	if r.LockedBy != "replica-a" {
		t.Errorf("locked_by = %q, want replica-a", r.LockedBy)
	}
	if r.LockedAt.Before(before) || r.LockedAt.After(after) {
		t.Errorf("locked_at = %v, want database now, between %v and %v", r.LockedAt, before, after)
	}
	// atMostFor goes to the database with millisecond precision, as in ShedLock.
	if got := r.LockUntil.Sub(r.LockedAt); got != 1001*time.Millisecond {
		t.Errorf("lock_until - locked_at = %v, want 1.001s", got)
	}
}

func TestProviderRefusesALockHeldByAnotherHolder(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	mustLock(t, a, "job", time.Minute, 0)
	before := readRow(t, pool, defaultTable, "job")
	mustBeRefused(t, b, "job")
	if after := readRow(t, pool, defaultTable, "job"); after != before {
		t.Errorf("a refused lock changed the row: before %+v, after %+v", before, after)
	}
}

func TestProviderKeepsLockNamesIndependent(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	la := mustLock(t, a, "job-1", time.Minute, 0)
	lb := mustLock(t, b, "job-2", time.Minute, 0)
	mustBeRefused(t, a, "job-2")
	mustBeRefused(t, b, "job-1")
	mustUnlock(t, la)
	mustBeRefused(t, a, "job-2")
	mustLock(t, b, "job-1", time.Minute, 0)
	mustUnlock(t, lb)
}

func TestProviderRefusesTheSameHolderTwiceInARowWhileUnexpired(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")

	l := mustLock(t, a, "job", time.Minute, 0)
	mustBeRefused(t, a, "job")
	// The refusal left the first lock intact: it still unlocks.
	mustUnlock(t, l)
	mustLock(t, a, "job", time.Minute, 0)
}

func TestProviderRetakesALockOnceItExpires(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	mustLock(t, a, "job", time.Second, 0)
	first := readRow(t, pool, defaultTable, "job")
	mustBeRefused(t, b, "job")
	mustBeRefused(t, a, "job")

	lockEventually(t, b, "job", time.Minute, 0)
	second := readRow(t, pool, defaultTable, "job")
	if second.LockedBy != "replica-b" {
		t.Errorf("locked_by = %q, want replica-b", second.LockedBy)
	}
	if second.LockedAt.Before(first.LockUntil) {
		t.Errorf("replica-b took the lock at %v, before it expired at %v", second.LockedAt, first.LockUntil)
	}
}

func TestProviderRetakesALockRightAfterUnlock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	mustUnlock(t, mustLock(t, a, "job", time.Minute, 0))
	lb := mustLock(t, b, "job", time.Minute, 0)
	mustUnlock(t, lb)
	mustLock(t, a, "job", time.Minute, 0)
}

func TestProviderKeepsALockUntilAtLeastForAfterUnlock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")
	const atLeastFor = time.Second

	mustUnlock(t, mustLock(t, a, "job", time.Minute, atLeastFor))
	first := readRow(t, pool, defaultTable, "job")
	if want := first.LockedAt.Add(atLeastFor); !first.LockUntil.Equal(want) {
		t.Errorf("after unlock lock_until = %v, want locked_at + atLeastFor = %v", first.LockUntil, want)
	}
	mustBeRefused(t, b, "job")
	mustBeRefused(t, a, "job")

	lockEventually(t, b, "job", time.Minute, 0)
	if second := readRow(t, pool, defaultTable, "job"); second.LockedAt.Before(first.LockedAt.Add(atLeastFor)) {
		t.Errorf("replica-b took the lock at %v, before locked_at + atLeastFor = %v", second.LockedAt, first.LockedAt.Add(atLeastFor))
	}
}

// Release frees a lock at once, in one statement, however long its
// atLeastFor: the runner's giveBack, for a tick that ran elsewhere.
func TestProviderReleaseFreesALockAtOnceWhateverItsAtLeastFor(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	l := mustLock(t, a, "job", time.Minute, 30*time.Second)
	lockedAt := readRow(t, pool, defaultTable, "job").LockedAt
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("release: %v", err)
	}
	if r := readRow(t, pool, defaultTable, "job"); !r.LockUntil.Before(lockedAt.Add(30 * time.Second)) {
		t.Errorf("lock_until = %v after release, want the database now of the release, not locked_at + atLeastFor", r.LockUntil)
	}
	mustLock(t, b, "job", time.Minute, 0)
	if err := l.Release(t.Context()); !errors.Is(err, locks.ErrLockUsed) {
		t.Errorf("a second release = %v, want ErrLockUsed", err)
	}
}

func TestProviderFreesALockAtOnceWhenAtLeastForHasPassed(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")
	const atLeastFor = 50 * time.Millisecond

	l := mustLock(t, a, "job", time.Minute, atLeastFor)
	lockedAt := readRow(t, pool, defaultTable, "job").LockedAt
	eventually(t, "atLeastFor to pass", func() bool { return dbNow(t, pool).After(lockedAt.Add(atLeastFor)) })
	mustUnlock(t, l)
	if r := readRow(t, pool, defaultTable, "job"); !r.LockUntil.After(lockedAt.Add(atLeastFor)) {
		t.Errorf("lock_until = %v, want the database now of the unlock, after %v", r.LockUntil, lockedAt.Add(atLeastFor))
	}
	mustLock(t, b, "job", time.Minute, 0)
}

func TestProviderExtendsALock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	l := mustLock(t, a, "job", time.Second, 0)
	first := readRow(t, pool, defaultTable, "job")
	l2, err := l.Extend(t.Context(), time.Minute, 0)
	if err != nil {
		t.Fatalf("extend: %v", err)
	}
	if l2 == l || l2.Name() != "job" {
		t.Fatalf("extend returned %p %q, want a new lock object for job", l2, l2.Name())
	}
	extended := readRow(t, pool, defaultTable, "job")
	if extended.LockedAt != first.LockedAt || extended.LockedBy != "replica-a" {
		t.Errorf("extend changed locked_at or locked_by: before %+v, after %+v", first, extended)
	}
	if got := extended.LockUntil.Sub(first.LockedAt); got < time.Minute {
		t.Errorf("after extend lock_until is locked_at + %v, want at least + 1m", got)
	}
	// Past the original lock_until, the lock is still held.
	eventually(t, "the original lock_until to pass", func() bool { return dbNow(t, pool).After(first.LockUntil) })
	mustBeRefused(t, b, "job")

	mustUnlock(t, l2)
	mustLock(t, b, "job", time.Minute, 0)
}

func TestProviderExtendsALockManyTimes(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	l := mustLock(t, a, "job", time.Minute, 0)
	prev := readRow(t, pool, defaultTable, "job")
	for i := range 20 {
		next, err := l.Extend(t.Context(), time.Minute, 0)
		if err != nil {
			t.Fatalf("extend %d: %v", i, err)
		}
		r := readRow(t, pool, defaultTable, "job")
		if r.LockUntil.Before(prev.LockUntil) || r.LockedAt != prev.LockedAt || r.LockedBy != "replica-a" {
			t.Fatalf("extend %d: row went from %+v to %+v", i, prev, r)
		}
		mustBeRefused(t, b, "job")
		prev, l = r, next
	}
	mustUnlock(t, l)
	mustLock(t, b, "job", time.Minute, 0)
}

func TestProviderRefusesExtendAfterUnlock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	l := mustLock(t, a, "job", time.Minute, 0)
	mustUnlock(t, l)
	before := readRow(t, pool, defaultTable, "job")
	if l2, err := l.Extend(t.Context(), time.Minute, 0); !errors.Is(err, locks.ErrLockUsed) || l2 != nil {
		t.Fatalf("extend after unlock: got %v, %v; want locks.ErrLockUsed", l2, err)
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, locks.ErrLockUsed) {
		t.Fatalf("second unlock: got %v, want locks.ErrLockUsed", err)
	}
	if after := readRow(t, pool, defaultTable, "job"); after != before {
		t.Errorf("a used lock object changed the row: before %+v, after %+v", before, after)
	}
	mustLock(t, b, "job", time.Minute, 0)
}

func TestProviderRefusesExtendAfterExpiry(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")

	l := mustLock(t, a, "job", 100*time.Millisecond, 0)
	waitFree(t, pool, defaultTable, "job")
	before := readRow(t, pool, defaultTable, "job")
	if l2, err := l.Extend(t.Context(), time.Minute, 0); !errors.Is(err, locks.ErrLockLost) || l2 != nil {
		t.Fatalf("extend after expiry: got %v, %v; want locks.ErrLockLost", l2, err)
	}
	if after := readRow(t, pool, defaultTable, "job"); after != before {
		t.Errorf("a lost extend changed the row: before %+v, after %+v", before, after)
	}
	// Like ShedLock, the object is spent after an extend that reached the database.
	if err := l.Unlock(t.Context()); !errors.Is(err, locks.ErrLockUsed) {
		t.Errorf("unlock after a lost extend: got %v, want locks.ErrLockUsed", err)
	}
}

func TestProviderRefusesExtendAfterAnotherHolderTookTheExpiredLock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	la := mustLock(t, a, "job", 100*time.Millisecond, 0)
	lb := lockEventually(t, b, "job", time.Minute, 0)
	held := readRow(t, pool, defaultTable, "job")
	if _, err := la.Extend(t.Context(), time.Minute, 0); !errors.Is(err, locks.ErrLockLost) {
		t.Fatalf("extend by the former holder: got %v, want locks.ErrLockLost", err)
	}
	if after := readRow(t, pool, defaultTable, "job"); after != held {
		t.Errorf("the former holder's extend changed the row: before %+v, after %+v", held, after)
	}
	mustUnlock(t, lb)
}

func TestProviderUnlockByAFormerHolderLeavesTheNewHolderAlone(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	la := mustLock(t, a, "job", 100*time.Millisecond, 0)
	lockEventually(t, b, "job", time.Minute, 0)
	held := readRow(t, pool, defaultTable, "job")
	mustUnlock(t, la)
	if after := readRow(t, pool, defaultTable, "job"); after != held {
		t.Errorf("the former holder's unlock changed the row: before %+v, after %+v", held, after)
	}
	mustBeRefused(t, a, "job")
}

func TestProviderHonoursAtLeastForAfterExtend(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")
	const atLeastFor = time.Second

	l := mustLock(t, a, "job", time.Minute, 0)
	l2, err := l.Extend(t.Context(), time.Minute, atLeastFor)
	if err != nil {
		t.Fatalf("extend: %v", err)
	}
	mustUnlock(t, l2)
	first := readRow(t, pool, defaultTable, "job")
	if want := first.LockedAt.Add(atLeastFor); !first.LockUntil.Equal(want) {
		t.Errorf("after unlock lock_until = %v, want locked_at + the extend's atLeastFor = %v", first.LockUntil, want)
	}
	mustBeRefused(t, b, "job")

	lockEventually(t, b, "job", time.Minute, 0)
	if second := readRow(t, pool, defaultTable, "job"); second.LockedAt.Before(first.LockUntil) {
		t.Errorf("replica-b took the lock at %v, before %v", second.LockedAt, first.LockUntil)
	}
}

func TestProviderInvalidatesTheOldLockObjectAfterExtend(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := newProvider(t, pool, defaultTable, "replica-a")
	b := newProvider(t, pool, defaultTable, "replica-b")

	l := mustLock(t, a, "job", time.Minute, 0)
	l2, err := l.Extend(t.Context(), time.Minute, 0)
	if err != nil {
		t.Fatalf("extend: %v", err)
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, locks.ErrLockUsed) {
		t.Errorf("unlock of the old object: got %v, want locks.ErrLockUsed", err)
	}
	if _, err := l.Extend(t.Context(), time.Minute, 0); !errors.Is(err, locks.ErrLockUsed) {
		t.Errorf("extend of the old object: got %v, want locks.ErrLockUsed", err)
	}
	mustBeRefused(t, b, "job")
	mustUnlock(t, l2)
	mustLock(t, b, "job", time.Minute, 0)
}

func TestProviderTakesAPreexistingExpiredRowInOneStatement(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	exec(t, pool,
		`INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES
		   ('expired', timezone('utc', CURRENT_TIMESTAMP) - interval '1 hour', timezone('utc', CURRENT_TIMESTAMP) - interval '2 hours', 'old-host'),
		   ('live', timezone('utc', CURRENT_TIMESTAMP) + interval '1 hour', timezone('utc', CURRENT_TIMESTAMP), 'old-host')`)
	q := &countingQuerier{q: pool}
	a := newProvider(t, q, defaultTable, "replica-a")

	before := dbNow(t, pool)
	mustLock(t, a, "expired", time.Minute, 0)
	if n := q.n.Load(); n != 1 {
		t.Errorf("TryLock on an expired row sent %d statements, want 1", n)
	}
	r := readRow(t, pool, defaultTable, "expired")
	if r.LockedBy != "replica-a" || r.LockedAt.Before(before) || r.LockUntil.Sub(r.LockedAt) != time.Minute {
		t.Errorf("row after taking an expired lock: %+v", r)
	}

	q.n.Store(0)
	mustBeRefused(t, a, "live")
	if n := q.n.Load(); n != 1 {
		t.Errorf("TryLock on a live row sent %d statements, want 1", n)
	}
	if r := readRow(t, pool, defaultTable, "live"); r.LockedBy != "old-host" {
		t.Errorf("a refused lock changed the row: %+v", r)
	}
}

func TestProviderRejectsInvalidArgumentsWithoutTouchingTheDatabase(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	q := &countingQuerier{q: pool}
	p := newProvider(t, q, defaultTable, "replica-a")

	tests := []struct {
		name                  string
		lock                  string
		atMostFor, atLeastFor time.Duration
	}{
		{"an empty name is invalid", "", time.Minute, 0},
		{"a name of 65 bytes is invalid", strings.Repeat("n", 65), time.Minute, 0},
		{"a name of 65 two-byte characters is invalid", strings.Repeat("é", 65), time.Minute, 0},
		{"a name that is not valid UTF-8 is invalid", "job\xff", time.Minute, 0},
		{"a name with a NUL character is invalid", "job\x00x", time.Minute, 0},
		{"atLeastFor longer than atMostFor is invalid", "job", time.Second, time.Second + time.Millisecond},
		{"a zero atMostFor is invalid", "job", 0, 0},
		{"a negative atMostFor is invalid", "job", -time.Minute, 0},
		{"an atMostFor under a millisecond is invalid", "job", 999 * time.Microsecond, 0},
		{"a negative atLeastFor is invalid", "job", time.Minute, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q.n.Store(0)
			l, err := p.TryLock(t.Context(), tt.lock, tt.atMostFor, tt.atLeastFor)
			if !errors.Is(err, locks.ErrInvalid) || l != nil {
				t.Fatalf("TryLock(%q, %v, %v) = %v, %v; want locks.ErrInvalid", tt.lock, tt.atMostFor, tt.atLeastFor, l, err)
			}
			if n := q.n.Load(); n != 0 {
				t.Errorf("an invalid TryLock sent %d statements", n)
			}
		})
	}

	t.Run("the limits themselves are valid", func(t *testing.T) {
		mustUnlock(t, mustLock(t, p, strings.Repeat("n", 64), time.Millisecond, time.Millisecond))
		// 64 characters of two bytes each: VARCHAR(64) counts characters.
		mustUnlock(t, mustLock(t, p, strings.Repeat("é", 64), time.Millisecond, time.Millisecond))
		mustUnlock(t, mustLock(t, p, "job", time.Minute, time.Minute))
	})

	t.Run("an invalid extend leaves the lock object usable", func(t *testing.T) {
		l := mustLock(t, p, "extend-args", time.Minute, 0)
		for _, d := range [][2]time.Duration{{0, 0}, {time.Second, 2 * time.Second}, {time.Minute, -time.Second}} {
			if l2, err := l.Extend(t.Context(), d[0], d[1]); !errors.Is(err, locks.ErrInvalid) || l2 != nil {
				t.Errorf("Extend(%v, %v) = %v, %v; want locks.ErrInvalid", d[0], d[1], l2, err)
			}
		}
		mustUnlock(t, l)
	})

	t.Run("a provider needs a holder of at most 255 characters", func(t *testing.T) {
		for _, by := range []string{"", strings.Repeat("h", 256), strings.Repeat("ü", 256)} {
			if _, err := locks.NewProvider(pool, defaultTable, by); !errors.Is(err, locks.ErrInvalid) {
				t.Errorf("NewProvider(locked_by of %d bytes): got %v, want locks.ErrInvalid", len(by), err)
			}
		}
		newProvider(t, pool, defaultTable, strings.Repeat("h", 255))
		newProvider(t, pool, defaultTable, strings.Repeat("ü", 255))
	})
}

// TestProviderKeepsTwoCountersExactWithEightConcurrentWorkers is ShedLock's
// fuzz test: eight holders on two names, each doing a non-atomic
// read-modify-write of a counter while it holds the lock. Any overlap of two
// holders would lose an increment.
func TestProviderKeepsTwoCountersExactWithEightConcurrentWorkers(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewDB(t), 16)
	exec(t, pool,
		`CREATE TABLE fuzz_counter (name text PRIMARY KEY, n bigint NOT NULL)`,
		`INSERT INTO fuzz_counter VALUES ('fuzz-1', 0), ('fuzz-2', 0)`)
	names := [2]string{"fuzz-1", "fuzz-2"}
	const (
		workers    = 8
		iterations = 150
		timeLimit  = 20 * time.Second
	)
	var (
		acquired, refused [2]atomic.Int64
		inside            [2]atomic.Bool
	)
	ctx := t.Context()
	stop := time.Now().Add(timeLimit)
	var wg sync.WaitGroup
	for w := range workers {
		p := newProvider(t, pool, defaultTable, fmt.Sprintf("worker-%d", w))
		wg.Go(func() {
			for i := 0; i < iterations && time.Now().Before(stop); i++ {
				k := (w + i) % 2
				name := names[k]
				l, err := p.TryLock(ctx, name, time.Minute, 0)
				if errors.Is(err, locks.ErrHeldElsewhere) {
					refused[k].Add(1)
					continue
				}
				if err != nil {
					t.Errorf("%s: lock %s: %v", p.LockedBy(), name, err)
					return
				}
				if !inside[k].CompareAndSwap(false, true) {
					t.Errorf("%s: took %s while another worker held it", p.LockedBy(), name)
				}
				var n int64
				if err := pool.QueryRow(ctx, `SELECT n FROM fuzz_counter WHERE name = $1`, name).Scan(&n); err != nil {
					t.Errorf("read counter: %v", err)
					return
				}
				if _, err := pool.Exec(ctx, `UPDATE fuzz_counter SET n = $2 WHERE name = $1`, name, n+1); err != nil {
					t.Errorf("write counter: %v", err)
					return
				}
				acquired[k].Add(1)
				inside[k].Store(false)
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("%s: unlock %s: %v", p.LockedBy(), name, err)
					return
				}
			}
		})
	}
	wg.Wait()

	for k, name := range names {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT n FROM fuzz_counter WHERE name = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d acquisitions, %d refusals, counter %d", name, acquired[k].Load(), refused[k].Load(), n)
		if n != acquired[k].Load() {
			t.Errorf("%s: counter is %d after %d acquisitions: two holders overlapped", name, n, acquired[k].Load())
		}
		if acquired[k].Load() == 0 {
			t.Errorf("%s: no worker ever took the lock", name)
		}
	}
	if refused[0].Load()+refused[1].Load() == 0 {
		t.Errorf("no TryLock was ever refused: the workers did not contend")
	}
}
