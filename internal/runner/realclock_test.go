package runner_test

import (
	"context"
	"runtime/pprof"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/tasks"
)

// The runner's real-clock paths (docs/cost.md): the timeout is a runtime
// timer rather than a goroutine on the clock's timer, and the timer
// goroutine waits at least TimerResolution and is woken only by a push
// that moves the first due time earlier than the time it waits for. The
// fake-clock tests do not take these paths.

// realEnv is a memory env; each test sets the real clock in its options.
func realEnv(t *testing.T) *env {
	t.Helper()
	return newMemEnv(t)
}

func TestRealClockRunTimesOut(t *testing.T) {
	e := realEnv(t)
	ft := newFakeTask(clock.Real{})
	e.tasks = append(e.tasks, ft)
	j := jobtask.Job{Job: jobs.Job{ID: "slow", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour), Timeout: 50 * time.Millisecond}, Task: ft}
	o := e.options(j)
	o.Clock = clock.Real{}
	r := e.start(o)
	ft.waitEnds(t, 1)
	eventually(t, "the run to be recorded timed out", func() bool {
		st := status(t, r, "slow")
		return !st.Running && st.LastOutcome == jobs.OutcomeTimedOut && st.Timeouts == 1
	})
	if c := ft.cancelled(); len(c) != 1 || c[0] == nil {
		t.Fatalf("the task saw its context done with causes %v; want one cause", c)
	}
}

// A trigger makes the job the first due, earlier than the timer's hour:
// the push must wake the timer goroutine.
func TestRealClockTriggerWakesTheTimer(t *testing.T) {
	e := realEnv(t)
	ft := newFakeTask(clock.Real{})
	ft.auto = true
	e.tasks = append(e.tasks, ft)
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "hourly", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)}, Task: ft})
	o.Clock = clock.Real{}
	o.InitialDelay = func(jobs.Job) time.Duration { return time.Hour }
	r := e.start(o)
	eventually(t, "the job to wait for its first fire", func() bool { return status(t, r, "hourly").NextFireAt != nil })
	if !r.Trigger("hourly") {
		t.Fatal("trigger refused")
	}
	ft.waitStarts(t, 1)
}

// A job on a short delay beside one due in an hour: each end pushes it
// earlier than the hour the timer waits for while it runs, and each such
// push must wake the timer goroutine, so it keeps running.
func TestRealClockShortJobBesideALongOneKeepsFiring(t *testing.T) {
	e := realEnv(t)
	short, long := newFakeTask(clock.Real{}), newFakeTask(clock.Real{})
	short.auto, long.auto = true, true
	e.tasks = append(e.tasks, short, long)
	o := e.options(
		jobtask.Job{Job: jobs.Job{ID: "short", Scope: jobs.ScopeInstance, Schedule: every(t, 20*time.Millisecond)}, Task: short},
		jobtask.Job{Job: jobs.Job{ID: "long", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)}, Task: long})
	o.Clock = clock.Real{}
	o.InitialDelay = func(j jobs.Job) time.Duration {
		if j.ID == "long" {
			return time.Hour
		}
		return 0
	}
	e.start(o)
	short.waitStarts(t, 5)
	if n := long.startCount(); n != 0 {
		t.Fatalf("the hourly job ran %d times", n)
	}
}

// Many jobs due within a millisecond of each other all fire (one wake-up
// serves them all), and each fires once per delay, never early.
func TestRealClockJobsDueTogetherAllFire(t *testing.T) {
	e := realEnv(t)
	var list []jobtask.Job
	var fts []*fakeTask
	for i := range 50 {
		ft := newFakeTask(clock.Real{})
		ft.auto = true
		e.tasks = append(e.tasks, ft)
		fts = append(fts, ft)
		list = append(list, jobtask.Job{Job: jobs.Job{ID: "j" + string(rune('a'+i/26)) + string(rune('a'+i%26)), Scope: jobs.ScopeInstance,
			Schedule: every(t, 30*time.Millisecond)}, Task: ft})
	}
	o := e.options(list...)
	o.Clock = clock.Real{}
	o.InitialDelay = func(jobs.Job) time.Duration { return 10 * time.Millisecond }
	e.start(o)
	for _, ft := range fts {
		ft.waitStarts(t, 3)
	}
	for i, ft := range fts {
		for k := 1; k < 3; k++ {
			if gap := ft.start(k).Sub(ft.end(k - 1)); gap < 30*time.Millisecond {
				t.Fatalf("job %d: run %d started %v after the previous end; want at least the delay", i, k, gap)
			}
		}
	}
}

// labelTask records the job_id pprof label of each run's context.
type labelTask struct {
	mu     sync.Mutex
	labels []string
}

func (l *labelTask) Kind() string { return "label" }

func (l *labelTask) Run(ctx context.Context, _ tasks.Env) tasks.Result {
	v, _ := pprof.Label(ctx, "job_id")
	l.mu.Lock()
	l.labels = append(l.labels, v)
	l.mu.Unlock()
	return tasks.Result{}
}

func (l *labelTask) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.labels)
}

// Every run's context carries its job's pprof label, the first and the
// later ones (the label set is made once per job).
func TestEveryRunIsLabelledWithItsJob(t *testing.T) {
	e := realEnv(t)
	a, b := &labelTask{}, &labelTask{}
	o := e.options(
		jobtask.Job{Job: jobs.Job{ID: "alpha", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Millisecond)}, Task: a},
		jobtask.Job{Job: jobs.Job{ID: "beta", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Millisecond)}, Task: b})
	o.Clock = clock.Real{}
	e.start(o)
	eventually(t, "three runs of each job", func() bool { return len(a.seen()) >= 3 && len(b.seen()) >= 3 })
	for job, seen := range map[string][]string{"alpha": a.seen(), "beta": b.seen()} {
		for i, v := range seen {
			if v != job {
				t.Fatalf("run %d of %s was labelled job_id=%q", i, job, v)
			}
		}
	}
}
