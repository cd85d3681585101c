package runner

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
)

// gapLock records the minimum gap of each extension.
type gapLock struct {
	mu   *sync.Mutex
	gaps *[]time.Duration
}

func (g gapLock) Extend(_ context.Context, _, atLeastFor time.Duration) (Lock, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	*g.gaps = append(*g.gaps, atLeastFor)
	return g, nil
}

func (gapLock) Unlock(context.Context) error  { return nil }
func (gapLock) Release(context.Context) error { return nil }
func (gapLock) Token() int64                  { return 0 }

// The keep-alive extends a lock with the minimum gap it was taken with: a
// live run's (jobs.LockAtLeastFor), and none for a catch-up's or a
// backfill's. It extended every lock with the live gap, so a backfill run
// of an hourly job that lasted over half of lockAtMostFor held the lock
// up to 5 min past its end, and the live tick in that time found it held
// and was lost (adversarial pass of issue 24, D2).
func TestKeepAliveExtendsWithTheGapTheLockWasTakenWith(t *testing.T) {
	sched, err := jobs.Every(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, gap := range []time.Duration{0, jobs.LockAtLeastFor(sched)} {
		clk := clock.NewFake(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
		r := &Runner{o: Options{Clock: clk}, log: slog.New(slog.DiscardHandler)}
		var mu sync.Mutex
		var gaps []time.Duration
		held := &runLock{lock: gapLock{&mu, &gaps}, end: newLockDeadline(time.Now(), jobs.LockAtMostFor(sched)), atLeast: gap}
		js := &jobState{job: jobtask.Job{Job: jobs.Job{ID: "billing", Scope: jobs.ScopeInstallation, Schedule: sched}}}
		ctx, cancel := context.WithCancelCause(context.Background())
		var wg sync.WaitGroup
		stop := make(chan struct{})
		r.keepAlive(&wg, stop, ctx, cancel, js, sched, 1, held)
		clk.Advance(jobs.KeepAliveEvery(sched))
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(gaps)
			mu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond) // a poll with a deadline, not a synchronisation
		}
		close(stop)
		wg.Wait()
		cancel(nil)
		mu.Lock()
		if len(gaps) != 1 || gaps[0] != gap {
			t.Errorf("taken with a minimum gap of %v: extended with %v, want [%v]", gap, gaps, gap)
		}
		mu.Unlock()
	}
}
