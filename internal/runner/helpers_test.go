package runner_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// pollEvery is the pause between two looks at a condition; waitFor is how
// long a poll may take before the test fails. Neither is a synchronisation:
// every poll checks the runner's, the clock's or the database's state.
const (
	pollEvery = 2 * time.Millisecond
	waitFor   = 20 * time.Second
)

// replicaID is the lock holder and status owner of the runner under test.
const replicaID = "replica-a"

// t0 is where every fake clock starts.
var t0 = time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", waitFor, what)
		}
		time.Sleep(pollEvery)
	}
}

// every is jobs.Every that cannot fail.
func every(t testing.TB, d time.Duration) jobs.Schedule {
	t.Helper()
	s, err := jobs.Every(d)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeTask is a task whose runs block until the test releases them (or,
// when auto, end at once). It records every start and end on its clock and
// how many runs were in progress at once.
type fakeTask struct {
	clk    clock.Clock
	auto   bool // each run ends at once, successfully
	linger bool // a cancelled run still waits to be released before it returns

	mu        sync.Mutex
	active    int
	maxActive int
	starts    []time.Time
	ends      []time.Time
	causes    []error // context.Cause of each run that saw its context done

	release   chan tasks.Result
	closed    chan struct{}
	closeOnce sync.Once
}

func newFakeTask(clk clock.Clock) *fakeTask {
	return &fakeTask{clk: clk, release: make(chan tasks.Result), closed: make(chan struct{})}
}

func (f *fakeTask) Kind() string { return "fake" }

func (f *fakeTask) Run(ctx context.Context, _ tasks.Env) tasks.Result {
	f.mu.Lock()
	f.active++
	f.maxActive = max(f.maxActive, f.active)
	f.starts = append(f.starts, f.clk.Now())
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active--
		f.ends = append(f.ends, f.clk.Now())
		f.mu.Unlock()
	}()
	if f.auto {
		return tasks.Result{Output: "done"}
	}
	select {
	case res := <-f.release:
		return res
	case <-f.closed:
		return tasks.Result{}
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.causes = append(f.causes, context.Cause(ctx))
	f.mu.Unlock()
	if f.linger {
		select {
		case res := <-f.release:
			return res
		case <-f.closed:
		}
	}
	return tasks.Result{Err: context.Cause(ctx)}
}

// finish ends the run in progress with res (it waits for a run to take it).
func (f *fakeTask) finish(t testing.TB, res tasks.Result) {
	t.Helper()
	select {
	case f.release <- res:
	case <-time.After(waitFor):
		t.Fatalf("no run took the release within %v", waitFor)
	}
}

// shutdown lets every blocked run return (test cleanup).
func (f *fakeTask) shutdown() { f.closeOnce.Do(func() { close(f.closed) }) }

func (f *fakeTask) startCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

func (f *fakeTask) start(i int) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts[i]
}

func (f *fakeTask) end(i int) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ends[i]
}

func (f *fakeTask) cancelled() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.causes...)
}

func (f *fakeTask) maxConcurrent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxActive
}

// waitStarts waits until the task has started n runs.
func (f *fakeTask) waitStarts(t testing.TB, n int) {
	t.Helper()
	eventually(t, "run "+strconv.Itoa(n)+" to start", func() bool { return f.startCount() >= n })
}

// waitEnds waits until n runs have returned.
func (f *fakeTask) waitEnds(t testing.TB, n int) {
	t.Helper()
	eventually(t, "run "+strconv.Itoa(n)+" to end", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.ends) >= n
	})
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is one test's world: a migrated database, a pool, a fake clock, the
// store, the settings cache, the lock provider, a metrics registry and a
// log buffer. start builds and starts the runner over them.
type env struct {
	t        *testing.T
	pool     *pgxpool.Pool
	clk      *clock.Fake
	store    *jobstore.Store
	settings *jobstore.SettingsCache
	locks    *locks.Provider
	reg      *prometheus.Registry
	logs     *syncBuffer
	tasks    []*fakeTask
	r        *runner.Runner
	// mem, when set, stands in for the store and the settings: the env
	// has no database (newMemEnv).
	mem *memStore
	// bubble: the env lives in a synctest bubble (newBubbleEnv); the
	// runner and its tasks run on the real clock, which the bubble fakes,
	// and clk is unused.
	bubble bool
}

// newMemEnv is an env without PostgreSQL, for the runner's timing tests:
// runs, status and settings are kept in memory, and there is no lock
// provider (instance jobs only).
func newMemEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, clk: clock.NewFake(t0), mem: newMemStore(), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := pgtest.NewDB(t)
	pool, err := db.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	provider, err := locks.NewProvider(pool, locks.DefaultTable(), replicaID)
	if err != nil {
		t.Fatal(err)
	}
	store := jobstore.NewStore(pool, replicaID, nil)
	t.Cleanup(store.Stop)
	if err := store.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pool: pool, clk: clock.NewFake(t0), store: store, settings: jobstore.NewSettingsCache(pool),
		locks: provider, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
}

// task returns a fake task on the env's fake clock.
func (e *env) task() *fakeTask {
	var clk clock.Clock = e.clk
	if e.bubble {
		clk = clock.Real{}
	}
	ft := newFakeTask(clk)
	e.tasks = append(e.tasks, ft)
	return ft
}

// job declares a job running ft every d.
func (e *env) job(id string, scope jobs.Scope, d time.Duration, ft *fakeTask) jobtask.Job {
	return jobtask.Job{Job: jobs.Job{ID: id, Scope: scope, Schedule: every(e.t, d)}, Task: ft}
}

// options are the runner options of env; tests adjust them before start.
func (e *env) options(js ...jobtask.Job) runner.Options {
	var store runner.Recorder = e.store
	var settings runner.Settings = e.settings
	if e.mem != nil {
		store, settings = e.mem, e.mem
	}
	o := runner.Options{
		ReplicaID: replicaID, Jobs: js, Locks: runner.LocksOf(e.locks), Store: store, Settings: settings,
		Clock: e.clk, Logger: slog.New(slog.NewTextHandler(e.logs, nil)), Metrics: e.reg,
		ShutdownWait: 5 * time.Second,
		InitialDelay: func(jobs.Job) time.Duration { return 0 },
		DutySpread:   func(string, time.Duration, int) time.Duration { return 0 },
	}
	if e.bubble {
		// The bubble's clock: exact due times, no timer resolution.
		o.Clock, o.TimerResolution, o.Locks = clock.Real{}, -1, nil
	}
	return o
}

// start builds the runner from o and starts it; the runner is stopped (its
// blocked runs released first) when the test ends.
func (e *env) start(o runner.Options) *runner.Runner {
	e.t.Helper()
	r, err := runner.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.Start(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	e.r = r
	e.t.Cleanup(func() {
		for _, ft := range e.tasks {
			ft.shutdown()
		}
		r.Stop()
	})
	return r
}

// status is the runner's status of job id.
func status(t testing.TB, r *runner.Runner, id string) jobs.Status {
	t.Helper()
	for _, s := range r.Snapshot() {
		if s.JobID == id {
			return s
		}
	}
	t.Fatalf("job %q is not in the snapshot", id)
	return jobs.Status{}
}

// waitIdle waits until job id is back on the timer, due at next.
func (e *env) waitIdle(id string, next time.Time) jobs.Status {
	e.t.Helper()
	var st jobs.Status
	eventually(e.t, id+" to wait for "+next.Format(time.TimeOnly), func() bool {
		st = status(e.t, e.r, id)
		return !st.Running && st.NextFireAt != nil && st.NextFireAt.Equal(next)
	})
	return st
}

// waitPending waits until the fake clock has n active timers: the timer
// loop's, plus a run's timeout timer and, for an installation job, its
// keep-alive timer.
func (e *env) waitPending(n int) {
	e.t.Helper()
	eventually(e.t, strconv.Itoa(n)+" active timers", func() bool { return e.clk.Pending() == n })
}

// flush writes what the store holds.
func (e *env) flush() {
	e.t.Helper()
	if e.mem != nil {
		return
	}
	if err := e.store.Flush(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
}

// history is job's run history, oldest first, after a flush.
func (e *env) history(id string) []jobs.Run {
	e.t.Helper()
	if e.mem != nil {
		return e.mem.history(id)
	}
	e.flush()
	runs, err := jobstore.History(e.t.Context(), e.pool, id, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, j := 0, len(runs)-1; i < j; i, j = i+1, j-1 {
		runs[i], runs[j] = runs[j], runs[i]
	}
	return runs
}

// lockRow is a shedlock row (times are database time, UTC).
type lockRow struct {
	LockedBy  string
	LockedAt  time.Time
	LockUntil time.Time
}

func (e *env) lockRow(name string) lockRow {
	e.t.Helper()
	var r lockRow
	err := e.pool.QueryRow(e.t.Context(), `SELECT locked_by, locked_at, lock_until FROM shedlock WHERE name = $1`, name).
		Scan(&r.LockedBy, &r.LockedAt, &r.LockUntil)
	if err != nil {
		e.t.Fatalf("read lock row %q: %v", name, err)
	}
	r.LockedAt, r.LockUntil = r.LockedAt.UTC(), r.LockUntil.UTC()
	return r
}

// lockFree says whether name's lock_until has passed in database time.
func (e *env) lockFree(name string) bool {
	e.t.Helper()
	var free bool
	err := e.pool.QueryRow(e.t.Context(),
		`SELECT lock_until <= timezone('utc', CURRENT_TIMESTAMP) FROM shedlock WHERE name = $1`, name).Scan(&free)
	if err != nil {
		e.t.Fatalf("read lock row %q: %v", name, err)
	}
	return free
}

// expireLock lets database time pass for name's lockAtLeastFor: the row
// expires now, as it would after real seconds.
func (e *env) expireLock(name string) {
	e.t.Helper()
	e.exec(`UPDATE shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) WHERE name = $1`, name)
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(e.t.Context(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// otherHolder is a second lock provider (another replica) on the env's pool.
func (e *env) otherHolder(lockedBy string) *locks.Provider {
	e.t.Helper()
	p, err := locks.NewProvider(e.pool, locks.DefaultTable(), lockedBy)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// causeIs reports whether err's text is cause (the runner's causes are
// unexported, so tests compare their text).
func causeIs(err error, text string) bool { return err != nil && err.Error() == text }

var errBoom = errors.New("boom")

// memStore is the runner's Recorder and Settings in memory.
type memStore struct {
	mu       sync.Mutex
	seq      int64
	runs     map[int64]jobs.Run
	status   map[string]jobs.Status
	settings map[string]jobs.Setting
	loadErr  error // LoadStatus fails with it
}

func newMemStore() *memStore {
	return &memStore{runs: map[int64]jobs.Run{}, status: map[string]jobs.Status{}, settings: map[string]jobs.Setting{}}
}

func (m *memStore) LoadStatus(context.Context) (map[string]jobs.Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loadErr != nil {
		return nil, m.loadErr
	}
	out := map[string]jobs.Status{}
	for k, v := range m.status {
		out[k] = v
	}
	return out, nil
}

func (m *memStore) RetireUndeclared(_ context.Context, jobIDs, perCluster []string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.status {
		key, duty := jobs.ParseDutyKey(k)
		if slices.Contains(jobIDs, k) || (duty && slices.Contains(perCluster, key.Job)) {
			continue
		}
		delete(m.status, k)
		out = append(out, k)
	}
	return out, nil
}

func (m *memStore) NextSeq(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	return m.seq, nil
}

func (m *memStore) PutRun(r jobs.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[r.Seq] = r
}

func (m *memStore) PutStatus(st jobs.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status[st.JobID] = st
}

func (m *memStore) Get(_ context.Context, job string) (jobs.Setting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.settings[job]; ok {
		return s, nil
	}
	return jobs.Setting{JobID: job}, nil
}

// set makes an operator setting (the test then signals the runner).
func (m *memStore) set(s jobs.Setting) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settings[s.JobID] = s
}
func (m *memStore) Invalidate(string) {}
func (m *memStore) InvalidateAll()    {}

// Refresh reports no change: tests of the memory store signal the runner.
func (m *memStore) Refresh(context.Context) ([]string, error) { return nil, nil }

// history is job's runs, oldest first.
func (m *memStore) history(id string) []jobs.Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []jobs.Run
	for _, r := range m.runs {
		if r.JobID == id {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b jobs.Run) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}
