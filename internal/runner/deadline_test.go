package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/tasks"
)

// envTask records the Env of each run and holds the run until its context
// is done or the test lets it end with result.
type envTask struct {
	mu     sync.Mutex
	envs   []tasks.Env
	result tasks.Result
	end    chan struct{}
	once   sync.Once
}

func newEnvTask(result tasks.Result) *envTask {
	return &envTask{result: result, end: make(chan struct{})}
}

func (e *envTask) Kind() string { return "env" }

func (e *envTask) Run(ctx context.Context, env tasks.Env) tasks.Result {
	e.mu.Lock()
	e.envs = append(e.envs, env)
	e.mu.Unlock()
	select {
	case <-e.end:
		return e.result
	case <-ctx.Done():
		return tasks.Result{Err: context.Cause(ctx)}
	}
}

// release lets every run (this one and the later) return its result.
func (e *envTask) release() { e.once.Do(func() { close(e.end) }) }

func (e *envTask) env(t testing.TB, i int) tasks.Env {
	t.Helper()
	eventually(t, fmt.Sprintf("run %d to start", i+1), func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.envs) > i
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.envs[i]
}

// An installation job's command gets a deadline lockDeadlineMargin (5 s)
// before the lock_until its lock statement set, and the keep-alive moves
// it on; an instance job's gets none.
func TestAnInstallationJobsCommandMustEndBeforeItsLockUntil(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held, solo := newEnvTask(tasks.Result{}), newEnvTask(tasks.Result{})
	t.Cleanup(held.release)
	t.Cleanup(solo.release)
	before := time.Now()
	e.start(e.options(
		jobtask.Job{Job: jobs.Job{ID: "nightly", Scope: jobs.ScopeInstallation, Schedule: every(t, 10*time.Second)}, Task: held},
		jobtask.Job{Job: jobs.Job{ID: "local", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second)}, Task: solo},
	))
	env := held.env(t, 0)
	if env.Deadline == nil {
		t.Fatal("the installation job's run has no deadline")
	}
	first := env.Deadline()
	after := time.Now()
	margin := jobs.LockAtMostForFloor - 5*time.Second
	if first.Before(before.Add(margin)) || first.After(after.Add(margin)) {
		t.Errorf("deadline %v after the run started, want lockAtMostFor %v minus 5 s after the lock statement began",
			first.Sub(before).Round(time.Millisecond), jobs.LockAtMostForFloor)
	}
	if env := solo.env(t, 0); env.Deadline != nil {
		t.Errorf("an instance job's run has a deadline (%v from now), want none", time.Until(env.Deadline()))
	}

	// The keep-alive extends the lock (at 30 s on the runner's clock) and
	// the deadline follows, from when the extension began.
	e.waitPending(4) // the timer loop, two runs' timeouts and one keep-alive
	taken := e.lockRow("nightly")
	e.clk.Advance(30 * time.Second)
	eventually(t, "the keep-alive to extend the lock", func() bool { return e.lockRow("nightly").LockUntil.After(taken.LockUntil) })
	eventually(t, "the deadline to move on", func() bool { return env.Deadline().After(first) })
}

// A run that its job shim ended at its deadline, while the replica was
// paused, is recorded lock_lost: the lease or the lock may be another
// replica's by now. Its lock is not unlocked (it may be another holder's)
// and the error says why the command ended.
func TestARunEndedAtItsDeadlineIsRecordedLockLost(t *testing.T) {
	t.Parallel()
	atDeadline := tasks.Result{Err: fmt.Errorf("command %q: %w", "sh", &tasks.ErrKilled{Cause: tasks.ErrDeadline, Deadline: true, SIGKILL: true})}

	t.Run("an installation job", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ft := newEnvTask(atDeadline)
		ft.release()
		e.start(e.options(jobtask.Job{Job: jobs.Job{ID: "nightly", Scope: jobs.ScopeInstallation, Schedule: every(t, 10*time.Second)}, Task: ft}))
		ft.env(t, 0)
		st := e.waitIdle("nightly", t0.Add(10*time.Second))
		if st.LastOutcome != jobs.OutcomeLockLost || st.LockLost != 1 {
			t.Errorf("status: outcome %q, lock lost %d; want lock_lost, 1", st.LastOutcome, st.LockLost)
		}
		for _, want := range []string{"lock lost", "paused", "SIGKILL at its deadline"} {
			if !strings.Contains(st.LastError, want) {
				t.Errorf("error %q does not say %q", st.LastError, want)
			}
		}
		if row := e.lockRow("nightly"); row.LockedBy != replicaID || e.lockFree("nightly") {
			t.Errorf("lock row %+v: unlocked, want it left to expire", row)
		}
	})

	t.Run("a duty", func(t *testing.T) {
		t.Parallel()
		e := newMemEnv(t)
		ft := newEnvTask(atDeadline)
		ft.release()
		j := jobtask.Job{Job: jobs.Job{ID: "duty", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second), PerCluster: true}, Task: ft}
		r := e.start(e.options(j))
		lease, cancel := context.WithCancel(context.Background())
		defer cancel()
		r.AddCluster("c1", lease)
		ft.env(t, 0)
		key := jobs.DutyKey{Job: "duty", Cluster: "c1"}.String()
		st := e.waitIdle(key, t0.Add(10*time.Second))
		if st.LastOutcome != jobs.OutcomeLockLost || !strings.Contains(st.LastError, "cluster lease lost") {
			t.Errorf("status: outcome %q, error %q; want lock_lost, cluster lease lost", st.LastOutcome, st.LastError)
		}
	})
}

// A duty's command must end by the end of its lease's trust window (plus
// 1 s for the command's refresh period), which each renewal moves on.
func TestADutysCommandMustEndWithTheTrustWindowOfItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := newEnvTask(tasks.Result{})
	t.Cleanup(ft.release)
	j := jobtask.Job{Job: jobs.Job{ID: "duty", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second), PerCluster: true}, Task: ft}
	r := e.start(e.options(j))
	if _, err := leases.EnsureClusters(t.Context(), e.pool, []string{"c1"}); err != nil {
		t.Fatal(err)
	}
	svc := leases.New(leases.Options{ID: replicaID, DB: e.pool, LiveSet: func() []string { return []string{replicaID} },
		Signal:    func(context.Context) error { return nil },
		OnAcquire: r.AddCluster, OnLose: func(c string, _ error) { r.RemoveCluster(c) }})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	env := ft.env(t, 0)
	if env.Deadline == nil {
		t.Fatal("the duty's run has no deadline")
	}
	lease, ok := svc.Owned()["c1"]
	if _, trusted := leases.TrustedUntil(lease); !ok || !trusted {
		t.Fatal("the duty's lease has no trust window")
	}
	var got, until time.Time
	eventually(t, "a deadline read between two reads of the same trust window", func() bool {
		until, _ = leases.TrustedUntil(lease)
		got = env.Deadline()
		again, _ := leases.TrustedUntil(lease)
		return again.Equal(until) // else a renewal came in between: read again
	})
	if !got.Equal(until.Add(time.Second)) {
		t.Errorf("deadline %v from now, want the end of the trust window (%v from now) plus 1 s", time.Until(got), time.Until(until))
	}
	if left := time.Until(env.Deadline()); left > leases.TrustWindow+time.Second {
		t.Errorf("deadline %v from now, longer than the trust window %v plus 1 s", left, leases.TrustWindow)
	}
}
