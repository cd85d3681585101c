package runner_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// bfEnvTask records the environment of each run and ends it at once.
type bfEnvTask struct {
	mu   sync.Mutex
	envs []tasks.Env
}

func (e *bfEnvTask) Kind() string { return "env" }

func (e *bfEnvTask) Run(_ context.Context, env tasks.Env) tasks.Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.envs = append(e.envs, env)
	return tasks.Result{}
}

func (e *bfEnvTask) runs() []tasks.Env {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.envs)
}

// backfillEnv is an env with one installation job "bf" every hour whose
// first live fire is 30 minutes away (the fake clock stays put), so the
// lock is free for the backfill.
func backfillEnv(t *testing.T) (*env, *bfEnvTask, time.Time) {
	t.Helper()
	e := newEnv(t)
	task := &bfEnvTask{}
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "bf", Scope: jobs.ScopeInstallation, Schedule: every(t, time.Hour)}, Task: task})
	o.InitialDelay = func(jobs.Job) time.Duration { return 30 * time.Minute }
	o.Backfills = jobstore.NewBackfills(e.pool, replicaID)
	e.start(o)
	live := t0.Add(30 * time.Minute)
	e.waitIdle("bf", live)
	return e, task, live
}

func requestBackfill(t *testing.T, e *env, at ...time.Time) {
	t.Helper()
	if _, err := jobstore.RequestBackfill(t.Context(), e.pool, jobstore.BackfillRequest{Job: "bf", Actor: "test", NominalAt: at}); err != nil {
		t.Fatal(err)
	}
}

// A backfill fire runs the pending occurrences one after another, oldest
// first, each with its own nominal time and key, not triggered, marked
// backfill; the job goes back to its live due time, and the lock is free.
func TestABackfillRunsEachOccurrenceWithItsNominalTimeAndKeepsTheLiveDueTime(t *testing.T) {
	t.Parallel()
	e, task, live := backfillEnv(t)
	at := []time.Time{time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)}
	requestBackfill(t, e, at...)
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	eventually(t, "three backfill runs", func() bool { return len(task.runs()) == 3 })
	want := []time.Time{at[1], at[0], at[2]}
	for i, env := range task.runs() {
		if !env.ScheduledAt.Equal(want[i]) || env.OccurrenceKey != jobs.OccurrenceKey("bf", "", want[i]) || env.Triggered {
			t.Errorf("run %d: scheduled at %s, key %q, triggered %t; want %s, its key, false", i, env.ScheduledAt, env.OccurrenceKey, env.Triggered, want[i])
		}
	}
	e.waitIdle("bf", live)
	if r := e.lockRow("bf"); r.LockUntil.After(r.LockedAt.Add(time.Minute)) {
		t.Errorf("the lock is kept until %s after the backfill (locked at %s)", r.LockUntil, r.LockedAt)
	}
	e.flush()
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM studio_job_run
WHERE job_id = 'bf' AND backfill AND NOT triggered AND outcome = 'succeeded' AND nominal_at = ANY($1)`, at).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d backfill runs with their nominal times in studio_job_run, want 3", n)
	}
	// Nothing is left: a second wake-up runs nothing and keeps the live due time.
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	e.waitIdle("bf", live)
	if n := len(task.runs()); n != 3 {
		t.Errorf("%d runs after a wake-up with nothing pending, want 3", n)
	}
	if n := e.pendingBackfills(); n != 0 {
		t.Errorf("%d occurrences pending", n)
	}
}

// A paused job, or a lock held elsewhere, runs no backfill: the fire goes
// back to the live due time and the occurrence stays pending.
func TestABackfillWaitsWhileTheJobIsPausedOrItsLockIsHeld(t *testing.T) {
	t.Parallel()
	e, task, live := backfillEnv(t)
	requestBackfill(t, e, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('bf', true, 'test')`); err != nil {
		t.Fatal(err)
	}
	e.settings.Invalidate("bf")
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	e.waitIdle("bf", live)
	if _, err := e.pool.Exec(t.Context(), `UPDATE studio_job_setting SET paused = false WHERE job_id = 'bf'`); err != nil {
		t.Fatal(err)
	}
	e.settings.Invalidate("bf")
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('bf', now() + interval '1 hour', now(), 'java-node-3')`); err != nil {
		t.Fatal(err)
	}
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	e.waitIdle("bf", live)
	if n := len(task.runs()); n != 0 {
		t.Errorf("%d runs while paused or held elsewhere, want 0", n)
	}
	if n := e.pendingBackfills(); n != 1 {
		t.Errorf("%d occurrences pending, want 1", n)
	}
	// The lock freed: the occurrence runs.
	if _, err := e.pool.Exec(t.Context(), `UPDATE shedlock SET lock_until = now() WHERE name = 'bf'`); err != nil {
		t.Fatal(err)
	}
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	eventually(t, "the backfill run", func() bool { return len(task.runs()) == 1 })
	e.waitIdle("bf", live)
}

// Only an installation job is backfilled, and only while it waits on its
// timer.
func TestBackfillIgnoresUnknownAndInstanceJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "inst", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)}, Task: &bfEnvTask{}})
	o.InitialDelay = func(jobs.Job) time.Duration { return 30 * time.Minute }
	o.Backfills = jobstore.NewBackfills(e.pool, replicaID)
	e.start(o)
	e.waitIdle("inst", t0.Add(30*time.Minute))
	if e.r.Backfill("inst") || e.r.Backfill("nosuch") {
		t.Error("Backfill took an instance job or an unknown one")
	}
}

func (e *env) pendingBackfills() int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.t.Context(), `SELECT count(*) FROM studio_backfill WHERE done_at IS NULL`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// endRacer plays another replica's claimer at the moment the runner ends a
// backfill occurrence: it tries the job's lock and, if it gets it, claims
// as a lock holder would.
type endRacer struct {
	*jobstore.Backfills
	t     *testing.T
	other *jobstore.Backfills
	prov  *locks.Provider
	once  sync.Once
	took  bool
}

func (b *endRacer) End(ctx context.Context, c jobs.BackfillClaim, runSeq int64, outcome jobs.Outcome) (bool, error) {
	b.once.Do(func() {
		l, err := b.prov.TryLock(ctx, "bf", 5*time.Minute, 0)
		if err != nil {
			return // held: the runner ends the occurrence before it frees the lock
		}
		b.took = true
		if _, _, err := b.other.Claim(ctx, "bf"); err != nil {
			b.t.Errorf("the other replica's claim: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.t.Errorf("the other replica's unlock: %v", err)
		}
	})
	return b.Backfills.End(ctx, c, runSeq, outcome)
}

// A backfill run ends its occurrence before it frees the lock, so another
// replica that takes the freed lock and claims does not find it claimed
// and not ended, and does not record a run that succeeded as abandoned.
// (Review D3: the runner unlocked first.)
func TestABackfillEndsItsOccurrenceBeforeItFreesTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	task := &bfEnvTask{}
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "bf", Scope: jobs.ScopeInstallation, Schedule: every(t, time.Hour)}, Task: task})
	o.InitialDelay = func(jobs.Job) time.Duration { return 30 * time.Minute }
	rb := &endRacer{Backfills: jobstore.NewBackfills(e.pool, replicaID), t: t,
		other: jobstore.NewBackfills(e.pool, "replica-b"), prov: e.otherHolder("replica-b")}
	o.Backfills = rb
	e.start(o)
	live := t0.Add(30 * time.Minute)
	e.waitIdle("bf", live)
	requestBackfill(t, e, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	eventually(t, "the backfill run", func() bool { return len(task.runs()) == 1 })
	e.waitIdle("bf", live)
	if rb.took {
		t.Error("another replica took the job's lock before the occurrence's end was recorded")
	}
	var outcome string
	var runSeq *int64
	var done bool
	if err := e.pool.QueryRow(t.Context(), `SELECT b.outcome, b.run_seq, q.done_at IS NOT NULL
FROM studio_backfill b JOIN studio_request q ON q.seq = b.request_seq`).Scan(&outcome, &runSeq, &done); err != nil {
		t.Fatal(err)
	}
	if outcome != string(jobs.OutcomeSucceeded) || runSeq == nil || !done {
		t.Errorf("occurrence outcome %q, run_seq %v, request done %t; want succeeded, its run, done", outcome, runSeq, done)
	}
}

// An occurrence that ran after the request (a catch-up's or a live run of
// its nominal time, anywhere) is left out by the claim under the lock; the
// next runs. (Review D1: the claim did not look at the runs.)
func TestABackfillLeavesOutAnOccurrenceThatRanAfterTheRequest(t *testing.T) {
	t.Parallel()
	e, task, live := backfillEnv(t)
	at := []time.Time{time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)}
	requestBackfill(t, e, at...)
	e.exec(`INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key, triggered)
VALUES ('bf', 'replica-b', now(), now(), 'succeeded', $1, '', false)`, at[0])
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	eventually(t, "the run of 02:00", func() bool { return len(task.runs()) == 1 })
	e.waitIdle("bf", live)
	if runs := task.runs(); len(runs) != 1 || !runs[0].ScheduledAt.Equal(at[1]) {
		t.Errorf("%d runs, the first scheduled at %v; want only 02:00 (01:00 ran elsewhere)", len(runs), runs[0].ScheduledAt)
	}
	var outcome string
	if err := e.pool.QueryRow(t.Context(), `SELECT outcome FROM studio_backfill WHERE nominal_at = $1`, at[0]).Scan(&outcome); err != nil {
		t.Fatal(err)
	}
	if outcome != "left_out" {
		t.Errorf("01:00 ended %q, want left_out", outcome)
	}
}

// failingSeq is the run store whose NextSeq fails while fail is set: a run
// cannot begin.
type failingSeq struct {
	runner.Recorder
	fail atomic.Bool
}

func (s *failingSeq) NextSeq(ctx context.Context) (int64, error) {
	if s.fail.Load() {
		return 0, errors.New("seq block: connection refused")
	}
	return s.Recorder.NextSeq(ctx)
}

// A backfill run that cannot begin gives its occurrence back and puts the
// job back at its live due time, not at its schedule's next time after
// now (an hour away here, past the live due time).
func TestABackfillThatCannotBeginKeepsTheLiveDueTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	task := &bfEnvTask{}
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "bf", Scope: jobs.ScopeInstallation, Schedule: every(t, time.Hour)}, Task: task})
	o.InitialDelay = func(jobs.Job) time.Duration { return 30 * time.Minute }
	o.Backfills = jobstore.NewBackfills(e.pool, replicaID)
	store := &failingSeq{Recorder: o.Store}
	o.Store = store
	e.start(o)
	live := t0.Add(30 * time.Minute)
	e.waitIdle("bf", live)
	requestBackfill(t, e, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	store.fail.Store(true)
	if !e.r.Backfill("bf") {
		t.Fatal("Backfill(bf) = false for an idle job")
	}
	eventually(t, "the occurrence given back after the failed start", func() bool {
		st := status(t, e.r, "bf")
		return st.Failures == 1 && !st.Running
	})
	e.waitIdle("bf", live)
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM studio_backfill WHERE done_at IS NULL AND claimed_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d occurrences pending and unclaimed, want 1 (given back)", n)
	}
	if n := len(task.runs()); n != 0 {
		t.Errorf("%d runs", n)
	}
}
