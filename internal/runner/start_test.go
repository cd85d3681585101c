package runner_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/tasks"
)

// probeTask reads, from inside its run, whether its own run's row is in
// the table, and reports it on seen.
type probeTask struct {
	pool *pgxpool.Pool
	seen chan string
}

func (p *probeTask) Kind() string { return "probe" }

func (p *probeTask) Run(ctx context.Context, env tasks.Env) tasks.Result {
	var outcome string
	err := p.pool.QueryRow(ctx, `SELECT outcome FROM studio_job_run WHERE seq = $1`, env.RunSeq).Scan(&outcome)
	if err != nil {
		outcome = "no row: " + err.Error()
	}
	select {
	case p.seen <- outcome:
	default:
	}
	return tasks.Result{}
}

// With durable starts, a run's row is in the table before its task
// starts: a replica killed while the task runs (kill -9, before the
// store's once-a-second flush) no longer takes the row with it, which the
// nemesis run found as executions without a run row. Both scopes: an
// installation job (the lock first, then the row) and an instance job.
func TestWithDurableStartsARunsRowExistsBeforeItsTaskStarts(t *testing.T) {
	t.Parallel()
	for _, scope := range []jobs.Scope{jobs.ScopeInstallation, jobs.ScopeInstance} {
		t.Run(string(scope), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := &probeTask{pool: e.pool, seen: make(chan string, 1)}
			o := e.options(jobtask.Job{Job: jobs.Job{ID: "probe", Scope: scope, Schedule: every(t, time.Hour)}, Task: p})
			o.DurableStarts = true
			e.start(o)
			select {
			case got := <-p.seen:
				if got != string(jobs.OutcomeRunning) {
					t.Fatalf("the task found its run's row: %s; want it there and running", got)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the task did not run within 30s")
			}
		})
	}
}

// The store's writes of starts do not grow with the runs that start at
// once: a hundred instance jobs due at the same moment are written in far
// fewer statements than runs (group commit, jobstore/start.go).
func TestDurableStartsOfManyRunsAtOnceShareStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 100
	seen := make(chan string, n)
	list := make([]jobtask.Job, 0, n)
	for i := range n {
		list = append(list, jobtask.Job{Job: jobs.Job{ID: fmt.Sprintf("probe-%03d", i), Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)},
			Task: &probeTask{pool: e.pool, seen: seen}})
	}
	o := e.options(list...)
	o.DurableStarts = true
	e.start(o)
	for i := range n {
		select {
		case got := <-seen:
			if got != string(jobs.OutcomeRunning) {
				t.Fatalf("run %d found its row: %s; want running", i, got)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d runs within 60s", i, n)
		}
	}
	if w := e.store.StartWrites(); w >= n {
		t.Errorf("%d writes of starts for %d runs; want fewer (group commit)", w, n)
	} else {
		t.Logf("%d runs started at once: %d writes of starts", n, w)
	}
}
