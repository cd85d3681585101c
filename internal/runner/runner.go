// Package runner is the job runner of SPEC §5.3-5.5: one timer goroutine
// over a heap of every job's next fire, a goroutine per run with a timeout,
// a lock keep-alive for installation jobs, and an orderly shutdown.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/startstop"
)

const (
	// DefaultShutdownWait is how long Stop waits for runs in progress before
	// it interrupts them.
	DefaultShutdownWait = 10 * time.Second
	// lockStatementTimeout bounds each lock statement (acquire, extend,
	// unlock); it is shorter than the shortest keep-alive interval (30 s).
	lockStatementTimeout = 5 * time.Second
	// settingsTimeout bounds reading an operator setting at a fire.
	settingsTimeout = 5 * time.Second
	// DefaultSettingsPollEvery is how often a replica reads every operator
	// setting again, besides the job.settings signal: a setting changed in
	// SQL without a NOTIFY, or a signal lost, applies within it.
	DefaultSettingsPollEvery = 10 * time.Second
	// errorTail is how much of an error is kept in status and history.
	errorTail = 2048
)

// Causes of a run's cancellation.
var (
	errTimeout  = errors.New("run timed out")
	errLockLost = errors.New("lock was lost")
	errShutdown = errors.New("runner shut down")
)

// Options configure a Runner.
type Options struct {
	ReplicaID string
	Jobs      []jobtask.Job // bound: each has a Task (jobtask.Bind)
	Locks     Locker        // LocksOf(a *locks.Provider); needed by installation jobs
	Store     Recorder      // the run store (jobstore.Store)
	Settings  Settings      // operator settings (jobstore.SettingsCache)
	Clock     clock.Clock   // default clock.Real
	Logger    *slog.Logger  // default discard
	Metrics   prometheus.Registerer
	// ShutdownWait: default DefaultShutdownWait.
	ShutdownWait time.Duration
	// Secrets are hidden (db.ScrubText) from every run's output and error
	// before they are stored or logged: the password of the replica's own
	// database connection. The password of any URL is hidden too.
	Secrets []string
	// Schedules is the installation-wide schedule (jobstore.Schedules). With
	// it, an installation job's timer follows the end of its last run
	// anywhere (docs/schedules.md); without it (unit tests), each replica
	// keeps its own fixed delay and the lock alone stands between them.
	Schedules Schedules
	// Offset is database time minus Clock's time, as last measured (the
	// registry's heartbeat). Timers fire at due times in database time:
	// Clock.Now() + Offset(). Nil: 0.
	Offset func() time.Duration
	// InitialDelay is the first fire's delay for a job (default: a random
	// fraction of a fixed delay, so replicas and jobs do not all fire at
	// once; the next cron time for cron jobs).
	InitialDelay func(j jobs.Job) time.Duration
	// PerJobMetrics is metrics.per_job (PerJobAuto, PerJobOn or PerJobOff;
	// "" is auto), and PerJobMetricsLimit auto's largest number of jobs
	// (Jobs less the built-in ones, a per-cluster job counted once) with
	// per-job series (0: DefaultPerJobLimit). docs/metrics.md.
	PerJobMetrics      string
	PerJobMetricsLimit int
	// SettingsPollEvery is how often the operator settings are read again
	// (default DefaultSettingsPollEvery; negative: never, for tests).
	SettingsPollEvery time.Duration
	// TimerResolution is the shortest wait of the timer goroutine: jobs due
	// within it of each other fire on one wake-up, each at most that late.
	// Default DefaultTimerResolution on the real clock (nil, clock.Real,
	// clock.Offset), none on any other clock (tests advance a fake clock to
	// exact due times); negative: none.
	TimerResolution time.Duration
	// MaxConcurrentRuns is runner.max_concurrent_runs: the most runs in
	// progress at once; a fire past it waits for a slot (it starts late,
	// and its timeout counts from its start). 0: no cap (unit tests); the
	// configuration's default is DefaultMaxConcurrentRuns. Built-in jobs
	// (studio-housekeeping) are not counted.
	MaxConcurrentRuns int
	// Backfills are the backfill occurrences of installation jobs
	// (jobstore.Backfills; backfill.go). Nil: no backfill runs here.
	Backfills Backfills
	// DutySpread is the delay of a new duty's first fire after its cluster
	// is acquired, from its key, its interval and the number of duties
	// hosted here (default dutySpread; slots.go). Cron duties fire at their
	// next cron time.
	DutySpread func(key string, every time.Duration, duties int) time.Duration
	// Members is the view of the live, ready replicas that designates, for
	// each installation job, the replica that tries its lock at the due
	// time (designate.go); nil: every replica tries at the due time.
	// DesignateGrace is the wait of each further choice (default
	// DefaultDesignateGrace; negative: no designation).
	Members        Members
	DesignateGrace time.Duration
	// DurableStarts is runner.durable_starts: a run's row is written
	// before its task starts (the Store must be a StartRecorder), so that
	// a replica killed while the task runs leaves the run's row behind
	// (start.go). False: the start goes with the store's next flush.
	DurableStarts bool
}

// DefaultTimerResolution: at 10,000 jobs on 1-10 s delays (about 3,000
// fires a second) a wake-up per due time cost the timer goroutine about a
// fifth of the process's CPU (docs/cost.md); one a millisecond at most
// costs a fire half a millisecond of lateness on average.
const DefaultTimerResolution = time.Millisecond

// maxIdleWorkers is how many run goroutines wait for the next fire when
// they have nothing to do; the rest end (see worker).
const maxIdleWorkers = 64

// Runner hosts jobs.
type Runner struct {
	o       Options
	log     *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	jobs     map[string]*jobState
	queue    timerHeap
	stopping bool
	// armed is the time the timer goroutine waits for (zero: it is not
	// waiting, or waits for a kick only); a push earlier than it kicks.
	armed      time.Time
	resolution time.Duration
	clusters   clusterDuties // per-cluster duties (clusters.go)

	// The timer goroutine is the Base's; runs (tick goroutines and
	// reschedules) are counted in runWG, and their context is not the
	// Base's, since Stop lets them finish within ShutdownWait.
	startstop.Base
	wake     chan struct{}
	runWG    sync.WaitGroup
	runsCtx  context.Context
	cancel   context.CancelCauseFunc
	started  time.Time
	stopOnce sync.Once

	// Run goroutines are reused (worker): fireDue hands a fire to an idle
	// one through work, or starts one. idle counts those waiting;
	// workersQuit ends them at Stop, and workersWG waits for them.
	work        chan fireWork
	idle        atomic.Int32
	workersQuit chan struct{}
	workersWG   sync.WaitGroup

	// slots caps the runs in progress (slots.go); quit is closed when Stop
	// begins, so fires waiting for a slot give up.
	slots *slots
	quit  chan struct{}

	// pauseWake wakes the pause watch (pause.go).
	pauseWake chan struct{}
}

// fireWork is one fire handed to a run goroutine.
type fireWork struct {
	js     *jobState
	fire   time.Time
	forced bool
}

type jobState struct {
	job   jobtask.Job
	sched jobs.Schedule // in force (configured or override)
	// override is the last operator override read, parsed (overrideOf):
	// read by the tick goroutine and by applySettings.
	override atomic.Pointer[parsedOverride]
	status   jobs.Status
	due      time.Time
	// labels are the pprof labels of its runs (set by the run goroutine;
	// one run of a job at a time).
	labels   pprof.LabelSet
	labelled bool
	queued   bool   // on the timer heap
	gen      uint64 // of its live heap entry (heap.go)
	running  bool
	failing  bool // the first failure was logged
	lastEnd  time.Time
	duty     *duty // per-cluster duties (clusters.go): nil for a job that is not per cluster
	// shared: an installation job on the installation-wide schedule.
	shared bool
	// forced: this fire is a trigger; it runs whatever the shared schedule says.
	forced bool
	// backfill: this fire runs a backfill occurrence, and liveDue is the
	// live due time it took the place of (backfill.go); r.mu.
	backfill bool
	liveDue  time.Time
	// accounted is the latest nominal time this replica recorded for the
	// job (a run, a skip or a miss); startNominal, the nominal time of the
	// run at start after a missed stretch (occurrence.go). The tick
	// goroutine's, and Start's.
	accounted, startNominal time.Time
	// catchUp: a missed stretch waits for this job's first tick to be
	// caught up (missed: catch-up, catchup.go); the tick goroutine's.
	catchUp *catchUpPending
	// heldSkip is the last held-elsewhere skip, which a read of the
	// shared schedule takes back from the store when a run of its due time
	// that started before heldBefore ended meanwhile (occurrence.go); r.mu.
	heldSkip   *jobs.OccurrenceRecord
	heldBefore time.Time
	// retryAt and retryNominal: the next try of a held lock before the
	// start deadline, and the nominal time it tries (deadline_skip.go); r.mu.
	retryAt, retryNominal time.Time
	// staleLock is a lock whose unlock failed after its run ended (the
	// database was read-only or unreachable, as in a failover): the next
	// tick releases it before it takes the lock again, so the job does not
	// wait for lockAtMostFor (docs/failover.md).
	staleLock Lock
	// designate: the wait for the designated replica (designate.go); r.mu.
	designate designation
}

// New builds a runner; Start starts it.
func New(o Options) (*Runner, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ShutdownWait <= 0 {
		o.ShutdownWait = DefaultShutdownWait
	}
	if o.InitialDelay == nil {
		o.InitialDelay = randomInitialDelay
	}
	if o.SettingsPollEvery == 0 {
		o.SettingsPollEvery = DefaultSettingsPollEvery
	}
	if o.MaxConcurrentRuns < 0 {
		return nil, fmt.Errorf("max concurrent runs %d: want 0 (no cap) or more", o.MaxConcurrentRuns)
	}
	if o.DutySpread == nil {
		o.DutySpread = dutySpread(o.MaxConcurrentRuns)
	}
	if o.DesignateGrace == 0 {
		o.DesignateGrace = DefaultDesignateGrace
	}
	r := &Runner{o: o, log: o.Logger, jobs: map[string]*jobState{}, wake: make(chan struct{}, 1), pauseWake: make(chan struct{}, 1),
		work: make(chan fireWork), workersQuit: make(chan struct{}), resolution: o.TimerResolution,
		slots: newSlots(o.MaxConcurrentRuns), quit: make(chan struct{})}
	if o.TimerResolution == 0 && r.realClock() {
		r.resolution = DefaultTimerResolution
	}
	lockOwner := map[string]string{} // lock name -> installation job id
	for _, j := range o.Jobs {
		if j.Task == nil {
			return nil, fmt.Errorf("job %q: no task bound", j.ID)
		}
		if j.PerCluster { // per-cluster duties (clusters.go)
			if err := r.addTemplate(j); err != nil {
				return nil, err
			}
			continue
		}
		if j.Scope == jobs.ScopeInstallation && o.Locks == nil {
			return nil, fmt.Errorf("job %q: installation jobs need a lock provider", j.ID)
		}
		if _, dup := r.jobs[j.ID]; dup || r.isTemplate(j.ID) {
			return nil, fmt.Errorf("job %q: duplicate id", j.ID)
		}
		if j.Scope == jobs.ScopeInstallation {
			if err := locks.ValidateName(j.LockName()); err != nil {
				return nil, fmt.Errorf("job %q: lock: %w", j.ID, err)
			}
			if prev, taken := lockOwner[j.LockName()]; taken {
				return nil, fmt.Errorf("job %q: lock %q is already taken by job %q", j.ID, j.LockName(), prev)
			}
			lockOwner[j.LockName()] = j.ID
		}
		j = scopedJob(j, jobScopeKey(j, o.ReplicaID)) // jitter.go
		r.jobs[j.ID] = &jobState{job: j, sched: j.Schedule,
			shared: j.Scope == jobs.ScopeInstallation && o.Schedules != nil}
	}
	if o.PerJobMetricsLimit <= 0 {
		o.PerJobMetricsLimit = DefaultPerJobLimit
	}
	configured := 0 // a built-in job (studio-housekeeping) is not counted
	for _, j := range o.Jobs {
		if !j.Builtin {
			configured++
		}
	}
	perJob, err := ResolvePerJob(o.PerJobMetrics, o.PerJobMetricsLimit, configured)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Metrics, perJob)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	if o.Metrics != nil {
		for _, c := range r.slots.collectors(o.MaxConcurrentRuns) {
			if err := o.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	if !perJob && o.PerJobMetrics != PerJobOff {
		r.log.Info("runner: more jobs than metrics.per_job_limit: the job metrics are for the whole replica (job_id=\"\"), studio_job_failing names failing jobs",
			"jobs", configured, "per_job_limit", o.PerJobMetricsLimit)
	}
	return r, nil
}

// PerJobMetrics reports whether the job metrics have per-job series
// (metrics.per_job, docs/metrics.md).
func (r *Runner) PerJobMetrics() bool { return r.metrics.perJob }

func randomInitialDelay(j jobs.Job) time.Duration {
	if j.Schedule.IsCron() {
		return 0 // the first fire is the next cron time anyway
	}
	return time.Duration(rand.Int64N(int64(j.Schedule.Every)))
}

// Start removes the status rows a previous process with the same replica
// id left of jobs this configuration does not declare, reads the others
// (so counters carry on), schedules every job and starts the timer
// goroutine. It fails for real when the status cannot be read, and then
// nothing runs.
func (r *Runner) Start(ctx context.Context) error {
	baseCtx, err := r.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start runner: %w", err)
	}
	// Jobs belong to the current configuration: the rows of jobs it no
	// longer declares go first, so every row of a live replica is a job it
	// hosts (docs/control.md, "Jobs removed from the configuration").
	r.mu.Lock()
	declared := make([]string, 0, len(r.jobs))
	for id := range r.jobs {
		declared = append(declared, id)
	}
	perCluster := make([]string, 0, len(r.clusters.templates))
	for _, j := range r.clusters.templates {
		perCluster = append(perCluster, j.ID)
	}
	r.mu.Unlock()
	removed, err := r.o.Store.RetireUndeclared(ctx, declared, perCluster)
	if err != nil {
		r.StartFailed()
		return fmt.Errorf("start runner: %w", err)
	}
	if len(removed) > 0 {
		r.log.Info("runner: removed the status of jobs the configuration no longer declares", "jobs", removed)
	}
	r.publishDefinitions(ctx) // configuration drift between replicas (drift.go)
	prior, err := r.o.Store.LoadStatus(ctx)
	if err != nil {
		r.StartFailed()
		return fmt.Errorf("start runner: %w", err)
	}
	// The installation-wide schedule: the end of each installation job's
	// last run anywhere, whichever process ran it.
	var ends map[string]time.Time
	if shared := r.sharedIDs(); len(shared) > 0 {
		ends, _, err = r.o.Schedules.Load(ctx, shared)
		if err != nil {
			r.StartFailed()
			return fmt.Errorf("start runner: %w", err)
		}
	}
	// What the database knows of the jobs' occurrences: whether another
	// live replica hosts each, and the last skip or miss recorded, so a
	// stretch of due times missed while no replica was up is recorded
	// once (occurrence.go). A failed read records no stretch.
	var hostedElsewhere map[string]bool
	var recorded map[string]jobs.StartTrace
	if or, ok := r.o.Store.(OccurrenceRecorder); ok && len(declared) > 0 {
		hostedElsewhere, recorded, err = or.OccurrenceStart(ctx, declared)
		if err != nil {
			r.log.Warn("runner: could not read the jobs' occurrences; no missed stretch is recorded at this start", "error", err)
			hostedElsewhere, recorded = nil, nil
		}
	}
	now := r.now()
	r.mu.Lock()
	r.runsCtx, r.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	r.started = now
	r.clusters.prior = prior // per-cluster duties (clusters.go)
	for id, js := range r.jobs {
		if p, ok := prior[id]; ok {
			js.status = p
			js.status.Running, js.status.NextFireAt = false, nil
			js.failing = p.LastOutcome.Failing()
		}
		js.status.ReplicaID, js.status.JobID, js.status.Scope = r.o.ReplicaID, id, js.job.Scope
		js.status.Schedule = js.sched.String()
		js.status.Since = now
		var due time.Time
		switch {
		case js.shared:
			// Due every after the last end anywhere; never run: at once;
			// missed while no replica was up: once now, or skipped.
			due = jobs.DueAfter(js.sched, ends[id], now, js.job.Missed)
			if recorded != nil && !r.deferCatchUp(js, ends[id], now, recorded[id]) && !hostedElsewhere[id] {
				js.startNominal = r.missedAtStart(js, ends[id], now, recorded[id])
			}
		case r.o.Schedules != nil && js.job.Scope == jobs.ScopeInstance && js.status.LastFinishedAt != nil:
			// An instance job follows this replica id's last run of it.
			due = jobs.DueAfter(js.sched, *js.status.LastFinishedAt, now, js.job.Missed)
			if recorded != nil && !r.deferCatchUp(js, *js.status.LastFinishedAt, now, recorded[id]) {
				js.startNominal = r.missedAtStart(js, *js.status.LastFinishedAt, now, recorded[id])
			}
		case js.sched.IsCron():
			due = js.sched.Next(now)
		default:
			due = now.Add(r.initialDelay(js))
		}
		r.push(js, jitterStart(js.sched, due, now)) // jitter.go
		r.putStatusLocked(js)
	}
	r.mu.Unlock()
	if !r.Go(func() { r.timerLoop(baseCtx) }) {
		return fmt.Errorf("start runner: %w", startstop.ErrStopped)
	}
	if r.o.SettingsPollEvery > 0 && !r.Go(func() { r.pollSettings(baseCtx) }) {
		return fmt.Errorf("start runner: %w", startstop.ErrStopped)
	}
	if pe, ok := r.o.Settings.(PauseEnder); ok && !r.Go(func() { r.watchPauseEnds(baseCtx, pe) }) {
		return fmt.Errorf("start runner: %w", startstop.ErrStopped)
	}
	r.MarkStarted()
	return nil
}

// now is the runner's time: database time as this replica last measured
// it (its clock plus the offset).
func (r *Runner) now() time.Time {
	t := r.o.Clock.Now()
	if r.o.Offset != nil {
		t = t.Add(r.o.Offset())
	}
	return t
}

// sharedIDs are the ids of the jobs on the installation-wide schedule.
func (r *Runner) sharedIDs() []string {
	var out []string
	for id, js := range r.jobs {
		if js.shared {
			out = append(out, id)
		}
	}
	return out
}

// push queues js at due, and wakes the timer goroutine when js is now the
// first due and earlier than the time it waits for. r.mu held.
func (r *Runner) push(js *jobState, due time.Time) {
	js.due = due
	t := due
	js.status.NextFireAt = &t
	r.queue.push(js)
	if first, _ := r.queue.first(); first.js == js && (r.armed.IsZero() || due.Before(r.armed)) {
		r.kick()
	}
}

func (r *Runner) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// timerLoop is the one timer goroutine: it waits for the earliest due job
// and launches a tick goroutine for every job that is due. It does nothing
// else.
func (r *Runner) timerLoop(ctx context.Context) {
	t := r.o.Clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		r.mu.Lock()
		wait := time.Hour // nothing queued: wake on a kick or at quit
		r.armed = time.Time{}
		if first, ok := r.queue.first(); ok {
			now := r.now()
			wait = first.due.Sub(now)
			if wait > 0 && wait < r.resolution {
				wait = r.resolution
			}
			r.armed = now.Add(max(wait, 0))
		}
		r.mu.Unlock()
		if wait <= 0 {
			r.fireDue()
			continue
		}
		t.Stop()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			continue
		case <-t.C():
		}
		r.fireDue()
	}
}

// fireDue launches every job whose time has come.
func (r *Runner) fireDue() {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		first, ok := r.queue.first()
		if !ok || first.due.After(now) {
			break
		}
		js, _ := r.queue.pop()
		if r.stopping {
			continue
		}
		js.running = true // NextFireAt stays the due time until the run starts (run.go)
		w := fireWork{js: js, fire: js.due, forced: js.forced}
		js.forced = false
		r.runWG.Add(1)
		select {
		case r.work <- w: // an idle run goroutine takes it
		default:
			r.workersWG.Add(1)
			go r.worker(w)
		}
	}
}

// worker runs fires: w, then each one handed to it while it is idle. A
// goroutine per fire cost the stack growth of every run (most of a fire's
// scheduling CPU at 10,000 jobs, docs/cost.md); a worker keeps its stack.
// It ends when maxIdleWorkers others are idle already, or at Stop.
func (r *Runner) worker(w fireWork) {
	defer r.workersWG.Done()
	for {
		r.tick(w.js, w.fire, w.forced)
		r.runWG.Done()
		if r.idle.Add(1) > maxIdleWorkers {
			r.idle.Add(-1)
			return
		}
		select {
		case w = <-r.work:
			r.idle.Add(-1)
		case <-r.workersQuit:
			r.idle.Add(-1)
			return
		}
	}
}

// Hosts reports whether the runner hosts job id.
func (r *Runner) Hosts(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.jobs[id]
	return ok || r.isTemplate(id) // per-cluster duties (clusters.go)
}

// JobIDs returns the id of every hosted job: with a per-cluster job, its
// own id and the key of each duty (jobs.DutyKey).
func (r *Runner) JobIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.jobs))
	for id := range r.jobs {
		out = append(out, id)
	}
	for _, j := range r.clusters.templates { // per-cluster duties (clusters.go): the job's own id too
		out = append(out, j.ID)
	}
	return out
}

// Trigger makes job fire now, unless it is running (then it is ignored).
// The host calls it only for a trigger request it claimed in studio_request
// (internal/host), never for a bare bus signal.
func (r *Runner) Trigger(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fired, ok := r.triggerDuties(id); ok { // per-cluster duties (clusters.go)
		return fired
	}
	js, ok := r.jobs[id]
	if !ok || js.running || js.backfill || r.stopping || !js.queued {
		return false
	}
	js.forced = true
	r.push(js, r.now())
	r.log.Info("runner: job triggered", "job_id", id)
	return true
}

// pollSettings reads every operator setting again every
// SettingsPollEvery and applies those that changed, as a job.settings
// signal would: the bus wakes, rows decide, and a row changed without a
// signal is not missed.
func (r *Runner) pollSettings(ctx context.Context) {
	t := time.NewTicker(r.o.SettingsPollEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, settingsTimeout)
		changed, err := r.o.Settings.Refresh(pctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				r.log.Warn("runner: reading the job settings failed; the next poll tries again", "error", err)
				failing = true
			}
			continue
		case failing:
			r.log.Info("runner: reading the job settings recovered")
			failing = false
		}
		for _, id := range changed {
			r.log.Info("runner: the settings poll found a job setting changed; applying it", "job_id", id)
			r.applySettings(id)
		}
		if len(changed) > 0 {
			r.kickPauses()
		}
	}
}

// SettingsChanged re-reads job's operator setting and reschedules it when it
// is waiting (the bus's job.settings signal). For a per-cluster job, each
// duty.
func (r *Runner) SettingsChanged(id string) {
	r.o.Settings.Invalidate(id)
	r.applySettings(id)
	r.kickPauses()
}

// applySettings reads job id's setting (from the cache) and applies it to
// the job, or to every duty of a per-cluster job.
func (r *Runner) applySettings(id string) {
	r.mu.Lock()
	var targets []*jobState
	if js, ok := r.jobs[id]; ok {
		targets = append(targets, js)
	} else if r.isTemplate(id) {
		for c := range r.clusters.owned {
			if js, ok := r.jobs[jobs.DutyKey{Job: id, Cluster: c}.String()]; ok {
				targets = append(targets, js)
			}
		}
	}
	if len(targets) == 0 || r.stopping || r.runsCtx == nil {
		r.mu.Unlock()
		return
	}
	r.runWG.Add(len(targets))
	r.mu.Unlock()
	for _, js := range targets {
		go r.applySettingsTo(js)
	}
}

// applySettingsTo is applySettings for one job or duty; it is counted in
// runWG.
func (r *Runner) applySettingsTo(js *jobState) {
	defer r.runWG.Done()
	id := js.key()
	ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
	defer cancel()
	sched, paused, invalid, _, err := r.settings(ctx, js)
	if err != nil {
		r.log.Warn("runner: read job setting", "job_id", id, "error", err)
		return
	}
	// A shared job's new schedule applies from the last end anywhere.
	var sharedEnd time.Time
	sharedOK := false
	if js.shared {
		sharedEnd, sharedOK = r.lastEnd(ctx, js)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if js.duty.over() || r.jobs[id] != js {
		return // a duty whose lease ended meanwhile
	}
	js.sched = sched
	js.status.Schedule, js.status.Paused, js.status.InvalidSchedule = sched.String(), paused, invalid
	if js.queued && !js.running && !js.forced && !js.backfill {
		base := js.lastEnd
		if sharedOK {
			base = sharedEnd
		}
		if base.IsZero() {
			base = r.started
		}
		next := sched.Next(base)
		if invalid != "" {
			next = r.now()
		}
		if now := r.now(); next.Before(now) {
			next = now
		}
		r.push(js, next)
	}
	r.putStatusLocked(js)
}

// ResyncSettings drops every cached setting and rereads the shared
// schedule of every installation job (after a bus reconnect: a run's end
// may have been announced while the bus was down).
func (r *Runner) ResyncSettings() {
	r.o.Settings.InvalidateAll()
	r.mu.Lock()
	ids := r.sharedIDs()
	r.mu.Unlock()
	for _, id := range ids {
		r.ScheduleChanged(id)
	}
}

// ScheduleChanged rereads the shared schedule of installation job id and
// moves its timer to the due time (the bus's job.schedule signal: a run of
// it ended somewhere). A job running here, or triggered, is left alone.
func (r *Runner) ScheduleChanged(id string) {
	r.mu.Lock()
	js, ok := r.jobs[id]
	if !ok || !js.shared || r.stopping || r.runsCtx == nil {
		r.mu.Unlock()
		return
	}
	r.runWG.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.runWG.Done()
		ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
		defer cancel()
		end, started, dbNow, err := r.loadRun(ctx, js)
		if err != nil {
			r.log.Warn("runner: read the shared schedule; the next fire asks again", "job_id", id, "error", err)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		js.designate.heardStart = time.Time{} // an end after any start heard (designate.go)
		r.resolveHeldLocked(js, end, started)
		if !js.queued || js.running || js.forced || js.backfill || r.stopping || end.IsZero() {
			return
		}
		// The due time as this replica's timers count, from the database's
		// now of the same read.
		due := jobs.LocalDue(jobs.DueAfter(js.sched, end, dbNow, jobs.MissedRunOnce), dbNow, r.now())
		due = jitterStart(js.sched, due, r.now()) // a fixed delay's jitter delays a run at once (jitter.go)
		if d := due.Sub(js.due); d > -time.Millisecond && d < time.Millisecond {
			return
		}
		r.push(js, due)
		r.putStatusLocked(js)
	}()
}

// loadEnd reads the end of js's last run anywhere (zero: never ran) and
// the database's now.
func (r *Runner) loadEnd(ctx context.Context, js *jobState) (time.Time, time.Time, error) {
	end, _, dbNow, err := r.loadRun(ctx, js)
	return end, dbNow, err
}

// loadRun is loadEnd with the start of the run that ended (zero: unknown,
// when the Schedules is not a RunLoader).
func (r *Runner) loadRun(ctx context.Context, js *jobState) (time.Time, time.Time, time.Time, error) {
	if rl, ok := r.o.Schedules.(RunLoader); ok {
		return rl.LoadRun(ctx, js.job.ID)
	}
	ends, dbNow, err := r.o.Schedules.Load(ctx, []string{js.job.ID})
	if err != nil {
		return time.Time{}, time.Time{}, time.Time{}, err
	}
	return ends[js.job.ID], time.Time{}, dbNow, nil
}

// lastEnd is loadEnd without the database's now; ok is false on an error.
func (r *Runner) lastEnd(ctx context.Context, js *jobState) (time.Time, bool) {
	end, _, err := r.loadEnd(ctx, js)
	if err != nil {
		r.log.Warn("runner: read the shared schedule", "job_id", js.job.ID, "error", err)
		return time.Time{}, false
	}
	return end, true
}

// settings returns the schedule in force, paused, the parser's cause when
// an override is malformed, and who changed the setting last (updated_by).
func (r *Runner) settings(ctx context.Context, js *jobState) (jobs.Schedule, bool, string, string, error) {
	s, err := r.o.Settings.Get(ctx, js.job.ID)
	if err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return js.sched, js.status.Paused, js.status.InvalidSchedule, "", err
	}
	paused, by := r.pausedNow(s), pausedBy(s) // pause.go: a pause whose end passed is over
	if s.Schedule == "" {
		return js.job.Schedule, paused, "", by, nil
	}
	o := js.overrideOf(s.Schedule)
	if o.invalid != "" {
		return js.job.Schedule, paused, o.invalid, by, nil
	}
	return o.sched, paused, "", by, nil
}

// parsedOverride is an operator's schedule and zone override as stored
// (text) and what it parses to: the schedule in force, or the parser's
// cause.
type parsedOverride struct {
	text    string
	sched   jobs.Schedule
	invalid string
}

// overrideOf returns override text parsed. The last one parsed is kept,
// so a schedule is parsed once per change, not at every fire (a cron
// expression's parse allocates and costs microseconds).
func (js *jobState) overrideOf(text string) *parsedOverride {
	if o := js.override.Load(); o != nil && o.text == text {
		return o
	}
	o := &parsedOverride{text: text}
	ov, err := jobs.ParseOverride(text)
	if err != nil {
		o.invalid = err.Error()
	} else {
		// A zone or a schedule alone keeps the configured other.
		o.sched = ov.Apply(js.job.Schedule)
	}
	js.override.Store(o)
	return o
}

// Snapshot returns this replica's status of every job.
func (r *Runner) Snapshot() []jobs.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]jobs.Status, 0, len(r.jobs))
	for _, js := range r.jobs {
		out = append(out, js.status)
	}
	return out
}

func (r *Runner) putStatusLocked(js *jobState) {
	r.putStatusAtLocked(js, r.now())
}

// putStatusAtLocked is putStatusLocked with the time at hand (a run's start
// or end), which saves a clock read.
func (r *Runner) putStatusAtLocked(js *jobState, now time.Time) {
	if r.dutyStatusStale(js) { // per-cluster duties (clusters.go)
		return
	}
	js.status.UpdatedAt = now
	js.status.Running = js.running
	// The timeout in force, stored so that every reader (jobs list, the
	// page) judges a run in progress by it, not by the schedule's default.
	js.status.Timeout = js.job.TimeoutFor(js.sched)
	if r.o.Store != nil {
		r.o.Store.PutStatus(js.status)
	}
	r.keepDutyStatus(js) // per-cluster duties (clusters.go)
}

// finish puts js back on the timer after a run or a skip.
func (r *Runner) finish(js *jobState, next time.Time) {
	r.finishAt(js, next, r.now())
}

// finishAt is finish for a run that ended at now.
func (r *Runner) finishAt(js *jobState, next, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	js.running = false
	switch {
	case r.dutyLeftLocked(js): // a duty whose lease ended stays off the timer (clusters.go)
	case !r.stopping:
		r.push(js, next)
	case !next.IsZero():
		// A clean stop keeps the next due time in the status row: a
		// reader (jobs overdue) counts from it with every replica down.
		t := next
		js.status.NextFireAt = &t
	}
	r.putStatusAtLocked(js, now)
}

// realClock reports whether the runner runs on the real clock (possibly
// offset), whose timers are the runtime's.
func (r *Runner) realClock() bool {
	switch r.o.Clock.(type) {
	case clock.Real, clock.Offset:
		return true
	}
	return false
}

// Stop stops every timer, waits up to ShutdownWait for runs in progress,
// then interrupts the rest (recorded interrupted) and waits for them. Safe
// to call twice, concurrently, and without Start.
func (r *Runner) Stop() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopping = true
		cancel := r.cancel
		r.mu.Unlock()
		close(r.quit)  // fires waiting for a slot give up
		r.Base.Stop()  // the timer goroutine
		defer func() { // the idle run goroutines, once no run is left
			close(r.workersQuit)
			r.workersWG.Wait()
		}()
		if cancel == nil {
			return
		}
		done := make(chan struct{})
		go func() { r.runWG.Wait(); close(done) }()
		t := time.NewTimer(r.o.ShutdownWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			r.log.Warn("runner: runs still in progress after the shutdown wait; interrupting them", "wait", r.o.ShutdownWait.String())
			cancel(errShutdown)
			<-done
		}
		r.releaseStaleAtStop() // run.go
		cancel(errShutdown)
	})
}

// tick is one firing of js: settings, lock, run, record, reschedule.
func (r *Runner) tick(js *jobState, fire time.Time, forced bool) {
	if r.takeBackfill(js) { // backfill.go
		r.runBackfill(js)
		return
	}
	ctx := newLazyTimeout(r.runsCtx, settingsTimeout) // the settings cache answers from memory nearly always
	sched, paused, invalid, pausedBy, err := r.settings(ctx, js)
	ctx.release()
	// The nominal time set at start is the first tick's only: a first tick
	// that does not run (paused, moved by the shared schedule) drops it.
	startNominal := js.startNominal
	js.startNominal = time.Time{}
	retry := r.takeRetry(js, fire) // deadline_skip.go
	if err != nil {
		r.log.Warn("runner: read job setting; using the last known", "job_id", js.job.ID, "error", err)
	}
	r.mu.Lock()
	if !sched.Equal(js.sched) || js.status.Schedule == "" {
		js.status.Schedule = sched.String()
	}
	js.sched = sched
	js.status.Paused, js.status.InvalidSchedule = paused, invalid
	r.mu.Unlock()
	switch {
	case invalid != "":
		r.log.Warn("runner: job has an invalid schedule; asking again in a minute", "job_id", js.job.ID, "error", invalid)
		r.finish(js, r.skipInvalid(js))
		return
	case paused:
		r.finish(js, r.skipPaused(js, sched, fire, pausedBy))
		return
	}
	if r.deferToDesignated(js, sched, fire, forced, !retry.IsZero()) { // designate.go
		return
	}
	// The cap on concurrent runs: a fire past it waits for a slot, before
	// the shared schedule is read and before any lock is taken, so an
	// installation job holds no lock while it waits and reads the shared
	// schedule as it is when it may start (one run per tick).
	if !r.acquireSlot(js) {
		r.finish(js, time.Time{}) // stopping, or the duty's lease ended: off the timer
		return
	}
	defer r.releaseSlot(js)
	// A shared job asks the database first: a run that ended elsewhere
	// since this timer was set (its bus signal lost or late) moves the due
	// time, and this replica does not even try the lock. A read that fails
	// leaves the decision to the lock, as without a shared schedule.
	occ := occurrence{triggered: forced, startNominal: startNominal, retry: retry}
	if js.shared && !forced {
		ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
		end, started, dbNow, err := r.loadRun(ctx, js)
		cancel()
		if err == nil {
			occ.end, occ.dbNow, occ.readNow = end, dbNow, r.now()
			r.mu.Lock()
			r.resolveHeldLocked(js, end, started)
			r.mu.Unlock()
		}
		// A job that never ran anywhere has nothing to follow: its timer
		// (at once, or a cron's time) stands, and the lock decides.
		if err == nil && !end.IsZero() {
			if due := jobs.DueAfter(sched, end, dbNow, jobs.MissedRunOnce); due.After(dbNow) {
				// Counted from the database's now of the same read, so a
				// wrong offset cannot make the timer spin.
				r.finish(js, jobs.LocalDue(due, dbNow, r.now()))
				return
			}
		} else if err != nil && r.runsCtx.Err() == nil {
			r.log.Warn("runner: read the shared schedule; leaving it to the lock", "job_id", js.job.ID, "error", err)
		}
	}
	if js.catchUp != nil && r.catchUpTick(js, sched, occ) { // catchup.go
		return
	}
	r.nominalFor(js, sched, fire, &occ)
	if r.skipPastDeadline(js, sched, occ) { // deadline_skip.go
		return
	}
	r.run(js, sched, fire, occ)
}

// Interrupt cancels every run in progress at once (they are recorded
// interrupted) and stops the runner.
func (r *Runner) Interrupt() {
	r.mu.Lock()
	r.stopping = true
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel(errShutdown)
	}
	r.Stop()
}
