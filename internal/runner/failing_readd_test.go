package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/tasks"
)

// heldRun is one run of a heldTask: it ends when the test sends its
// result, whether or not its context was cancelled.
type heldRun struct {
	ctx context.Context
	res chan tasks.Result
}

// heldTask hands each run to the test, in the order they start.
type heldTask struct {
	runs   chan *heldRun
	closed chan struct{}
}

func (*heldTask) Kind() string { return "held" }

func (h *heldTask) Run(ctx context.Context, _ tasks.Env) tasks.Result {
	hr := &heldRun{ctx: ctx, res: make(chan tasks.Result, 1)}
	select {
	case h.runs <- hr:
	case <-h.closed:
		return tasks.Result{}
	}
	select {
	case res := <-hr.res:
		return res
	case <-h.closed:
		return tasks.Result{}
	}
}

func (h *heldTask) next(t *testing.T) *heldRun {
	t.Helper()
	select {
	case hr := <-h.runs:
		return hr
	case <-time.After(waitFor):
		t.Fatalf("no run started within %v", waitFor)
		return nil
	}
}

// A duty re-added under the same key (its lease lost and taken again)
// while the old duty's run is still ending keeps its own failure: the old
// run's end does not clear it. Before, the old run's end forgot the key,
// which was by then the new duty's, and studio_job_failing went while the
// new duty was failing.
func TestAReAddedDutyKeepsItsFailureWhenTheOldRunEnds(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	task := &heldTask{runs: make(chan *heldRun), closed: make(chan struct{})}
	t.Cleanup(func() { close(task.closed) })
	j := jobtask.Job{Job: jobs.Job{ID: "duty", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second), PerCluster: true}, Task: task}
	r := e.start(e.options(j))

	c1, cancel1 := context.WithCancelCause(context.Background())
	r.AddCluster("c1", c1)
	old := task.next(t)

	// The lease ends and is taken again while the old run still ends.
	cancel1(errMovedAway)
	r.RemoveCluster("c1")
	c1b, cancel1b := context.WithCancelCause(context.Background())
	defer cancel1b(nil)
	r.AddCluster("c1", c1b)
	cur := task.next(t)
	if cur.ctx.Err() != nil {
		t.Fatal("the new duty's run started cancelled")
	}
	cur.res <- tasks.Result{Err: errBoom}
	eventually(t, "studio_job_failing for duty after the new duty failed", func() bool { return failingJobs(gather(t, e.reg)) == "duty" })

	// The old run ends now.
	old.res <- tasks.Result{}
	wctx, wcancel := context.WithTimeout(context.Background(), waitFor)
	defer wcancel()
	r.AwaitClusters(wctx, []string{"c1"})
	r.HasClusterJobs() // takes r.mu: the old run's finish is over
	if got := failingJobs(gather(t, e.reg)); got != "duty" {
		t.Fatalf("studio_job_failing for %q after the old duty's run ended; want for duty (the new duty's last run failed)", got)
	}
}
