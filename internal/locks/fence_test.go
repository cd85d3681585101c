package locks_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// A fenced provider gives each holder of a lock a token strictly greater
// than every earlier holder's, in the statement that takes the lock (issue
// 26, docs/fencing.md); a refused lock advances nothing, Extend keeps the
// token, and each lock name counts on its own.
func TestFencedLocksGetGrowingTokensInOneStatement(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	q := &countingQuerier{q: pool}
	a := newProvider(t, q, defaultTable, "replica-a").Fenced()
	b := newProvider(t, pool, defaultTable, "replica-b").Fenced()

	q.n.Store(0)
	l1 := mustLock(t, a, "job", time.Minute, 0)
	if n := q.n.Load(); n != 1 {
		t.Errorf("a fenced TryLock sent %d statements, want 1", n)
	}
	if l1.Token() != 1 {
		t.Fatalf("first token %d, want 1", l1.Token())
	}
	mustBeRefused(t, b, "job")
	l2, err := l1.Extend(t.Context(), time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != 1 {
		t.Errorf("token after Extend %d, want 1", l2.Token())
	}
	if err := l2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	l3 := mustLock(t, b, "job", time.Minute, 0)
	if l3.Token() != 2 {
		t.Errorf("token of the next holder %d, want 2 (a refused attempt advances nothing)", l3.Token())
	}
	if o := mustLock(t, a, "other", time.Minute, 0); o.Token() != 1 {
		t.Errorf("token of another lock %d, want 1", o.Token())
	}
	var token int64
	if err := pool.QueryRow(t.Context(), `SELECT token FROM studio_fence WHERE lock_name = 'job'`).Scan(&token); err != nil || token != 2 {
		t.Errorf("studio_fence says %d (%v), want 2", token, err)
	}
	// The ShedLock row is what an unfenced provider writes.
	if r := readRow(t, pool, defaultTable, "job"); r.LockedBy != "replica-b" {
		t.Errorf("locked_by = %q, want replica-b", r.LockedBy)
	}
	// Not fenced: no token.
	c := newProvider(t, pool, defaultTable, "replica-c")
	if u := mustLock(t, c, "plain", time.Minute, 0); u.Token() != 0 {
		t.Errorf("an unfenced lock has token %d, want 0", u.Token())
	}
}

// Eight fenced holders racing for one lock, 200 times: each taking gets a
// token one above the last, none twice.
func TestFencedTokensNeverRepeatUnderContention(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewDB(t), 10)
	const workers, rounds = 8, 200
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := range workers {
		p := newProvider(t, pool, defaultTable, "w"+string(rune('a'+w))).Fenced()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := p.TryLock(t.Context(), "contended", time.Minute, 0)
				if errors.Is(err, locks.ErrHeldElsewhere) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := seen[l.Token()]; dup {
					t.Errorf("token %d given to %s and %s", l.Token(), prev, p.LockedBy())
				}
				seen[l.Token()] = p.LockedBy()
				mu.Unlock()
				if err := l.Unlock(t.Context()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := int64(1); i <= int64(len(seen)); i++ {
		if _, ok := seen[i]; !ok {
			t.Fatalf("%d tokens given, but not %d: tokens skip", len(seen), i)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no lock taken")
	}
}
