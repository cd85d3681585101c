package runner_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/runner"
)

// cronJitter is a cron every minute with a jitter of 30 s.
func cronJitter(t *testing.T) jobs.Schedule {
	t.Helper()
	c, err := jobs.ParseCron("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	return c.WithJitter(30 * time.Second)
}

// Every replica computes the same due times for an installation job (scope
// key ""), and each its own for an instance job (its replica id), from the
// job id alone: two runners on one shared schedule, started apart.
func TestAJitteredCronIsDueAtTheSameShiftedTimeOnEveryReplica(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	offShared := jobs.JitterOffset(30*time.Second, "billing", "")
	if offShared <= 7*time.Second {
		t.Fatalf("offset %s: pick another job id, one whose offset is past the second replica's start", offShared)
	}
	var got []time.Time
	for i, id := range []string{"replica-a", "replica-b"} {
		ft := e.task()
		ft.auto = true
		o := e.options(
			jobtask.Job{Job: jobs.Job{ID: "billing", Scope: jobs.ScopeInstallation, Schedule: cronJitter(t)}, Task: ft},
			jobtask.Job{Job: jobs.Job{ID: "local", Scope: jobs.ScopeInstance, Schedule: cronJitter(t)}, Task: ft})
		o.ReplicaID, o.Locks, o.Schedules = id, &countingLocks{}, sch
		o.Metrics = nil
		r, err := runner.New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		if i == 0 {
			e.clk.Advance(7 * time.Second) // the second starts later
		}
		shared, local := status(t, r, "billing"), status(t, r, "local")
		if shared.NextFireAt == nil || local.NextFireAt == nil {
			t.Fatalf("%s: no next fire", id)
		}
		got = append(got, *shared.NextFireAt)
		// Both started before 09:00 plus the offset (19.748 s): the
		// shifted grid, a minute boundary plus the offset.
		if off := shared.NextFireAt.Sub(shared.NextFireAt.Truncate(time.Minute)); off != offShared {
			t.Errorf("%s: billing next fire %s: offset %s, want %s", id, shared.NextFireAt.Format(time.TimeOnly), off, offShared)
		}
		wantLocal := jobs.JitterOffset(30*time.Second, "local", id)
		if off := local.NextFireAt.Sub(local.NextFireAt.Truncate(time.Minute)); off != wantLocal {
			t.Errorf("%s: instance job next fire %s: offset %s, want its replica's %s", id, local.NextFireAt.Format(time.TimeOnly), off, wantLocal)
		}
		if sched := shared.Schedule; sched != "cron * * * * * jitter 30s" {
			t.Errorf("%s: status schedule %q", id, sched)
		}
	}
	if !got[0].Equal(got[1]) {
		t.Errorf("the replicas' next fires of the installation job differ: %s and %s", got[0], got[1])
	}
}

// A jittered cron job runs at its cron time plus the offset, never before
// the cron time, and that time is its nominal time and occurrence key.
func TestAJitteredCronRunsAtItsShiftedTimeAndThatIsItsNominalTime(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e := newEnv(t)
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	j := jobtask.Job{Job: jobs.Job{ID: "billing", Scope: jobs.ScopeInstallation, Schedule: cronJitter(t)}, Task: ft}
	o := e.options(j)
	o.Schedules = sch
	e.start(o)
	off := jobs.JitterOffset(30*time.Second, "billing", "")
	due := t0.Add(off)
	e.waitIdle("billing", due)
	e.clk.Advance(off)
	eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
	env := ft.got()[0]
	if !env.ScheduledAt.Equal(due) || env.OccurrenceKey != "billing//"+jobs.FormatNominal(due) {
		t.Fatalf("the task got %v, %q; want the shifted time %v and its key", env.ScheduledAt, env.OccurrenceKey, due)
	}
	if env.ScheduledAt.Before(t0) {
		t.Fatalf("nominal time %v is before its cron time %v", env.ScheduledAt, t0)
	}
	// The next: the next minute plus the same offset, after the end.
	e.waitIdle("billing", due.Add(time.Minute))
	if runs := e.runNominals("billing"); len(runs) != 1 || !runs[0].nominal.Equal(due) {
		t.Fatalf("runs %+v; want one of nominal time %v", runs, due)
	}
}

// A fixed-delay job is due at end + every + its offset, the same on every
// replica; a run that would start at once is delayed by the offset: a
// shared job never run anywhere, the run after a missed stretch, and an
// instance job's first run (in place of the initial delay).
func TestAJitteredFixedDelayIsDueItsOffsetLater(t *testing.T) {
	t.Parallel()
	withJitter := func(j jobtask.Job) jobtask.Job {
		j.Schedule = j.Schedule.WithJitter(5 * time.Second)
		return j
	}
	t.Run("never ran anywhere", func(t *testing.T) {
		t.Parallel()
		e, _, _, ft, o := sharedEnv(t, "", time.Time{})
		o.Jobs[0] = withJitter(o.Jobs[0])
		e.start(o)
		off := jobs.JitterOffset(5*time.Second, "shared", "")
		e.waitIdle("shared", t0.Add(off))
		e.clk.Advance(off)
		ft.waitEnds(t, 1)
		e.waitIdle("shared", t0.Add(off+10*time.Second+off)) // end + every + offset
	})
	t.Run("a missed stretch", func(t *testing.T) {
		t.Parallel()
		e, _, _, ft, o := sharedEnv(t, jobs.MissedRunOnce, t0.Add(-time.Minute))
		o.Jobs[0] = withJitter(o.Jobs[0])
		e.start(o)
		off := jobs.JitterOffset(5*time.Second, "shared", "")
		e.waitIdle("shared", t0.Add(off))
		if ft.startCount() != 0 {
			t.Fatal("ran before its offset")
		}
	})
	t.Run("a due time ahead", func(t *testing.T) {
		t.Parallel()
		e, _, _, _, o := sharedEnv(t, jobs.MissedRunOnce, t0.Add(-3*time.Second))
		o.Jobs[0] = withJitter(o.Jobs[0])
		e.start(o)
		e.waitIdle("shared", t0.Add(7*time.Second+jobs.JitterOffset(5*time.Second, "shared", ""))) // end + every + offset
	})
	t.Run("an instance job's first run", func(t *testing.T) {
		t.Parallel()
		e := newMemEnv(t)
		ft := e.task()
		ft.auto = true
		o := e.options(withJitter(e.job("local", jobs.ScopeInstance, 10*time.Second, ft)))
		o.InitialDelay = func(jobs.Job) time.Duration { return time.Hour } // not used: the jitter decides
		e.start(o)
		e.waitIdle("local", t0.Add(jobs.JitterOffset(5*time.Second, "local", replicaID)))
	})
}
