package runner_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/runner"
)

// fakeSchedules is the installation-wide schedule in memory, on the fake
// clock (standing in for database time).
type fakeSchedules struct {
	clk   *clock.Fake
	mu    sync.Mutex
	ends  map[string]time.Time
	reads int
}

func (s *fakeSchedules) Load(_ context.Context, ids []string) (map[string]time.Time, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	out := map[string]time.Time{}
	for _, id := range ids {
		if e, ok := s.ends[id]; ok {
			out[id] = e
		}
	}
	return out, s.clk.Now(), nil
}

func (s *fakeSchedules) RecordEnd(_ context.Context, job, _ string, _ int64, _ time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	s.ends[job] = now
	return now, nil
}

// n is the number of reads so far.
func (s *fakeSchedules) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *fakeSchedules) set(job string, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends[job] = end
}

// countingLocks is a Locker that always grants and counts attempts.
type countingLocks struct {
	mu       sync.Mutex
	attempts int
}

func (c *countingLocks) TryLock(context.Context, string, time.Duration, time.Duration) (runner.Lock, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts++
	return nopLock{}, nil
}

func (c *countingLocks) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

type nopLock struct{}

func (nopLock) Extend(context.Context, time.Duration, time.Duration) (runner.Lock, error) {
	return nopLock{}, nil
}
func (nopLock) Unlock(context.Context) error  { return nil }
func (nopLock) Release(context.Context) error { return nil }
func (nopLock) Token() int64                  { return 0 }

func sharedEnv(t *testing.T, missed jobs.Missed, lastEnd time.Time) (*env, *fakeSchedules, *countingLocks, *fakeTask, runner.Options) {
	e := newMemEnv(t)
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	if !lastEnd.IsZero() {
		sch.ends["shared"] = lastEnd
	}
	ft := e.task()
	ft.auto = true
	j := e.job("shared", jobs.ScopeInstallation, 10*time.Second, ft)
	j.Missed = missed
	lk := &countingLocks{}
	o := e.options(j)
	o.Locks, o.Schedules = lk, sch
	return e, sch, lk, ft, o
}

// TestSharedScheduleFollowsAnEndElsewhere: the timer of an installation job
// is due every after the last end anywhere; an end elsewhere (the bus's
// job.schedule signal) moves it, and the due time it left costs no lock
// attempt.
func TestSharedScheduleFollowsAnEndElsewhere(t *testing.T) {
	e, sch, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second)) // a restart does not reset the delay
	sch.set("shared", t0.Add(5*time.Second))    // another replica's run ended
	r.ScheduleChanged("shared")
	e.waitIdle("shared", t0.Add(15*time.Second))
	e.clk.Advance(7 * time.Second)
	e.clk.Advance(7 * time.Second)
	if n := lk.n(); n != 0 || ft.startCount() != 0 {
		t.Fatalf("%d lock attempts and %d runs before the due time, want none", n, ft.startCount())
	}
	e.clk.Advance(time.Second) // t0+15s
	ft.waitEnds(t, 1)
	e.waitIdle("shared", t0.Add(25*time.Second)) // every after this run's end
	if n := lk.n(); n != 1 {
		t.Fatalf("%d lock attempts for one due time, want 1", n)
	}
}

// TestSharedScheduleAsksTheDatabaseAtAFire: when the end signal is lost (bus
// down), the fire reads the row, finds the due time moved, and does not try
// the lock.
func TestSharedScheduleAsksTheDatabaseAtAFire(t *testing.T) {
	e, sch, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	sch.set("shared", t0.Add(5*time.Second)) // no ScheduleChanged: the signal was lost
	e.clk.Advance(7 * time.Second)
	e.waitIdle("shared", t0.Add(15*time.Second))
	if n := lk.n(); n != 0 || ft.startCount() != 0 {
		t.Fatalf("%d lock attempts and %d runs at a due time that moved, want none", n, ft.startCount())
	}
}

// TestSharedScheduleMissedAtStart: a due time that passed while no replica
// was up runs once at start by default, and waits for last end + k × every
// with missed: skip; a job that never ran is due at once.
func TestSharedScheduleMissedAtStart(t *testing.T) {
	t.Run("run-once", func(t *testing.T) {
		e, _, _, ft, o := sharedEnv(t, "", t0.Add(-95*time.Second))
		e.start(o)
		ft.waitEnds(t, 1)
		e.waitIdle("shared", t0.Add(10*time.Second))
	})
	t.Run("skip", func(t *testing.T) {
		e, _, _, ft, o := sharedEnv(t, jobs.MissedSkip, t0.Add(-95*time.Second))
		e.start(o)
		e.waitIdle("shared", t0.Add(5*time.Second))
		if ft.startCount() != 0 {
			t.Fatal("missed: skip ran at start")
		}
	})
	t.Run("never ran", func(t *testing.T) {
		e, _, _, ft, o := sharedEnv(t, jobs.MissedSkip, time.Time{})
		e.start(o)
		ft.waitEnds(t, 1)
	})
}

// TestSharedScheduleTriggerRunsNow: a trigger runs at once whatever the
// shared schedule says, and the schedule continues from that run's end.
func TestSharedScheduleTriggerRunsNow(t *testing.T) {
	e, _, _, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	e.clk.Advance(2 * time.Second)
	if !r.Trigger("shared") {
		t.Fatal("Trigger refused")
	}
	ft.waitEnds(t, 1)
	e.waitIdle("shared", t0.Add(12*time.Second))
}

// TestSharedScheduleOffset: timers fire at due times in database time, the
// replica's clock plus its measured offset.
func TestSharedScheduleOffset(t *testing.T) {
	e, _, lk, ft, o := sharedEnv(t, "", time.Time{})
	// The fake clock reads t0; the database reads t0 - 40 s (this replica
	// is 40 s fast), and its last end was 3 s before that.
	o.Schedules.(*fakeSchedules).clk = clock.NewFake(t0.Add(-40 * time.Second))
	o.Schedules.(*fakeSchedules).set("shared", t0.Add(-43*time.Second))
	o.Offset = func() time.Duration { return -40 * time.Second }
	e.start(o)
	e.waitIdle("shared", t0.Add(-33*time.Second)) // database time
	e.clk.Advance(6 * time.Second)
	if lk.n() != 0 || ft.startCount() != 0 {
		t.Fatal("fired before the due database time")
	}
}

// TestSharedScheduleCronDueIsExact: a cron job's next due time, moved by
// an end elsewhere, is its cron time exactly, although this replica's
// estimate of database time is a millisecond behind the database's (as
// the heartbeat's measure leaves it): it was a millisecond before the
// minute, and jobs list printed 09:00:59 (issue 22, defect 7).
func TestSharedScheduleCronDueIsExact(t *testing.T) {
	e := newMemEnv(t)
	sch := &fakeSchedules{clk: clock.NewFake(t0.Add(time.Millisecond)), ends: map[string]time.Time{"cron": t0.Add(-30 * time.Second)}}
	ft := e.task()
	ft.auto = true
	c, err := jobs.ParseCron("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "cron", Scope: jobs.ScopeInstallation, Schedule: c}, Task: ft})
	o.Locks, o.Schedules = &countingLocks{}, sch
	r := e.start(o)
	e.waitIdle("cron", t0.Add(time.Minute))
	sch.set("cron", t0.Add(time.Minute+500*time.Millisecond)) // a run ended elsewhere
	r.ScheduleChanged("cron")
	e.waitIdle("cron", t0.Add(2*time.Minute))
}

// TestSharedScheduleCronNeverRan: a cron job that never ran anywhere fires
// at its next cron time (the pre-check must not push it to the next one
// for ever).
func TestSharedScheduleCronNeverRan(t *testing.T) {
	e := newMemEnv(t)
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	ft := e.task()
	ft.auto = true
	c, err := jobs.ParseCron("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	j := jobtask.Job{Job: jobs.Job{ID: "cron", Scope: jobs.ScopeInstallation, Schedule: c}, Task: ft}
	lk := &countingLocks{}
	o := e.options(j)
	o.Locks, o.Schedules = lk, sch
	e.start(o)
	e.waitIdle("cron", t0.Add(time.Minute))
	e.clk.Advance(time.Minute)
	ft.waitEnds(t, 1)
	e.waitIdle("cron", t0.Add(2*time.Minute))
	e.clk.Advance(time.Minute)
	ft.waitEnds(t, 2)
	if n := lk.n(); n != 2 {
		t.Fatalf("%d lock attempts for two cron times, want 2", n)
	}
	// A job that never ran anywhere is no failed read: no warning (one
	// said "read the shared schedule" with a nil error at every fire).
	if logs := e.logs.String(); strings.Contains(logs, "read the shared schedule") {
		t.Fatalf("a warning for a job that never ran:\n%s", logs)
	}
}

// TestSharedScheduleSetEveryFromTheLastEnd: `jobs set --every` applies from
// the last end anywhere (not from this replica's start or its last run),
// and pause then resume holds and releases the shared due time.
func TestSharedScheduleSetEveryFromTheLastEnd(t *testing.T) {
	e, sch, lk, _, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	sch.set("shared", t0.Add(-1*time.Second)) // a run ended elsewhere
	e.mem.set(jobs.Setting{JobID: "shared", Schedule: "every 30s"})
	r.SettingsChanged("shared")
	e.waitIdle("shared", t0.Add(29*time.Second))
	e.mem.set(jobs.Setting{JobID: "shared", Schedule: "every 30s", Paused: true})
	r.SettingsChanged("shared")
	e.clk.Advance(29 * time.Second) // paused: fires, does not run
	e.waitIdle("shared", t0.Add(59*time.Second))
	if n := lk.n(); n != 0 {
		t.Fatalf("%d lock attempts while paused, want 0", n)
	}
	e.mem.set(jobs.Setting{JobID: "shared", Schedule: "every 30s"})
	r.SettingsChanged("shared") // resume: the due time (t0+29s) passed: at once
	eventually(t, "a run after resume", func() bool { return lk.n() == 1 })
}

// crossingLocks grants every lock, but first plays another replica whose
// run of the job ends between this replica's read of the shared schedule
// and its lock: the end is recorded and that replica's lock is free. It
// records how the granted lock was let go.
type crossingLocks struct {
	sch *fakeSchedules
	job string

	mu       sync.Mutex
	granted  int
	gaps     []time.Duration // the atLeastFor of each Extend
	unlocks  int             // Unlock: keeps the minimum gap
	releases int             // Release: frees the lock at once
}

func (c *crossingLocks) TryLock(context.Context, string, time.Duration, time.Duration) (runner.Lock, error) {
	c.sch.set(c.job, c.sch.clk.Now()) // the other replica's run ended just now
	c.mu.Lock()
	defer c.mu.Unlock()
	c.granted++
	return crossingLock{c}, nil
}

type crossingLock struct{ c *crossingLocks }

func (l crossingLock) Extend(_ context.Context, _, atLeastFor time.Duration) (runner.Lock, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.gaps = append(l.c.gaps, atLeastFor)
	return l, nil
}

func (crossingLock) Token() int64 { return 0 }

func (l crossingLock) Unlock(context.Context) error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.unlocks++
	return nil
}

func (l crossingLock) Release(context.Context) error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.releases++
	return nil
}

// TestSharedScheduleAnEndBetweenTheReadAndTheLockRunsNothing: a fire reads
// the shared schedule (due), another replica's run of the same tick ends
// and frees the lock, and the fire takes the lock. It reads the schedule
// again under the lock, runs nothing, gives the lock back at once (no
// minimum gap: nothing ran) and waits for the due time after that end.
// Before, it ran the tick a second time: TestSharedScheduleBusCutDuringARun
// saw the next run start 1.6 s after an end, every: 2s, on a loaded CI.
func TestSharedScheduleAnEndBetweenTheReadAndTheLockRunsNothing(t *testing.T) {
	e, sch, _, ft, o := sharedEnv(t, "", t0.Add(-30*time.Second))
	lk := &crossingLocks{sch: sch, job: "shared"}
	o.Locks = lk
	e.start(o)
	e.waitIdle("shared", t0.Add(10*time.Second)) // every 10s after the end the lock's TryLock recorded
	if n := ft.startCount(); n != 0 {
		t.Fatalf("%d runs of a tick that ran elsewhere, want none", n)
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.granted != 1 || lk.releases != 1 || lk.unlocks != 0 || len(lk.gaps) != 0 {
		t.Fatalf("granted %d, extended with minimum gaps %v, unlocked %d, released %d; want the lock released at once, once (one statement)",
			lk.granted, lk.gaps, lk.unlocks, lk.releases)
	}
}

// orderLocks grants every lock and notes, at each unlock, whether the
// run's end was in the shared schedule already.
type orderLocks struct {
	sch *fakeSchedules
	job string

	mu       sync.Mutex
	endSeen  []bool
	lastSeen time.Time
}

func (c *orderLocks) TryLock(context.Context, string, time.Duration, time.Duration) (runner.Lock, error) {
	c.sch.mu.Lock()
	end := c.sch.ends[c.job]
	c.sch.mu.Unlock()
	c.mu.Lock()
	c.lastSeen = end
	c.mu.Unlock()
	return orderLock{c}, nil
}

type orderLock struct{ c *orderLocks }

func (l orderLock) Extend(context.Context, time.Duration, time.Duration) (runner.Lock, error) {
	return l, nil
}

func (orderLock) Token() int64 { return 0 }

func (l orderLock) Unlock(context.Context) error {
	l.c.sch.mu.Lock()
	end := l.c.sch.ends[l.c.job]
	l.c.sch.mu.Unlock()
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.endSeen = append(l.c.endSeen, !end.Equal(l.c.lastSeen))
	return nil
}

func (l orderLock) Release(ctx context.Context) error { return l.Unlock(ctx) }

// TestSharedScheduleRecordsTheEndBeforeTheUnlock: a run's end is in the
// shared schedule before its lock is freed, so a replica that takes the
// freed lock reads it. Before, the unlock came first.
func TestSharedScheduleRecordsTheEndBeforeTheUnlock(t *testing.T) {
	e, sch, _, ft, o := sharedEnv(t, "", t0.Add(-30*time.Second))
	lk := &orderLocks{sch: sch, job: "shared"}
	o.Locks = lk
	e.start(o)
	ft.waitEnds(t, 1)
	e.waitIdle("shared", t0.Add(10*time.Second))
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if len(lk.endSeen) != 1 || !lk.endSeen[0] {
		t.Fatalf("end recorded before each unlock: %v, want [true]", lk.endSeen)
	}
}
