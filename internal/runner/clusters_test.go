package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

var errMovedAway = errors.New("lease released: placement moved")

func tasksOK() tasks.Result { return tasks.Result{} }

// statusOf is the last status row stored for key.
func (m *memStore) statusOf(key string) jobs.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status[key]
}

func perClusterJob(e *env, id string, d time.Duration, ft *fakeTask) jobtask.Job {
	j := e.job(id, jobs.ScopeInstance, d, ft)
	j.PerCluster = true
	return j
}

// A clusters: owned job runs once per owned cluster, each run records its
// cluster, and its status rows are keyed job@cluster; a lease that ends
// cancels its run (recorded lock_lost with the lease's cause) and takes
// its timer away, while the other cluster's duty goes on.
func TestAPerClusterJobRunsOncePerOwnedClusterAndStopsWithItsLease(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	r := e.start(e.options(perClusterJob(e, "duty", 10*time.Second, ft)))
	if ids := r.JobIDs(); len(ids) != 1 || ids[0] != "duty" {
		t.Fatalf("JobIDs before any lease = %v, want the job's own id", ids)
	}
	if !r.Hosts("duty") {
		t.Fatal("Hosts(duty) = false for a per-cluster job")
	}
	c1, cancel1 := context.WithCancelCause(context.Background())
	c2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	r.AddCluster("c1", c1)
	r.AddCluster("c2", c2)
	ft.waitStarts(t, 2) // at once: a duty that moved here does not wait
	if got := r.OwnedClusters(); strings.Join(got, ",") != "c1,c2" {
		t.Fatalf("OwnedClusters = %v", got)
	}
	st := status(t, r, jobs.DutyKey{Job: "duty", Cluster: "c1"}.String())
	if !st.Running || st.Scope != jobs.ScopeInstance {
		t.Fatalf("status of duty@c1 = %+v, want running", st)
	}
	clusters := map[string]bool{}
	for _, run := range e.mem.history("duty") {
		clusters[run.Cluster] = true
	}
	if !clusters["c1"] || !clusters["c2"] || len(clusters) != 2 {
		t.Fatalf("runs recorded clusters %v, want c1 and c2", clusters)
	}

	// The lease loop cancels the duty context first, then calls RemoveCluster.
	cancel1(errMovedAway)
	r.RemoveCluster("c1")
	// The lease loop waits for the cancelled duty to end before it releases.
	wctx, wcancel := context.WithTimeout(context.Background(), waitFor)
	r.AwaitClusters(wctx, []string{"c1"})
	if wctx.Err() != nil {
		t.Fatal("AwaitClusters returned only at its deadline")
	}
	wcancel()
	if runs := e.mem.history("duty"); !slices.ContainsFunc(runs, func(run jobs.Run) bool { return run.Cluster == "c1" && run.FinishedAt != nil }) {
		t.Fatalf("AwaitClusters returned before the c1 run ended: %+v", runs)
	}
	eventually(t, "the c1 run to be recorded lock_lost", func() bool {
		for _, run := range e.mem.history("duty") {
			if run.Cluster == "c1" && run.Outcome == jobs.OutcomeLockLost {
				return strings.Contains(run.Error, "cluster lease lost") && strings.Contains(run.Error, errMovedAway.Error())
			}
		}
		return false
	})
	for _, s := range r.Snapshot() {
		if s.JobID == (jobs.DutyKey{Job: "duty", Cluster: "c1"}).String() {
			t.Fatalf("duty@c1 still hosted after its lease ended: %+v", s)
		}
	}
	ft.finish(t, tasksOK())
	ft.waitEnds(t, 2)
	e.waitIdle(jobs.DutyKey{Job: "duty", Cluster: "c2"}.String(), e.clk.Now().Add(10*time.Second))
	e.clk.Advance(10 * time.Second)
	ft.waitStarts(t, 3)
	for _, run := range e.mem.history("duty") {
		if run.Seq > 2 && run.Cluster != "c2" {
			t.Fatalf("run %d for %q after c1's lease ended", run.Seq, run.Cluster)
		}
	}
	// The stored status row of the removed duty says it is not scheduled.
	if st := e.mem.statusOf(jobs.DutyKey{Job: "duty", Cluster: "c1"}.String()); st.NextFireAt != nil || st.Running || st.LockLost != 1 {
		t.Errorf("stored status of duty@c1 = %+v, want not scheduled, not running, lock_lost 1", st)
	}

	// Acquired again: the counters carry on.
	c1b, cancel1b := context.WithCancelCause(context.Background())
	defer cancel1b(nil)
	r.AddCluster("c1", c1b)
	ft.waitStarts(t, 4)
	if st := status(t, r, jobs.DutyKey{Job: "duty", Cluster: "c1"}.String()); st.LockLost != 1 || st.Runs != 1 {
		t.Errorf("duty@c1 acquired again: lock_lost %d runs %d, want 1 and 1", st.LockLost, st.Runs)
	}
}

// clusters: owned with scope installation is refused in code as in the
// configuration.
func TestAPerClusterInstallationJobIsRefused(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	j := perClusterJob(e, "duty", time.Minute, e.task())
	j.Scope = jobs.ScopeInstallation
	o := e.options(j)
	if _, err := runner.New(o); err == nil || !strings.Contains(err.Error(), "clusters: owned needs scope instance") {
		t.Fatalf("New = %v, want the scope refused", err)
	}
}

// A trigger of a per-cluster job fires the duty of every owned cluster.
func TestATriggerFiresEveryOwnedClustersDuty(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	ft.auto = true
	r := e.start(e.options(perClusterJob(e, "duty", time.Hour, ft)))
	for _, c := range []string{"a", "b", "c"} {
		r.AddCluster(c, context.Background())
	}
	ft.waitStarts(t, 3)
	for _, c := range []string{"a", "b", "c"} {
		e.waitIdle(jobs.DutyKey{Job: "duty", Cluster: c}.String(), e.clk.Now().Add(time.Hour))
	}
	if !r.Trigger("duty") {
		t.Fatal("Trigger(duty) = false")
	}
	ft.waitStarts(t, 6)
}

// slowSeq is the in-memory store whose NextSeq takes a moment, so a run
// is inside run() long enough for a lease to end meanwhile.
type slowSeq struct{ *memStore }

func (s slowSeq) NextSeq(ctx context.Context) (int64, error) {
	time.Sleep(30 * time.Millisecond) // widens the window the test aims at; not a synchronisation
	return s.memStore.NextSeq(ctx)
}

// A lease that ends while its duty is starting a run: the runner reads
// whether the duty ended under its lock (under -race the old unlocked read
// in run was a data race with RemoveCluster, found by a measurement with
// real processes), and every run that starts ends.
func TestALeaseThatEndsWhileItsDutyStartsIsSafe(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	ft.auto = true
	o := e.options(perClusterJob(e, "duty", time.Hour, ft))
	o.Store = slowSeq{e.mem}
	r := e.start(o)
	for range 20 {
		ctx, cancel := context.WithCancelCause(context.Background())
		r.AddCluster("c", ctx)
		// Into the run's 30 ms NextSeq. Not a synchronisation, and there
		// must be none: one with the run would hide the race.
		time.Sleep(10 * time.Millisecond)
		cancel(errMovedAway)
		r.RemoveCluster("c")
		wctx, wcancel := context.WithTimeout(context.Background(), waitFor)
		r.AwaitClusters(wctx, []string{"c"})
		wcancel()
	}
	for _, run := range e.mem.history("duty") {
		if run.FinishedAt == nil {
			t.Fatalf("run %d never ended", run.Seq)
		}
	}
	if got := r.OwnedClusters(); len(got) != 0 {
		t.Fatalf("OwnedClusters = %v after the last removal", got)
	}
}
