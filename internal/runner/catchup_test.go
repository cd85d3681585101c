package runner_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// gateTask records each run's Env and the replica that ran it, and holds
// each run until the test lets one go (release); it counts the runs in
// progress at once across every replica that shares it.
type gateTask struct {
	mu        sync.Mutex
	envs      []tasks.Env
	active    int
	maxActive int
	gate      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newGateTask(t *testing.T) *gateTask {
	g := &gateTask{gate: make(chan struct{}), closed: make(chan struct{})}
	t.Cleanup(g.shutdown)
	return g
}

func (*gateTask) Kind() string { return "fake" }

func (g *gateTask) Run(ctx context.Context, env tasks.Env) tasks.Result {
	g.mu.Lock()
	g.envs = append(g.envs, env)
	g.active++
	g.maxActive = max(g.maxActive, g.active)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.active--
		g.mu.Unlock()
	}()
	select {
	case <-g.gate:
	case <-g.closed:
	case <-ctx.Done():
	}
	return tasks.Result{}
}

// release lets the run in progress end (it waits for one to take it).
func (g *gateTask) release(t *testing.T) {
	t.Helper()
	select {
	case g.gate <- struct{}{}:
	case <-time.After(waitFor):
		t.Fatalf("no run took the release within %v", waitFor)
	}
}

func (g *gateTask) shutdown() { g.closeOnce.Do(func() { close(g.closed) }) }

func (g *gateTask) got() []tasks.Env {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]tasks.Env(nil), g.envs...)
}

func (g *gateTask) waitStarts(t *testing.T, n int) {
	t.Helper()
	eventually(t, "a run to start", func() bool { return len(g.got()) >= n })
}

func (g *gateTask) concurrent() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxActive
}

// nominals are the nominal times of runs, each as an offset from t0.
func nominals(envs []tasks.Env) []time.Duration {
	var out []time.Duration
	for _, e := range envs {
		out = append(out, e.ScheduledAt.Sub(t0))
	}
	return out
}

func sameDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// catchUpEnv is sharedDBEnv with missed: catch-up and c.
func catchUpEnv(t *testing.T, c jobs.CatchUp, lastEnd time.Time, task tasks.Task) (*env, *fakeSchedules, runner.Options) {
	e, sch, o := sharedDBEnv(t, jobs.MissedCatchUp, lastEnd, task)
	o.Jobs[0].CatchUp = c
	return e, sch, o
}

// 12 due times of a job every 10s passed with no replica up (t0-115s ...
// t0-5s); catch_up {max: 3, within: 1h}: the three newest run, oldest
// first, each with its own nominal time and occurrence key, each after the
// one before it ended, under one lock; the nine before them are one
// missed/down row; then the job follows its schedule from the last end.
func TestACatchUpRunsTheNewestMissedOccurrencesOneAfterAnother(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, _, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	e.start(o)
	for i, want := range []time.Duration{-25 * time.Second, -15 * time.Second, -5 * time.Second} {
		g.waitStarts(t, i+1)
		env := g.got()[i]
		if got := env.ScheduledAt; !got.Equal(t0.Add(want)) || env.OccurrenceKey != "shared//"+jobs.FormatNominal(t0.Add(want)) {
			t.Fatalf("caught-up run %d has nominal time %v (%q); want %v", i+1, got, env.OccurrenceKey, t0.Add(want))
		}
		if l := e.lockRow("shared"); l.LockedBy != replicaID || e.lockFree("shared") {
			t.Fatalf("caught-up run %d runs without the job's lock: %+v", i+1, l)
		}
		if n := len(g.got()); n != i+1 {
			t.Fatalf("%d runs started while caught-up run %d runs; want one at a time", n, i+1)
		}
		g.release(t)
	}
	e.waitIdle("shared", t0.Add(10*time.Second)) // every after the last caught-up run's end
	if c := g.concurrent(); c != 1 {
		t.Errorf("%d runs at once; want 1", c)
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""}})
	var got []time.Duration
	for _, r := range e.runNominals("shared") {
		got = append(got, r.nominal.Sub(t0))
	}
	if want := []time.Duration{-25 * time.Second, -15 * time.Second, -5 * time.Second}; !sameDurations(got, want) {
		t.Fatalf("runs of nominal times %v; want %v", got, want)
	}
	if !e.lockFree("shared") {
		t.Error("the lock is still held after the catch-up")
	}
	e.clk.Advance(10 * time.Second)
	g.waitStarts(t, 4)
	if got := g.got()[3].ScheduledAt; !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("the next run has nominal time %v; want the live due time %v", got, t0.Add(10*time.Second))
	}
	g.release(t)
}

// A cron job's live cron time that comes during a catch-up is overrun, as
// during any long run: a caught-up run never overlaps the live schedule.
func TestACronCatchUpOverrunsTheLiveTimesItRunsThrough(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e := newEnv(t)
	cron, err := jobs.ParseCron("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	// Down from 08:54:30: 08:55 ... 09:00 passed (09:00 is the start).
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{"minutely": t0.Add(-330 * time.Second)}}
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "minutely", Scope: jobs.ScopeInstallation, Schedule: cron, Missed: jobs.MissedCatchUp,
		CatchUp: jobs.CatchUp{Max: 3, Within: time.Hour}}, Task: g})
	o.Schedules = sch
	e.start(o)
	g.waitStarts(t, 1)
	g.release(t)
	g.waitStarts(t, 2)
	e.clk.Advance(70 * time.Second) // 09:01 comes while the second caught-up run runs
	g.release(t)
	g.waitStarts(t, 3)
	g.release(t)
	e.waitIdle("minutely", t0.Add(2*time.Minute))
	if got, want := nominals(g.got()), []time.Duration{-2 * time.Minute, -time.Minute, 0}; !sameDurations(got, want) {
		t.Fatalf("caught up %v; want %v", got, want)
	}
	checkStretch(t, e.occurrences("minutely"), []stretchRow{
		{"missed/down", -5 * time.Minute, -3 * time.Minute, 3, ""},
		{"skipped/overrun", time.Minute, time.Minute, 1, ""},
	})
}

// An instance job catches up its own replica id's stretch, without a
// lock.
func TestAnInstanceJobCatchesUpItsOwnStretch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := &occTask{}
	e.exec(`INSERT INTO studio_job_status (replica_id, job_id, scope, last_finished_at, runs) VALUES ($1, 'inst', 'instance', $2, 1)`,
		replicaID, t0.Add(-95*time.Second))
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "inst", Scope: jobs.ScopeInstance, Schedule: every(t, 10*time.Second),
		Missed: jobs.MissedCatchUp, CatchUp: jobs.CatchUp{Max: 2, Within: time.Hour}}, Task: ft})
	o.Schedules = &fakeSchedules{clk: e.clk, ends: map[string]time.Time{}}
	e.start(o)
	e.waitIdle("inst", t0.Add(10*time.Second))
	if got, want := nominals(ft.got()), []time.Duration{-15 * time.Second, -5 * time.Second}; !sameDurations(got, want) {
		t.Fatalf("caught up %v; want %v", got, want)
	}
	if key := ft.got()[0].OccurrenceKey; key != "inst/"+replicaID+"/"+jobs.FormatNominal(t0.Add(-15*time.Second)) {
		t.Errorf("occurrence key %q; want this replica's scope", key)
	}
	got := e.occurrences("inst")
	checkStretch(t, got, []stretchRow{{"missed/down", -85 * time.Second, -25 * time.Second, 7, ""}})
	if got[0].Scope != replicaID {
		t.Errorf("the stretch's scope key %q; want %q", got[0].Scope, replicaID)
	}
}

// A replica that stops during a catch-up runs no more of it: the due
// times it did not run are recorded as missed/down, not left out.
func TestACatchUpCutByAStopRecordsTheRestAsMissed(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, _, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	r := e.start(o)
	g.waitStarts(t, 1)
	e.waitPending(timersRunningInstalled)
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	e.waitPending(timersRunningInstalled - 1) // the timer loop has gone: the stop began
	g.release(t)
	<-stopped
	if n := len(g.got()); n != 1 {
		t.Fatalf("%d caught-up runs after the stop began; want only the one in progress", n)
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{
		{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""},
		{"missed/down", -15 * time.Second, -5 * time.Second, 2, ""},
	})
}

// Three replicas start at once after a stretch with none up: each finds
// the stretch, one catches it up under the job's lock, and the others
// find the lock held or the shared schedule moved. Each caught-up
// occurrence runs exactly once, one at a time; the stretch is one row;
// the next due time runs once.
func TestThreeReplicasStartingAtOnceCatchUpEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e := newEnv(t)
	sch := &fakeSchedules{clk: e.clk, ends: map[string]time.Time{"shared": t0.Add(-125 * time.Second)}}
	job := jobtask.Job{Job: jobs.Job{ID: "shared", Scope: jobs.ScopeInstallation, Schedule: every(t, 10*time.Second),
		Missed: jobs.MissedCatchUp, CatchUp: jobs.CatchUp{Max: 3, Within: time.Hour}}, Task: g}
	ids := []string{replicaID, "replica-b", "replica-c"}
	for _, id := range ids { // live, as registered replicas are
		e.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES ($1, gen_random_uuid(), 'h', 1, 'dev', 'ready', now())`, id)
	}
	var stores []*jobstore.Store
	var runners []*runner.Runner
	for _, id := range ids {
		store := jobstore.NewStore(e.pool, id, nil)
		if err := store.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Stop)
		provider, err := locks.NewProvider(e.pool, locks.DefaultTable(), id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := runner.New(runner.Options{ReplicaID: id, Jobs: []jobtask.Job{job}, Locks: runner.LocksOf(provider), Store: store,
			Settings: jobstore.NewSettingsCache(e.pool), Clock: e.clk, Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Metrics: prometheus.NewRegistry(), ShutdownWait: 5 * time.Second, Schedules: sch})
		if err != nil {
			t.Fatal(err)
		}
		stores, runners = append(stores, store), append(runners, r)
	}
	t.Cleanup(func() {
		g.shutdown()
		for _, r := range runners {
			r.Stop()
		}
	})
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Start(t.Context()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// While the first caught-up run runs, the two other replicas tick: the
	// shared schedule has not moved, and each finds the lock held.
	g.waitStarts(t, 1)
	for i, r := range runners {
		if ids[i] == g.got()[0].ReplicaID {
			continue
		}
		eventually(t, ids[i]+" to find the lock held", func() bool {
			st := status(t, r, "shared")
			return !st.Running && st.NextFireAt != nil && st.NextFireAt.Equal(t0.Add(5*time.Second)) // it asks again in 5 s
		})
	}
	if n := strings.Count(e.logs.String(), "the lock of a job to catch up is held"); n != 2 {
		t.Fatalf("%d replicas found the lock held while the first caught-up run ran; want 2\n%s", n, e.logs.String())
	}
	for i := range 3 {
		g.waitStarts(t, i+1)
		g.release(t)
	}
	// Every replica waits for the due time after the catch-up's end.
	for _, r := range runners {
		eventually(t, "every replica to wait for t0+10s", func() bool {
			st := status(t, r, "shared")
			return !st.Running && st.NextFireAt != nil && !st.NextFireAt.After(t0.Add(10*time.Second))
		})
	}
	flushAll := func() {
		for _, s := range stores {
			if err := s.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	flushAll()
	if got, want := nominals(g.got()), []time.Duration{-25 * time.Second, -15 * time.Second, -5 * time.Second}; !sameDurations(got, want) {
		t.Fatalf("caught up %v; want %v, each once", got, want)
	}
	if by := g.got(); by[0].ReplicaID != by[1].ReplicaID || by[1].ReplicaID != by[2].ReplicaID {
		t.Errorf("caught up by %s, %s, %s; want one replica", by[0].ReplicaID, by[1].ReplicaID, by[2].ReplicaID)
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""}})
	// The next due time: once, on one replica.
	e.clk.Advance(10 * time.Second)
	g.waitStarts(t, 4)
	g.release(t)
	for _, r := range runners {
		eventually(t, "every replica to wait past t0+10s", func() bool {
			st := status(t, r, "shared")
			return !st.Running && st.NextFireAt != nil && st.NextFireAt.After(t0.Add(10*time.Second))
		})
	}
	flushAll()
	if got, want := nominals(g.got()), []time.Duration{-25 * time.Second, -15 * time.Second, -5 * time.Second, 10 * time.Second}; !sameDurations(got, want) {
		t.Fatalf("runs of nominal times %v; want %v", got, want)
	}
	if c := g.concurrent(); c != 1 {
		t.Errorf("%d runs at once across the replicas; want 1", c)
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""}})
}

// A jobs trigger while a catch-up waits for the lock replaces the
// catch-up (its end moves the schedule): the stretch is recorded whole, as
// missed: skip would, and not left out.
func TestATriggerBeforeTheCatchUpRecordsTheStretch(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, _, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	other, err := e.otherHolder("replica-z").TryLock(t.Context(), "shared", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(o)
	e.waitIdle("shared", t0.Add(5*time.Second)) // the lock is held: it asks again in 5 s
	if err := other.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !r.Trigger("shared") {
		t.Fatal("the trigger was not taken")
	}
	g.waitStarts(t, 1)
	if env := g.got()[0]; !env.Triggered {
		t.Fatalf("the run is not the trigger's: %+v", env)
	}
	g.release(t)
	e.waitIdle("shared", t0.Add(10*time.Second))
	checkStretch(t, e.occurrences("shared"), []stretchRow{{"missed/down", -115 * time.Second, -5 * time.Second, 12, ""}})
}

// Issue 24 review D4: a jobs trigger while another replica holds the
// job's lock (it catches the stretch up) records nothing of the stretch:
// the trigger finds the lock held, and the catch-up stays pending. Once
// the lock is free and the shared schedule has not moved, this replica
// catches the stretch up as usual.
func TestATriggerWhileAnotherReplicaCatchesUpRecordsNoStretch(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, _, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	other, err := e.otherHolder("replica-z").TryLock(t.Context(), "shared", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(o)
	e.waitIdle("shared", t0.Add(5*time.Second)) // the lock is held: it asks again in 5 s
	if !r.Trigger("shared") {
		t.Fatal("the trigger was not taken")
	}
	var next time.Time
	eventually(t, "the trigger's tick to find the lock held", func() bool {
		st := status(t, r, "shared")
		if st.Running || st.SkippedElsewhere == 0 || st.NextFireAt == nil {
			return false
		}
		next = *st.NextFireAt
		return true
	})
	for _, row := range e.occurrences("shared") {
		if row.Reason == jobs.ReasonDown {
			t.Fatalf("the stretch was recorded (%s/%s from %v, count %d) while another replica held the lock", row.Outcome, row.Reason, row.Nominal.Sub(t0), row.Count)
		}
	}
	if n := len(g.got()); n != 0 {
		t.Fatalf("%d runs while another replica held the lock", n)
	}
	if err := other.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(next.Sub(e.clk.Now()))
	for i := range 3 {
		g.waitStarts(t, i+1)
		g.release(t)
	}
	if got, want := nominals(g.got()), []time.Duration{-25 * time.Second, -15 * time.Second, -5 * time.Second}; !sameDurations(got, want) {
		t.Fatalf("caught up %v; want %v", got, want)
	}
	eventually(t, "the catch-up to end", func() bool { return !status(t, r, "shared").Running })
	var down []occRow
	for _, row := range e.occurrences("shared") {
		if row.Reason == jobs.ReasonDown {
			down = append(down, row)
		}
	}
	checkStretch(t, down, []stretchRow{{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""}})
}

// Issue 24 review D4: a jobs trigger that takes the lock after another
// replica caught the stretch up (the shared schedule moved) drops the
// catch-up and records nothing of the stretch: that replica recorded it.
func TestATriggerAfterAnotherReplicaCaughtUpRecordsNoStretch(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, sch, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	other, err := e.otherHolder("replica-z").TryLock(t.Context(), "shared", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(o)
	e.waitIdle("shared", t0.Add(5*time.Second)) // the lock is held: it asks again in 5 s
	sch.set("shared", t0)                       // replica-z's catch-up ended (its bus signal not seen here)
	if err := other.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !r.Trigger("shared") {
		t.Fatal("the trigger was not taken")
	}
	g.waitStarts(t, 1)
	if env := g.got()[0]; !env.Triggered {
		t.Fatalf("the run is not the trigger's: %+v", env)
	}
	g.release(t)
	eventually(t, "the trigger's run to end", func() bool { return !status(t, r, "shared").Running && len(g.got()) == 1 })
	if rows := e.occurrences("shared"); len(rows) != 0 {
		t.Fatalf("the stretch that replica-z caught up was recorded again here: %+v", rows)
	}
}

// failingEnds is a fakeSchedules whose RecordEnd fails the first failures
// times it is called.
type failingEnds struct {
	*fakeSchedules
	mu       sync.Mutex
	failures int
	calls    int
}

func (f *failingEnds) RecordEnd(ctx context.Context, job, replica string, seq int64, started time.Time) (time.Time, error) {
	f.mu.Lock()
	f.calls++
	fail := f.failures > 0
	if fail {
		f.failures--
	}
	f.mu.Unlock()
	if fail {
		return time.Time{}, errors.New("the shared schedule is unreachable")
	}
	return f.fakeSchedules.RecordEnd(ctx, job, replica, seq, started)
}

func (f *failingEnds) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Issue 24 review D5: a caught-up run's end that cannot be written to the
// shared schedule (after a few tries) ends the catch-up with the job's
// lock kept: a replica that took a freed lock would find the shared
// schedule still at the stretch's anchor and run the same due times
// again. The due times left are recorded as missed/down.
func TestACatchUpWhoseEndCannotBeWrittenKeepsTheLockAndStops(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, sch, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	fe := &failingEnds{fakeSchedules: sch, failures: 1 << 20}
	o.Schedules = fe
	e.start(o)
	g.waitStarts(t, 1)
	g.release(t)
	eventually(t, "the catch-up to end or go on", func() bool {
		return len(g.got()) > 1 || strings.Contains(e.logs.String(), "the catch-up ends and the job's lock is kept")
	})
	if n := len(g.got()); n != 1 {
		t.Fatalf("%d caught-up runs although the first one's end could not be recorded; want 1", n)
	}
	e.waitIdle("shared", t0.Add(10*time.Second))
	if n := fe.n(); n != 3 {
		t.Errorf("the end was tried %d times; want 3", n)
	}
	if l := e.lockRow("shared"); l.LockedBy != replicaID || e.lockFree("shared") {
		t.Errorf("the lock was let go after an end that could not be recorded: %+v", l)
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{
		{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""},
		{"missed/down", -15 * time.Second, -5 * time.Second, 2, ""},
	})
}

// The catch-up above keeps the lock; once it expires, the next holder
// finds the shared schedule still at the stretch's anchor. It used to run
// the stretch's due times again; the first caught-up run's row, ended,
// now says the stretch is that run's, and the catch-up is dropped: no due
// time runs twice.
func TestACatchUpWhoseEndWasNotRecordedIsNotRunAgainByTheNextHolder(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, sch, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	fe := &failingEnds{fakeSchedules: sch, failures: 1 << 20}
	o.Schedules = fe
	a := e.start(o)
	g.waitStarts(t, 1)
	g.release(t)
	e.waitIdle("shared", t0.Add(10*time.Second))
	a.Stop()
	if err := e.store.Flush(t.Context()); err != nil { // the run's end, as the store writes it within a second
		t.Fatal(err)
	}
	if e.lockFree("shared") {
		t.Fatal("the catch-up let the lock go after an end that could not be recorded")
	}
	e.exec(`UPDATE shedlock SET lock_until = timezone('utc', now()) WHERE name = 'shared'`) // it expired

	// Another replica starts into the same stretch.
	store := jobstore.NewStore(e.pool, "replica-b", nil)
	if err := store.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Stop)
	provider, err := locks.NewProvider(e.pool, locks.DefaultTable(), "replica-b")
	if err != nil {
		t.Fatal(err)
	}
	ob := o
	ob.ReplicaID, ob.Store, ob.Locks, ob.Metrics = "replica-b", store, runner.LocksOf(provider), prometheus.NewRegistry()
	b, err := runner.New(ob)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	eventually(t, "replica-b to drop the catch-up", func() bool {
		return strings.Contains(e.logs.String(), "dropping the catch-up, whose stretch is that run's")
	})
	eventually(t, "replica-b to wait for the due time after the first caught-up run", func() bool {
		st := status(t, b, "shared")
		return !st.Running && st.NextFireAt != nil && st.NextFireAt.Equal(t0.Add(10*time.Second))
	})
	if got := nominals(g.got()); !sameDurations(got, []time.Duration{-25 * time.Second}) {
		t.Fatalf("runs of nominal times %v; want only the first catch-up's -25s", got)
	}
}

// A caught-up run's end that fails once is tried again; the catch-up goes
// on, and the lock is let go at its end.
func TestACatchUpRetriesAnEndThatFailedOnce(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, sch, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	fe := &failingEnds{fakeSchedules: sch, failures: 1}
	o.Schedules = fe
	e.start(o)
	for i := range 3 {
		g.waitStarts(t, i+1)
		g.release(t)
	}
	e.waitIdle("shared", t0.Add(10*time.Second))
	if n := fe.n(); n != 4 {
		t.Errorf("%d end writes; want 4 (one tried again)", n)
	}
	if !e.lockFree("shared") {
		t.Error("the lock is still held after the catch-up")
	}
	checkStretch(t, e.occurrences("shared"), []stretchRow{{"missed/down", -115 * time.Second, -35 * time.Second, 9, ""}})
}

// latenessObservations counts the start-lateness histogram's observations.
func latenessObservations(t *testing.T, e *env) uint64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() == "studio_job_start_lateness_seconds" {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// Caught-up runs are late by design (by up to catch_up.within): they do
// not feed the start-lateness histogram, whose p99 would otherwise jump
// after every outage. The next live run does.
func TestCaughtUpRunsAreNotCountedAsLate(t *testing.T) {
	t.Parallel()
	g := newGateTask(t)
	e, _, o := catchUpEnv(t, jobs.CatchUp{Max: 3, Within: time.Hour}, t0.Add(-125*time.Second), g)
	e.start(o)
	for i := range 3 {
		g.waitStarts(t, i+1)
		g.release(t)
	}
	e.waitIdle("shared", t0.Add(10*time.Second))
	if n := latenessObservations(t, e); n != 0 {
		t.Errorf("%d lateness observations after a catch-up; want 0", n)
	}
	e.clk.Advance(10 * time.Second)
	g.waitStarts(t, 4)
	if n := latenessObservations(t, e); n != 1 {
		t.Errorf("%d lateness observations after the live run started; want 1", n)
	}
	g.release(t)
}
