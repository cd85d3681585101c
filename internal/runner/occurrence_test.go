package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// occRow is a studio_occurrence row as a test reads it.
type occRow struct {
	Job, Scope, Outcome, Reason, Replica string
	Nominal                              time.Time
	Last                                 *time.Time
	Count                                int
	Holder, PausedBy                     *string
	HolderKnown                          *bool
}

// occurrences flushes the store and reads job's skips and misses, oldest
// first.
func (e *env) occurrences(job string) []occRow {
	e.t.Helper()
	e.flush()
	rows, err := e.pool.Query(e.t.Context(), `SELECT job_id, scope_key, outcome, reason, replica_id, nominal_at, last_nominal_at, count, holder, paused_by, holder_known
FROM studio_occurrence WHERE job_id = $1 ORDER BY nominal_at`, job)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []occRow
	for rows.Next() {
		var o occRow
		if err := rows.Scan(&o.Job, &o.Scope, &o.Outcome, &o.Reason, &o.Replica, &o.Nominal, &o.Last, &o.Count, &o.Holder, &o.PausedBy, &o.HolderKnown); err != nil {
			e.t.Fatal(err)
		}
		o.Nominal = o.Nominal.UTC()
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// runNominal is a studio_job_run row's occurrence columns.
type runNominal struct {
	nominal   time.Time
	scope     string
	triggered bool
}

// runNominals flushes the store and reads job's runs' occurrence columns,
// oldest first.
func (e *env) runNominals(job string) []runNominal {
	e.t.Helper()
	e.flush()
	rows, err := e.pool.Query(e.t.Context(), `SELECT nominal_at, scope_key, triggered FROM studio_job_run WHERE job_id = $1 ORDER BY seq`, job)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []runNominal
	for rows.Next() {
		var r runNominal
		if err := rows.Scan(&r.nominal, &r.scope, &r.triggered); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// occTask records the Env of each run and ends it at once.
type occTask struct {
	mu   sync.Mutex
	envs []tasks.Env
}

func (*occTask) Kind() string { return "fake" }
func (f *occTask) Run(_ context.Context, env tasks.Env) tasks.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.envs = append(f.envs, env)
	return tasks.Result{}
}

func (f *occTask) got() []tasks.Env {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]tasks.Env(nil), f.envs...)
}

// sharedDBEnv is a PostgreSQL env (store, settings, locks) whose job
// "shared" (every 10s) follows a shared schedule in memory on the fake
// clock that last ended at lastEnd.
func sharedDBEnv(t *testing.T, missed jobs.Missed, lastEnd time.Time, task tasks.Task) (*env, *fakeSchedules, runner.Options) {
	e := newEnv(t)
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	if !lastEnd.IsZero() {
		sch.ends["shared"] = lastEnd
	}
	j := jobtask.Job{Job: jobs.Job{ID: "shared", Scope: jobs.ScopeInstallation, Schedule: every(t, 10*time.Second), Missed: missed}, Task: task}
	o := e.options(j)
	o.Schedules = sch
	return e, sch, o
}

func TestARunCarriesItsNominalTimeAndOccurrenceKey(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e, _, o := sharedDBEnv(t, "", t0.Add(-3*time.Second), ft)
	e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	e.clk.Advance(7 * time.Second)
	eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
	env := ft.got()[0]
	due := t0.Add(7 * time.Second) // the last end + every, whenever the timer fired
	if !env.ScheduledAt.Equal(due) || env.OccurrenceKey != "shared//"+jobs.FormatNominal(due) || env.Triggered {
		t.Fatalf("the task got %v, %q, triggered %v; want %v and its key", env.ScheduledAt, env.OccurrenceKey, env.Triggered, due)
	}
	e.waitIdle("shared", t0.Add(17*time.Second))
	if runs := e.runNominals("shared"); len(runs) != 1 || !runs[0].nominal.Equal(due) || runs[0].scope != "" || runs[0].triggered {
		t.Fatalf("runs %+v; want one of nominal time %v", runs, due)
	}
	var key string
	if err := e.pool.QueryRow(t.Context(), `SELECT job_id || '/' || scope_key || '/' || to_char(nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
FROM studio_occurrences WHERE job_id = 'shared' AND outcome = 'ran'`).Scan(&key); err != nil || key != env.OccurrenceKey {
		t.Fatalf("the ran occurrence's key %q (%v); want the task's %q", key, err, env.OccurrenceKey)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	observed := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() == "studio_job_start_lateness_seconds" {
			for _, m := range mf.GetMetric() {
				observed += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if observed != 1 {
		t.Errorf("%d lateness observations; want 1", observed)
	}
}

func TestATriggeredRunHasTheTriggersTime(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e, _, o := sharedDBEnv(t, "", t0.Add(-3*time.Second), ft)
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	e.clk.Advance(2 * time.Second)
	if !r.Trigger("shared") {
		t.Fatal("trigger ignored")
	}
	eventually(t, "the triggered run", func() bool { return len(ft.got()) == 1 })
	if env := ft.got()[0]; !env.Triggered || !env.ScheduledAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("the task got %v, triggered %v; want the trigger's time %v", env.ScheduledAt, env.Triggered, t0.Add(2*time.Second))
	}
	e.waitIdle("shared", t0.Add(12*time.Second))
	if runs := e.runNominals("shared"); len(runs) != 1 || !runs[0].triggered || !runs[0].nominal.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("runs %+v; want one triggered run", runs)
	}
}

func TestAPausedSharedJobRecordsOneSkipPerDueTimeNamingWhoPausedIt(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e, _, o := sharedDBEnv(t, "", t0.Add(-3*time.Second), ft)
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	e.flush()
	yes := true
	if _, err := jobstore.ApplyChange(t.Context(), e.pool, "shared", jobstore.Change{Pause: &yes, Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	r.SettingsChanged("shared")
	eventually(t, "the pause to apply", func() bool { return status(t, r, "shared").Paused })
	// The due times stay on the shared grid (last end + k × every), however
	// late a fire is.
	for k := 1; k <= 3; k++ {
		e.waitIdle("shared", t0.Add(time.Duration(10*k-3)*time.Second))
		e.clk.Advance(10*time.Second + 40*time.Millisecond)
	}
	e.waitIdle("shared", t0.Add(37*time.Second))
	got := e.occurrences("shared")
	if len(got) != 3 {
		t.Fatalf("%d occurrences %+v; want 3", len(got), got)
	}
	for i, o := range got {
		want := t0.Add(time.Duration(10*i+7) * time.Second)
		if o.Outcome != "skipped" || o.Reason != "paused" || !o.Nominal.Equal(want) || o.PausedBy == nil || *o.PausedBy != "alice" || o.Scope != "" {
			t.Errorf("occurrence %d: %+v; want skipped/paused at %v by alice", i, o, want)
		}
	}
	if len(ft.got()) != 0 {
		t.Errorf("%d runs while paused", len(ft.got()))
	}
}

func TestALockHeldByAnUnknownHolderIsASkipNamingIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	// A Java node holds the lock: no studio_replica row names it.
	if _, err := e.otherHolder("java-node-3").TryLock(t.Context(), "shared", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	e.start(e.options(e.job("shared", jobs.ScopeInstallation, 2*time.Second, ft)))
	e.waitIdle("shared", t0.Add(2*time.Second))
	e.clk.Advance(2 * time.Second)
	e.waitIdle("shared", t0.Add(4*time.Second))
	got := e.occurrences("shared")
	if len(got) != 2 {
		t.Fatalf("%d occurrences %+v; want 2", len(got), got)
	}
	for _, o := range got {
		if o.Outcome != "skipped" || o.Reason != "held-elsewhere" || o.Holder == nil || *o.Holder != "java-node-3" ||
			o.HolderKnown == nil || *o.HolderKnown || o.Replica != replicaID {
			t.Errorf("occurrence %+v; want skipped/held-elsewhere by java-node-3, not a known replica", o)
		}
	}
}

func TestALockHeldByALiveReplicaIsNotASkip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('replica-b', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES ('replica-dead', gen_random_uuid(), 'h', 1, 'dev', 'ready', now() - interval '1 hour')`)
	if _, err := e.otherHolder("replica-b").TryLock(t.Context(), "live", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.otherHolder("replica-dead").TryLock(t.Context(), "dead", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	e.start(e.options(e.job("live", jobs.ScopeInstallation, 2*time.Second, ft), e.job("dead", jobs.ScopeInstallation, 2*time.Second, ft)))
	e.waitIdle("live", t0.Add(2*time.Second))
	e.waitIdle("dead", t0.Add(2*time.Second))
	if got := e.occurrences("live"); len(got) != 0 {
		t.Errorf("occurrences %+v; want none: the live replica runs the occurrence", got)
	}
	got := e.occurrences("dead")
	if len(got) != 1 || got[0].Holder == nil || *got[0].Holder != "replica-dead" || got[0].HolderKnown == nil || !*got[0].HolderKnown {
		t.Errorf("occurrences %+v; want one held-elsewhere by the dead replica, a known one", got)
	}
}

func TestAStartAfterEveryReplicaWasDownRecordsOneMissedStretch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		missed           jobs.Missed
		count            int
		last, runNominal time.Duration // from t0
	}{
		// 12 due times passed (t0-115s ... t0-5s): the run at start is the
		// last one's occurrence; the row covers the 11 before it.
		{jobs.MissedRunOnce, 11, -15 * time.Second, -5 * time.Second},
		// missed: skip: all 12, and the next run is the next due time's.
		{jobs.MissedSkip, 12, -5 * time.Second, 5 * time.Second},
	} {
		t.Run(string(c.missed), func(t *testing.T) {
			t.Parallel()
			ft := &occTask{}
			e, _, o := sharedDBEnv(t, c.missed, t0.Add(-125*time.Second), ft)
			e.start(o)
			if c.missed == jobs.MissedSkip {
				e.waitIdle("shared", t0.Add(5*time.Second))
				e.clk.Advance(5 * time.Second)
			}
			eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
			if got, want := ft.got()[0].ScheduledAt, t0.Add(c.runNominal); !got.Equal(want) {
				t.Errorf("the run's nominal time %v; want %v", got, want)
			}
			got := e.occurrences("shared")
			if len(got) != 1 {
				t.Fatalf("occurrences %+v; want one stretch", got)
			}
			s := got[0]
			if s.Outcome != "missed" || s.Reason != "down" || s.Count != c.count || !s.Nominal.Equal(t0.Add(-115*time.Second)) ||
				s.Last == nil || !s.Last.Equal(t0.Add(c.last)) {
				t.Errorf("stretch %+v (last %v); want missed/down of %d from %v to %v", s, s.Last, c.count, t0.Add(-115*time.Second), t0.Add(c.last))
			}
		})
	}
}

func TestAStartWhileAnotherLiveReplicaHostsTheJobRecordsNoStretch(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e, _, o := sharedDBEnv(t, "", t0.Add(-125*time.Second), ft)
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('replica-b', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	e.exec(`INSERT INTO studio_job_status (replica_id, job_id, scope) VALUES ('replica-b', 'shared', 'installation')`)
	e.start(o)
	eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
	if got := e.occurrences("shared"); len(got) != 0 {
		t.Errorf("occurrences %+v; want none", got)
	}
}

func TestACronRunThatOutlastsItsNextTimesRecordsAnOverrun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	cron, err := jobs.ParseCron("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	e.start(e.options(jobtask.Job{Job: jobs.Job{ID: "minutely", Scope: jobs.ScopeInstance, Schedule: cron}, Task: ft}))
	e.waitIdle("minutely", t0.Add(time.Minute))
	e.clk.Advance(time.Minute)
	ft.waitStarts(t, 1)
	e.clk.Advance(150 * time.Second) // 09:03:30: 09:02 and 09:03 came while it ran
	ft.finish(t, tasks.Result{})
	e.waitIdle("minutely", t0.Add(4*time.Minute))
	got := e.occurrences("minutely")
	if len(got) != 1 || got[0].Reason != "overrun" || got[0].Count != 2 || !got[0].Nominal.Equal(t0.Add(2*time.Minute)) ||
		got[0].Last == nil || !got[0].Last.Equal(t0.Add(3*time.Minute)) || got[0].Scope != replicaID {
		t.Fatalf("occurrences %+v; want one skipped/overrun of 2 from 09:02 to 09:03 for this replica", got)
	}
}

func TestAnInstanceJobRecordsTheStretchItsReplicaWasDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := &occTask{}
	// This replica id last ran it 95 s before its start: 9 due times passed.
	e.exec(`INSERT INTO studio_job_status (replica_id, job_id, scope, last_finished_at, runs) VALUES ($1, 'inst', 'instance', $2, 1)`,
		replicaID, t0.Add(-95*time.Second))
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "inst", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second)}, Task: ft})
	o.Schedules = &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	e.start(o)
	eventually(t, "the run at start", func() bool { return len(ft.got()) == 1 })
	env := ft.got()[0]
	if want := t0.Add(-5 * time.Second); !env.ScheduledAt.Equal(want) || env.OccurrenceKey != "inst/"+replicaID+"/"+jobs.FormatNominal(want) {
		t.Errorf("the run at start got %v, %q; want the last due time that passed, %v, scoped to this replica", env.ScheduledAt, env.OccurrenceKey, want)
	}
	got := e.occurrences("inst")
	if len(got) != 1 || got[0].Reason != "down" || got[0].Count != 8 || got[0].Scope != replicaID ||
		!got[0].Nominal.Equal(t0.Add(-85*time.Second)) || got[0].Last == nil || !got[0].Last.Equal(t0.Add(-15*time.Second)) {
		t.Fatalf("occurrences %+v; want one missed/down of 8 from t0-85s to t0-15s for this replica", got)
	}
}

// heldLocks is a Locker whose lock is always held elsewhere; it counts the
// attempts.
type heldLocks struct{ countingLocks }

func (h *heldLocks) TryLock(ctx context.Context, name string, a, b time.Duration) (runner.Lock, error) {
	h.countingLocks.TryLock(ctx, name, a, b)
	return nil, locks.ErrHeldElsewhere
}

// A regression: the due time after a held-elsewhere skip was computed from
// the skip's nominal time truncated to the millisecond, which is before
// the exact due time, so the next due time was the same one again and the
// replica tried the lock in a loop.
func TestAFireThatFindsTheLockHeldWaitsForTheNextDueTime(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	end := t0.Add(-3*time.Second + 123456*time.Nanosecond) // database times have microseconds
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{"shared": end}}
	ft := e.task()
	o := e.options(e.job("shared", jobs.ScopeInstallation, 10*time.Second, ft))
	lk := &heldLocks{}
	o.Locks, o.Schedules = lk, sch
	e.start(o)
	e.waitIdle("shared", end.Add(10*time.Second))
	e.clk.Advance(end.Add(10 * time.Second).Sub(e.clk.Now()))
	e.waitIdle("shared", end.Add(20*time.Second))
	if n := lk.n(); n != 1 {
		t.Fatalf("%d lock attempts for one due time; want 1", n)
	}
}

// While a fixed-delay job runs, its next fire is the latest time its next
// run is expected to start: the run's start, its timeout and the delay
// (jobs overdue counts from it with every replica down).
func TestARunningJobsNextFireIsItsStartPlusTimeoutPlusTheDelay(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	r := e.start(e.options(e.job("long", jobs.ScopeInstance, 10*time.Second, ft)))
	ft.waitStarts(t, 1)
	want := t0.Add(jobs.TimeoutFloor + 10*time.Second) // the default timeout: max(5 min, 3 × 10 s)
	eventually(t, "the running status", func() bool {
		st := status(t, r, "long")
		return st.Running && st.NextFireAt != nil && st.NextFireAt.Equal(want)
	})
	ft.finish(t, tasks.Result{})
	e.waitIdle("long", t0.Add(10*time.Second))
}

// A duty's run is its cluster's occurrence: scope key the cluster, nominal
// time its due time.
func TestADutysRunIsItsClustersOccurrence(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	ft := e.task()
	ft.auto = true
	r := e.start(e.options(perClusterJob(e, "duty", 10*time.Second, ft)))
	r.AddCluster("eu-1", context.Background())
	ft.waitEnds(t, 1)
	e.waitIdle(jobs.DutyKey{Job: "duty", Cluster: "eu-1"}.String(), t0.Add(10*time.Second))
	runs := e.mem.history("duty")
	if len(runs) != 1 || runs[0].ScopeKey != "eu-1" || runs[0].Cluster != "eu-1" || !runs[0].NominalAt.Equal(t0) || runs[0].Triggered {
		t.Fatalf("runs %+v; want one of eu-1 with nominal time %v", runs, t0)
	}
}

// A duty's due times that passed between its previous owner's last run and
// this replica's acquisition of the cluster are one missed/down row, under
// the cluster's scope key.
func TestADutysDueTimesWithNoOwnerAreOneMissedStretch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	ft.auto = true
	// Another replica last ran it for eu-1 35 s before the acquisition.
	e.exec(`INSERT INTO studio_job_run (seq, job_id, replica_id, cluster, started_at, finished_at, outcome) VALUES (100000, 'duty', 'replica-b', 'eu-1', $1, $2, 'succeeded')`,
		t0.Add(-36*time.Second), t0.Add(-35*time.Second))
	r := e.start(e.options(perClusterJob(e, "duty", 10*time.Second, ft)))
	r.AddCluster("eu-1", context.Background())
	ft.waitEnds(t, 1)
	var got []occRow
	eventually(t, "the stretch", func() bool { got = e.occurrences("duty"); return len(got) > 0 })
	if len(got) != 1 || got[0].Reason != "down" || got[0].Scope != "eu-1" || got[0].Count != 3 ||
		!got[0].Nominal.Equal(t0.Add(-25*time.Second)) || got[0].Last == nil || !got[0].Last.Equal(t0.Add(-5*time.Second)) {
		t.Fatalf("occurrences %+v; want one missed/down of 3 from t0-25s to t0-5s for eu-1", got)
	}
}

// The nominal time of the run at start after a missed stretch belongs to
// the first tick: when that tick finds the job paused, a run after the
// resume has a nominal time of its own, not the stretch's.
func TestARunAfterAPausedFirstTickDoesNotTakeTheStartsNominalTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := &occTask{}
	e.exec(`INSERT INTO studio_job_status (replica_id, job_id, scope, last_finished_at, runs) VALUES ($1, 'inst', 'instance', $2, 1)`,
		replicaID, t0.Add(-95*time.Second))
	e.exec(`INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('inst', true, 'alice')`)
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "inst", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second)}, Task: ft})
	o.Schedules = &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	r := e.start(o)
	e.waitIdle("inst", t0.Add(10*time.Second)) // the first tick found it paused
	no := false
	if _, err := jobstore.ApplyChange(t.Context(), e.pool, "inst", jobstore.Change{Pause: &no, Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	r.SettingsChanged("inst")
	eventually(t, "the resume", func() bool { return !status(t, r, "inst").Paused })
	e.clk.Advance(10 * time.Second)
	eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
	if got := ft.got()[0].ScheduledAt; !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("the run after the resume has nominal time %v; want its own due time %v", got, t0.Add(10*time.Second))
	}
}

// runSchedules is fakeSchedules with the start of each job's last run
// (runner.RunLoader).
type runSchedules struct {
	*fakeSchedules
	starts map[string]time.Time
}

func (s *runSchedules) LoadRun(_ context.Context, job string) (time.Time, time.Time, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends[job], s.starts[job], s.clk.Now(), nil
}

func (s *runSchedules) setRun(job string, started, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends[job], s.starts[job] = end, started
}

// A tick that finds the lock held by a replica running that very due time
// records no skip: the run's end, read before the store's flush, takes
// the skip back, so the flush writes nothing for it. A lock that no run
// explains (a Java node's) is a skip.
func TestASkipThatAnotherReplicasRunExplainsIsTakenBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	store := jobstore.NewStore(e.pool, replicaID, nil) // not started: it flushes when the test says
	t.Cleanup(store.Stop)
	end := t0.Add(-3*time.Second + 250*time.Microsecond)
	sch := &runSchedules{fakeSchedules: &fakeSchedules{clk: e.clk, ends: map[string]time.Time{"shared": end, "java": end}}, starts: map[string]time.Time{}}
	for name, holder := range map[string]string{"shared": "replica-b", "java": "java-node-3"} {
		if _, err := e.otherHolder(holder).TryLock(t.Context(), name, time.Hour, 0); err != nil {
			t.Fatal(err)
		}
	}
	ft := e.task()
	o := e.options(e.job("shared", jobs.ScopeInstallation, 10*time.Second, ft), e.job("java", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Store, o.Schedules = store, sch
	r := e.start(o)
	due := end.Add(10 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(due.Sub(e.clk.Now()))
	e.waitIdle("shared", due.Add(10*time.Second)) // skipped
	e.waitIdle("java", due.Add(10*time.Second))
	// replica-b's run of that due time ends; its signal reaches this replica.
	sch.setRun("shared", due.Add(100*time.Millisecond), due.Add(2*time.Second))
	r.ScheduleChanged("shared")
	e.waitIdle("shared", due.Add(12*time.Second))
	if err := store.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := e.occurrences("shared"); len(got) != 0 {
		t.Errorf("occurrences of shared %+v; want none: replica-b ran that due time", got)
	}
	if got := e.occurrences("java"); len(got) != 1 || got[0].Holder == nil || *got[0].Holder != "java-node-3" {
		t.Errorf("occurrences of java %+v; want one held-elsewhere by java-node-3", got)
	}
}

// The run store answers the runner's occurrence reads.
var (
	_ runner.OccurrenceRecorder     = (*jobstore.Store)(nil)
	_ runner.DutyOccurrenceRecorder = (*jobstore.Store)(nil)
)

// stretchRow is what a test expects of one row: outcome/reason, the first
// and last nominal times (from t0) and the count.
type stretchRow struct {
	what        string
	first, last time.Duration
	count       int
	pausedBy    string
}

func checkStretch(t *testing.T, got []occRow, want []stretchRow) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		g, w := got[i], want[i]
		last := g.Nominal
		if g.Last != nil {
			last = *g.Last
		}
		by := ""
		if g.PausedBy != nil {
			by = *g.PausedBy
		}
		ok = g.Outcome+"/"+g.Reason == w.what && g.Nominal.Equal(t0.Add(w.first)) && last.Equal(t0.Add(w.last)) && g.Count == w.count && by == w.pausedBy
	}
	if !ok {
		var s []stretchRow
		for _, g := range got {
			last := g.Nominal
			if g.Last != nil {
				last = *g.Last
			}
			by := ""
			if g.PausedBy != nil {
				by = *g.PausedBy
			}
			s = append(s, stretchRow{g.Outcome + "/" + g.Reason, g.Nominal.Sub(t0), last.Sub(t0), g.Count, by})
		}
		t.Fatalf("rows %+v; want %+v", s, want)
	}
}

// A replica was killed while it ran the shared job, and every replica
// stayed down: the due times before its death are not missed/down (its
// replica was live and held the job: a fixed-delay shared job's next due
// time counts from an end, so they were not due), and the missed stretch
// starts at its death, its last heartbeat. Defect 4 of issue 22's
// adversarial pass: the stretch started at the lost run's due time.
func TestAStretchAfterARunWhoseReplicaDiedStartsAtTheDeath(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e, _, o := sharedDBEnv(t, jobs.MissedRunOnce, t0.Add(-125*time.Second), ft)
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES ('web-9', gen_random_uuid(), 'h', 1, 'dev', 'ready', $1)`,
		t0.Add(-80*time.Second))
	e.exec(`INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome, nominal_at, scope_key) VALUES ('shared', 'web-9', $1, 'running', $1, '')`,
		t0.Add(-115*time.Second))
	e.start(o)
	eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
	if got, want := ft.got()[0].ScheduledAt, t0.Add(-5*time.Second); !got.Equal(want) {
		t.Errorf("the run at start has nominal time %v; want %v", got, want)
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{{"missed/down", -75 * time.Second, -15 * time.Second, 7, ""}})
}

// The same for an instance job whose replica restarted under its id: the
// due times after the interrupted run's start until the crashed
// incarnation's last heartbeat came while it ran (skipped/overrun), the
// rest is missed/down.
func TestAnInstanceJobsRunCutByACrashIsOverrunUntilTheDeath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := &occTask{}
	e.exec(`INSERT INTO studio_job_status (replica_id, job_id, scope, last_finished_at, runs) VALUES ($1, 'inst', 'instance', $2, 1)`,
		replicaID, t0.Add(-95*time.Second))
	e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at, last_crash_at) VALUES ($1, gen_random_uuid(), 'h', 1, 'dev', 'ready', now(), $2)`,
		replicaID, t0.Add(-52*time.Second))
	e.exec(`INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key) VALUES ('inst', $1, $2, $3, 'interrupted', $2, $1)`,
		replicaID, t0.Add(-85*time.Second), t0)
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "inst", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second)}, Task: ft})
	o.Schedules = &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	e.start(o)
	eventually(t, "the run at start", func() bool { return len(ft.got()) == 1 })
	checkStretch(t, e.occurrences("inst"), []stretchRow{
		{"skipped/overrun", -75 * time.Second, -55 * time.Second, 3, ""},
		{"missed/down", -45 * time.Second, -15 * time.Second, 4, ""},
	})
}

// A job paused and resumed while every replica was down: the due times
// between the pause and the resume are skipped/paused, naming who paused
// it, and the stretch is split there; still paused at the start, the rest
// is paused too and nothing runs. Defect 5 of issue 22's adversarial pass:
// they were all missed/down.
func TestAPauseWhileEveryReplicaWasDownSplitsTheStretch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		resumed bool
		noAudit bool // paused by a direct write of the setting: its updated_at
		want    []stretchRow
		runs    int
	}{
		{"paused with no audit row", false, true, []stretchRow{
			{"missed/down", -115 * time.Second, -65 * time.Second, 6, ""},
			{"skipped/paused", -55 * time.Second, -5 * time.Second, 6, "carol"},
		}, 0},
		{"resumed", true, false, []stretchRow{
			{"missed/down", -115 * time.Second, -65 * time.Second, 6, ""},
			{"skipped/paused", -55 * time.Second, -35 * time.Second, 3, "alice"},
			{"missed/down", -25 * time.Second, -15 * time.Second, 2, ""},
		}, 1},
		{"still paused", false, false, []stretchRow{
			{"missed/down", -115 * time.Second, -65 * time.Second, 6, ""},
			{"skipped/paused", -55 * time.Second, -5 * time.Second, 6, "alice"},
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ft := &occTask{}
			e, _, o := sharedDBEnv(t, jobs.MissedRunOnce, t0.Add(-125*time.Second), ft)
			if c.noAudit {
				e.exec(`INSERT INTO studio_job_setting (job_id, paused, updated_by, updated_at) VALUES ('shared', true, 'carol', $1)`, t0.Add(-60500*time.Millisecond))
			} else {
				e.exec(`INSERT INTO studio_audit (at, actor, action, target) VALUES ($1, 'alice', 'jobs.pause', 'shared')`, t0.Add(-60500*time.Millisecond))
				if c.resumed {
					e.exec(`INSERT INTO studio_audit (at, actor, action, target) VALUES ($1, 'bob', 'jobs.resume', 'shared')`, t0.Add(-30500*time.Millisecond))
				}
				e.exec(`INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('shared', $1, 'x')`, !c.resumed)
			}
			e.start(o)
			if c.runs > 0 {
				eventually(t, "the run", func() bool { return len(ft.got()) == 1 })
				if got, want := ft.got()[0].ScheduledAt, t0.Add(-5*time.Second); !got.Equal(want) {
					t.Errorf("the run at start has nominal time %v; want %v", got, want)
				}
			} else {
				e.waitIdle("shared", t0.Add(5*time.Second)) // the first tick found it paused
			}
			checkStretch(t, e.occurrences("shared"), c.want)
			if n := len(ft.got()); n != c.runs {
				t.Errorf("%d runs; want %d", n, c.runs)
			}
		})
	}
}

// A duty's cluster whose runs were all pruned (housekeeping keeps the
// newest runs per job across its clusters) still has its last end in
// studio_duty_end: the stretch is counted from it. Defect 1 of issue 22's
// adversarial pass: nothing was recorded.
func TestADutysStretchCountsFromItsLastEndWhenItsRunsWerePruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	ft.auto = true
	e.exec(`INSERT INTO studio_duty_end (job_id, cluster, last_ended_at, last_started_at, last_replica_id) VALUES ('duty', 'eu-1', $1, $2, 'replica-b')`,
		t0.Add(-35*time.Second), t0.Add(-36*time.Second))
	r := e.start(e.options(perClusterJob(e, "duty", 10*time.Second, ft)))
	r.AddCluster("eu-1", context.Background())
	ft.waitEnds(t, 1)
	var got []occRow
	eventually(t, "the stretch", func() bool { got = e.occurrences("duty"); return len(got) > 0 })
	checkStretch(t, got, []stretchRow{{"missed/down", -25 * time.Second, -5 * time.Second, 3, ""}})
}

// A cron minute that falls while a `jobs trigger` run holds the job (it
// was triggered a few seconds before the minute and ran past it) is
// recorded as skipped/overrun by the replica that ran it: no run was that
// minute's occurrence, and its replica was live and held the lock, so it
// is never missed/down. Defect 3 of issue 22's adversarial pass: nothing
// was recorded, and a later start counted it as missed/down.
func TestACronMinuteDuringATriggeredRunIsAnOverrun(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		scope jobs.Scope
	}{
		{"installation", jobs.ScopeInstallation},
		{"instance", jobs.ScopeInstance},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ft := e.task()
			cron, err := jobs.ParseCron("* * * * *")
			if err != nil {
				t.Fatal(err)
			}
			sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{"minutely": t0.Add(-30 * time.Second)}}
			o := e.options(jobtask.Job{Job: jobs.Job{ID: "minutely", Scope: c.scope, Schedule: cron}, Task: ft})
			o.Schedules = sch
			r := e.start(o)
			// The 09:00 run (at once for the shared job; the instance job's
			// first cron time is 09:01, so run it by the clock).
			if c.scope == jobs.ScopeInstance {
				e.waitIdle("minutely", t0.Add(time.Minute))
				e.clk.Advance(time.Minute)
			}
			ft.waitStarts(t, 1)
			ft.finish(t, tasks.Result{})
			next := t0.Add(time.Minute)
			if c.scope == jobs.ScopeInstance {
				next = t0.Add(2 * time.Minute)
			}
			e.waitIdle("minutely", next)
			if c.scope == jobs.ScopeInstallation {
				e.expireLock("minutely") // lockAtLeastFor runs in database time, not on the fake clock
			}
			// Triggered 3 s before the next minute; it runs 10 s.
			e.clk.Advance(next.Add(-3 * time.Second).Sub(e.clk.Now()))
			if !r.Trigger("minutely") {
				t.Fatal("trigger ignored")
			}
			ft.waitStarts(t, 2)
			e.clk.Advance(10 * time.Second)
			ft.finish(t, tasks.Result{})
			e.waitIdle("minutely", next.Add(time.Minute))
			scope := ""
			if c.scope == jobs.ScopeInstance {
				scope = replicaID
			}
			got := e.occurrences("minutely")
			if len(got) != 1 || got[0].Outcome != "skipped" || got[0].Reason != "overrun" || !got[0].Nominal.Equal(next) || got[0].Count != 1 || got[0].Scope != scope {
				t.Fatalf("occurrences %+v; want one skipped/overrun at %v", got, next)
			}
		})
	}
}

// A paused shared job whose tick fires more than an interval late (a
// loaded machine, a stalled process) records every due time it passed,
// not only the latest: adversarial pass of issue 22, two replicas of a
// job every 1s on a loaded machine left paused occurrences 3 s apart,
// two due times with no row at all.
func TestALatePausedTickRecordsEveryDueTimeItPassed(t *testing.T) {
	t.Parallel()
	ft := &occTask{}
	e, _, o := sharedDBEnv(t, "", t0.Add(-3*time.Second), ft)
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	e.flush()
	yes := true
	if _, err := jobstore.ApplyChange(t.Context(), e.pool, "shared", jobstore.Change{Pause: &yes, Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	r.SettingsChanged("shared")
	eventually(t, "the pause to apply", func() bool { return status(t, r, "shared").Paused })
	e.clk.Advance(10*time.Second + 40*time.Millisecond)
	e.waitIdle("shared", t0.Add(17*time.Second))
	// One fire, 23 s late (the clock at 40 s): 17, 27 and 37 have come.
	e.clk.Advance(30*time.Second + 40*time.Millisecond)
	e.waitIdle("shared", t0.Add(47*time.Second))
	got := e.occurrences("shared")
	if len(got) != 4 {
		t.Fatalf("%d occurrences %+v; want 4 (7 s to 37 s)", len(got), got)
	}
	for i, o := range got {
		if want := t0.Add(time.Duration(10*i+7) * time.Second); o.Reason != "paused" || !o.Nominal.Equal(want) || o.Count != 1 {
			t.Errorf("occurrence %d: %+v; want skipped/paused at %v", i, o, want)
		}
	}
}
