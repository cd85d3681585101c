package runner_test

// Adversarial tests of the give-back of a lock try whose answer was lost
// (run.go: tryLock, releaseStale, releaseStaleAtStop). The lost answer is
// injected at the Locker: the real statement runs against PostgreSQL and
// its answer is dropped; the lock the runner is handed to give back is a
// real locks.MaybeHeldError's (a try by the same holder that found the
// pool without a free connection), so its Unlock is ShedLock's unlock
// statement, run against the database.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// maybeLocks makes real MaybeHeldError locks of holder replicaID on e's
// database: each comes from a try whose pool (one connection, held busy)
// gives it no connection before its deadline.
type maybeLocks struct {
	pool   *pgxpool.Pool
	locker runner.Locker
}

func newMaybeLocks(t *testing.T, e *env) *maybeLocks {
	t.Helper()
	cfg, err := db.ParsePoolConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := db.OpenConfig(t.Context(), cfg, e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p, err := locks.NewProvider(pool, locks.DefaultTable(), replicaID)
	if err != nil {
		t.Fatal(err)
	}
	return &maybeLocks{pool: pool, locker: runner.LocksOf(p)}
}

func (m *maybeLocks) lock(name string, atMostFor, atLeastFor time.Duration) (runner.Lock, error) {
	busy, err := m.pool.Acquire(context.Background())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = m.locker.TryLock(ctx, name, atMostFor, atLeastFor)
	cancel()
	busy.Release()
	var mh *runner.MaybeHeldError
	if !errors.As(err, &mh) {
		return nil, fmt.Errorf("want a MaybeHeldError from a starved pool, got %v", err)
	}
	return mh.Lock, nil
}

// lostTries wraps a Locker: the first n tries run their statement and then
// report the answer lost (a MaybeHeldError), whatever the statement did;
// the first failGiveBacks give-backs of those locks fail as on a database
// that went away.
type lostTries struct {
	runner.Locker
	maybe *maybeLocks

	mu            sync.Mutex
	n             int
	failGiveBacks unlockFails // its n: how many give-backs fail (failingUnlock, runner_test.go)
}

func (a *lostTries) TryLock(ctx context.Context, name string, atMostFor, atLeastFor time.Duration) (runner.Lock, error) {
	l, err := a.Locker.TryLock(ctx, name, atMostFor, atLeastFor)
	a.mu.Lock()
	lose := a.n > 0 && (err == nil || errors.Is(err, locks.ErrHeldElsewhere))
	if lose {
		a.n--
	}
	a.mu.Unlock()
	if !lose {
		return l, err
	}
	if l == nil { // the statement ran and found the lock held: nothing taken
		if l, err = a.maybe.lock(name, atMostFor, atLeastFor); err != nil {
			return nil, err
		}
	}
	return nil, &runner.MaybeHeldError{Lock: &failingUnlock{Lock: l, u: &a.failGiveBacks}, Err: fmt.Errorf("acquire lock %q: unexpected EOF", name)}
}

// A try whose answer was lost while another replica ran the job: the
// give-back at the next try leaves that replica's lock as it was (the
// unlock is conditioned on locked_by), and this replica does not run.
func TestAGiveBackLeavesAnotherReplicasRunningLockAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	o := e.options(e.job("other", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Locks = &lostTries{Locker: o.Locks, maybe: newMaybeLocks(t, e), n: 1}
	mustTake(t, e.otherHolder("replica-b"), "other", 10*time.Minute) // replica-b's run, in progress
	before := e.lockRow("other")
	e.start(o)

	e.waitIdle("other", t0.Add(10*time.Second))
	e.clk.Advance(10 * time.Second)
	e.waitIdle("other", t0.Add(20*time.Second))
	if !strings.Contains(e.logs.String(), "released the lock whose unlock had failed") {
		t.Fatalf("the give-back was not made; log:\n%s", e.logs.String())
	}
	if after := e.lockRow("other"); after != before {
		t.Fatalf("the give-back changed replica-b's lock: %+v, was %+v", after, before)
	}
	if n := ft.startCount(); n != 0 {
		t.Fatalf("%d runs while replica-b held the lock, want 0", n)
	}
}

// A give-back that fails is kept until the next try takes the lock: the
// row is then that try's, and the kept lock is dropped (giving it back
// later would cut the new lock's gap: review defect 7). A stop during the
// run gives nothing back, and the run's minimum gap stays: the run in
// progress keeps its lock (lock_until = locked_at + lockAtMostFor) until
// its own unlock.
func TestAStopDuringARunGivesBackOnlyAfterTheRunAndKeepsItsGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	o := e.options(e.job("stop2", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Locks = &lostTries{Locker: o.Locks, maybe: newMaybeLocks(t, e), n: 1, failGiveBacks: unlockFails{n: 1}}
	other := mustTake(t, e.otherHolder("replica-b"), "stop2", 10*time.Minute)
	r := e.start(o)

	e.waitIdle("stop2", t0.Add(10*time.Second)) // the lost try: its lock kept to give back
	if err := other.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Second) // the give-back fails, the try takes the lock, a run starts
	ft.waitStarts(t, 1)
	if !strings.Contains(e.logs.String(), "failed again") {
		t.Fatalf("the give-back did not fail first; log:\n%s", e.logs.String())
	}
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	row := e.lockRow("stop2")
	if row.LockedBy != replicaID || row.LockUntil.Sub(row.LockedAt) != jobs.LockAtMostForFloor {
		t.Fatalf("during the run, with a stop waiting, the lock is %+v; want %s's for lockAtMostFor %v", row, replicaID, jobs.LockAtMostForFloor)
	}
	ft.finish(t, tasks.Result{})
	<-stopped
	if strings.Contains(e.logs.String(), "released the lock whose unlock had failed") {
		t.Fatalf("a kept lock was given back after the try that superseded it; log:\n%s", e.logs.String())
	}
	row = e.lockRow("stop2")
	if d := row.LockUntil.Sub(row.LockedAt) - 9*time.Second; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("after the run and the stop lock_until - locked_at = %v; want the run's lockAtLeastFor 9s", row.LockUntil.Sub(row.LockedAt))
	}
}

// mustTake takes name for holder p for atMostFor.
func mustTake(t *testing.T, p *locks.Provider, name string, atMostFor time.Duration) *locks.Lock {
	t.Helper()
	l, err := p.TryLock(t.Context(), name, atMostFor, 0)
	if err != nil {
		t.Fatalf("take %q: %v", name, err)
	}
	return l
}
