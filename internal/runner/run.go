package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/tasks"
)

// run executes one tick of js under schedule sched that fired at fire,
// the occurrence occ (occurrence.go): it acquires the job's lock (an
// installation job), starts the run, executes the task under its timeout
// and the lock's keep-alive, classifies the result, records it, and puts
// the job back on the timer. Each step is a function of its own below.
func (r *Runner) run(js *jobState, sched jobs.Schedule, fire time.Time, occ occurrence) {
	held, ok := r.acquire(js, sched, occ)
	if !ok {
		return // skipped (held elsewhere) or could not start: recorded and rescheduled
	}
	r.mu.Lock()
	stopping := r.stopping || js.duty.over() // a duty's lease may have ended meanwhile
	r.mu.Unlock()
	// Nothing ran on these two paths: the lock goes back at once, without
	// the minimum gap that would keep the tick from every other replica.
	if stopping {
		r.giveBack(held.current(), js)
		r.finish(js, time.Time{})
		return
	}
	run, ok := r.begin(js, sched, occ)
	if !ok {
		r.giveBack(held.current(), js)
		return
	}
	timeout := js.job.TimeoutFor(sched)
	res, cause := r.execute(js, sched, run, occ, held, timeout)
	v := r.classify(js, res, cause, timeout)
	// The end goes to the shared schedule before the lock is freed: a
	// replica that takes the lock after this unlock reads this end
	// (endedMeanwhile), so it cannot run the same tick again.
	end := r.recordEnd(js, run, v.outcome)
	if v.outcome != jobs.OutcomeLockLost {
		r.unlock(held.current(), js) // a lost lock is never unlocked: another replica may hold it
	}
	ended := r.record(js, sched, fire, occ, run, v)
	r.scheduleNext(js, end, ended)
}

// runLock is the lock a run of an installation job holds: the keep-alive
// replaces it at each extension and drops it when it is lost. A nil
// runLock (an instance job) holds nothing.
type runLock struct {
	mu   sync.Mutex
	lock Lock          // nil once lost
	end  *lockDeadline // deadline.go: the job shim's deadline
	// atLeast is the minimum gap the lock was taken with, which each
	// extension keeps: a live run's (jobs.LockAtLeastFor); zero for a
	// catch-up's or a backfill's, whose locks must not outlast their runs
	// (an extension with the live gap held a backfill's lock up to 5 min
	// past its end, and the live tick then found it held and was lost).
	atLeast time.Duration
}

// current is the lock held now, or nil.
func (h *runLock) current() Lock {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lock
}

func (h *runLock) set(l Lock) {
	h.mu.Lock()
	h.lock = l
	h.mu.Unlock()
}

// acquire takes the lock of an installation job (an instance job takes
// none: a nil runLock and true). When the lock is held elsewhere, or
// cannot be had, the tick is recorded and rescheduled here, and ok is
// false.
func (r *Runner) acquire(js *jobState, sched jobs.Schedule, occ occurrence) (held *runLock, ok bool) {
	if js.job.Scope != jobs.ScopeInstallation {
		return nil, true
	}
	lockFrom := time.Now() // the real clock, as the job shim's (deadline.go)
	l, err := r.tryLock(js, jobs.LockAtMostFor(sched), jobs.LockAtLeastFor(sched))
	now := r.now()
	if errors.Is(err, locks.ErrHeldElsewhere) {
		r.skipHeldElsewhere(js, sched, occ, now)
		return nil, false
	}
	if err != nil {
		r.recordNoRun(js, sched, now, err)
		return nil, false
	}
	if js.shared && !occ.triggered {
		if next, notDue := r.endedMeanwhile(js, sched); notDue {
			r.giveBack(l, js)
			r.finish(js, next)
			return nil, false
		}
	}
	if occ.triggered && js.catchUp != nil {
		r.catchUpTriggered(js, sched) // catchup.go
	}
	return &runLock{lock: l, end: newLockDeadline(lockFrom, jobs.LockAtMostFor(sched)), atLeast: jobs.LockAtLeastFor(sched)}, true
}

// endedMeanwhile reads the shared schedule again once the lock is held.
// The tick read it before it tried the lock; a run elsewhere may have
// ended between that read and the lock (its end is recorded before its
// unlock, run). If the job is no longer due, notDue is true and next is
// its due time on this replica's clock. A read that fails leaves the
// decision to the lock, as without a shared schedule.
func (r *Runner) endedMeanwhile(js *jobState, sched jobs.Schedule) (next time.Time, notDue bool) {
	ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
	end, _, dbNow, err := r.loadRunUnderLock(ctx, js) // and announces the start (designate.go)
	cancel()
	if err != nil || end.IsZero() {
		return time.Time{}, false
	}
	due := jobs.DueAfter(sched, end, dbNow, jobs.MissedRunOnce)
	if !due.After(dbNow) {
		return time.Time{}, false
	}
	return jobs.LocalDue(due, dbNow, r.now()), true
}

// giveBack frees a lock taken for a tick that turned out not to be due,
// at once: the lock's minimum gap is for a run, and none ran. Release
// leaves lock_until at now in one statement (this happens only when two
// replicas' ticks cross). If it fails, the lock expires at its
// lockAtMostFor, as after a crash.
func (r *Runner) giveBack(l Lock, js *jobState) {
	if l == nil {
		return // an instance job holds none
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		r.log.Warn("runner: could not give back a lock taken for a tick that had already run elsewhere; trying again at the job's next try",
			"job_id", js.job.ID, "error", err)
		r.mu.Lock()
		if js.staleLock == nil {
			js.staleLock = releaseOnly{l}
		}
		r.mu.Unlock()
	}
}

// releaseOnly is a stale lock under which nothing ran: given back with
// no minimum gap (Release), as giveBack would have.
type releaseOnly struct{ Lock }

func (l releaseOnly) Unlock(ctx context.Context) error { return l.Release(ctx) }

// skipHeldElsewhere records a tick whose lock another holder has, and
// reschedules js.
func (r *Runner) skipHeldElsewhere(js *jobState, sched jobs.Schedule, occ occurrence, now time.Time) {
	retried, reason := r.retryHeld(js, sched, occ, now) // a start deadline tries again before it (deadline_skip.go)
	if retried {
		return
	}
	r.mu.Lock()
	js.status.SkippedElsewhere++
	js.status.LastSkippedElsewhereAt = &now
	js.lastEnd = now
	r.mu.Unlock()
	r.metrics.skipped.WithLabelValues(js.job.ID).Inc()
	// Written unless the holder is a live replica (the store reads
	// the holder): a Java node's tick, or a dead replica's lock.
	r.skipHeld(js, sched, occ, jobs.OccurrenceRecord{NominalAt: occ.nominal, Outcome: jobs.OccurrenceSkipped,
		Reason: reason, LockName: js.job.LockName()})
	next := sched.Next(now)
	if js.shared && occ.onGrid() {
		// The fallback stays on the installation's due times, so
		// that every replica's next skip, if any, has the same key.
		if n := occ.readNow.Add(gridNext(sched, occ.end, occ.nominal).Sub(occ.dbNow)); n.After(now) {
			next = n
		}
	}
	r.finish(js, next)
}

// begin gives the run its seq and records it running (history and
// status). When no seq can be had the tick is recorded as one that could
// not start, rescheduled, and ok is false.
func (r *Runner) begin(js *jobState, sched jobs.Schedule, occ occurrence) (run jobs.Run, ok bool) {
	seqCtx := newLazyTimeout(r.runsCtx, lockStatementTimeout) // the seq block answers from memory nearly always
	seq, err := r.o.Store.NextSeq(seqCtx)
	seqCtx.release()
	if err != nil {
		r.recordNoRun(js, sched, r.now(), err)
		return jobs.Run{}, false
	}
	started := r.now()
	run = jobs.Run{Seq: seq, JobID: js.job.ID, ReplicaID: r.o.ReplicaID, Cluster: js.duty.cluster(), StartedAt: started,
		Outcome: jobs.OutcomeRunning, NominalAt: jobs.Nominal(occ.nominal), ScopeKey: r.scopeKey(js), Triggered: occ.triggered,
		Backfill: occ.backfill}
	r.o.Store.PutRun(run)
	r.recordStart(js, run) // start.go
	r.mu.Lock()
	js.status.LastStartedAt = &started
	// While it runs, the next run is expected at the latest one interval
	// after the timeout (jobs overdue counts from it).
	nextAtLatest := sched.Next(started.Add(js.job.TimeoutFor(sched)))
	js.status.NextFireAt = &nextAtLatest
	r.putStatusAtLocked(js, started)
	r.mu.Unlock()
	if !occ.backfill && !occ.catchUp { // a backfill or caught-up occurrence is late by design
		r.metrics.observeLateness(js.job.ID, started.Sub(occ.nominal))
	}
	return run, true
}

// execute runs the task of js under a context cancelled at the timeout,
// when the lock (held, kept alive meanwhile) or a duty's lease is lost, or
// at shutdown. It returns the task's result and the context's cause as
// the task returned: a timeout that fires after a successful return does
// not relabel it.
func (r *Runner) execute(js *jobState, sched jobs.Schedule, run jobs.Run, occ occurrence, held *runLock, timeout time.Duration) (tasks.Result, error) {
	runCtx, cancelRun := context.WithCancelCause(r.runsCtx)
	stopWatchingDuty := js.duty.watch(cancelRun) // a duty's run ends with its lease (clusters.go)
	defer stopWatchingDuty()
	var wg sync.WaitGroup
	stopAux := make(chan struct{})
	stopTimeout := r.afterFunc(&wg, stopAux, runCtx, timeout, func() { cancelRun(errTimeout) })
	if held != nil {
		r.keepAlive(&wg, stopAux, runCtx, cancelRun, js, sched, run.Seq, held)
	}
	// The run's context is named for the job (a pprof label), so a goroutine
	// dump or a profile says which job a goroutine works for.
	if !js.labelled { // made once per job: one allocation fewer per run
		js.labels, js.labelled = pprof.Labels("job_id", js.job.ID), true
	}
	env := tasks.Env{JobID: js.job.ID, ReplicaID: r.o.ReplicaID, RunSeq: run.Seq, Cluster: run.Cluster, Deadline: js.duty.deadline(),
		ScheduledAt: occ.nominal, OccurrenceKey: jobs.OccurrenceKey(js.job.ID, run.ScopeKey, occ.nominal), Triggered: occ.triggered}
	if held != nil {
		env.Deadline = held.end.deadline
		if l := held.current(); l != nil {
			env.FencingToken = l.Token()
		}
	} else if gen, ok := js.duty.generation(); ok {
		env.FencingToken = gen
	}
	var res tasks.Result
	pprof.Do(runCtx, js.labels, func(ctx context.Context) {
		res = js.job.Task.Run(ctx, env)
	})
	cause := context.Cause(runCtx)
	stopTimeout()
	close(stopAux)
	wg.Wait()
	cancelRun(nil)
	return res, cause
}

// keepAlive starts the goroutine (counted in wg) that extends held every
// half of lockAtMostFor until stop is closed or runCtx is done. An
// extension that fails drops the lock (it is never unlocked then: another
// replica may hold it) and cancels the run with errLockLost.
func (r *Runner) keepAlive(wg *sync.WaitGroup, stop <-chan struct{}, runCtx context.Context, cancelRun context.CancelCauseFunc,
	js *jobState, sched jobs.Schedule, seq int64, held *runLock) {
	every := jobs.KeepAliveEvery(sched)
	t := r.o.Clock.NewTimer(every) // started with the run, not with its goroutine
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-runCtx.Done():
				return
			case <-t.C():
			}
			ctx, cancel := context.WithTimeout(runCtx, lockStatementTimeout)
			from := time.Now()
			next, err := held.current().Extend(ctx, jobs.LockAtMostFor(sched), held.atLeast)
			cancel()
			if err != nil {
				if runCtx.Err() != nil {
					return
				}
				r.log.Error("runner: lost the lock of a running job; cancelling the run", "job_id", js.job.ID, "run_seq", seq, "error", err)
				held.set(nil)
				cancelRun(errLockLost)
				return
			}
			held.set(next)
			held.end.extended(from)
			t.Reset(every)
		}
	}()
}

// verdict is what a run's end is recorded as.
type verdict struct {
	outcome jobs.Outcome
	errText string // scrubbed, cut to errorTail; "" on success
	output  string // scrubbed
}

// classify turns a task's result and the run context's cause into the
// run's outcome, error and output, with the replica's secrets hidden.
func (r *Runner) classify(js *jobState, res tasks.Result, cause error, timeout time.Duration) verdict {
	v := verdict{outcome: jobs.OutcomeSucceeded}
	switch {
	case errors.Is(cause, errLeaseLost): // a duty's lease ended (clusters.go)
		v.outcome, v.errText = jobs.OutcomeLockLost, leaseLostText(cause)
	case errors.Is(cause, errLockLost):
		v.outcome, v.errText = jobs.OutcomeLockLost, "lock lost while running: the run was cancelled"
	case errors.Is(cause, errTimeout):
		v.outcome, v.errText = jobs.OutcomeTimedOut, "timed out after "+timeout.String()
	case errors.Is(cause, errShutdown):
		v.outcome, v.errText = jobs.OutcomeInterrupted, "interrupted: the replica shut down"
	case errors.Is(res.Err, tasks.ErrDeadline): // deadline.go: the replica was paused or stalled
		v.outcome, v.errText = jobs.OutcomeLockLost, deadlineText(js)
	case res.Err != nil:
		v.outcome, v.errText = jobs.OutcomeFailed, res.Err.Error()
	}
	if res.Err != nil && v.outcome != jobs.OutcomeFailed {
		var killed *tasks.ErrKilled
		switch {
		case errors.As(res.Err, &killed) && killed.Deadline:
			v.errText += ": the job shim killed the command with SIGKILL at its deadline"
		case errors.As(res.Err, &killed) && killed.SIGKILL:
			v.errText += fmt.Sprintf(": the command was killed with SIGKILL after a %s grace period", killed.Grace)
		case errors.As(res.Err, &killed):
			v.errText += ": the command was stopped with SIGTERM"
		case !errors.Is(res.Err, cause):
			v.errText += ": " + res.Err.Error()
		}
	}
	if v.errText != "" {
		v.errText = db.ScrubText(v.errText, r.o.Secrets...)
	}
	v.errText = lastBytes(v.errText, errorTail)
	v.output = res.Output
	switch {
	case v.output == "": // nothing to hide
	case len(v.output) >= tasks.OutputTailBytes-(utf8.UTFMax-1):
		v.output = db.ScrubTail(v.output, r.o.Secrets...) // its start may be cut inside a secret
	default:
		v.output = db.ScrubText(v.output, r.o.Secrets...)
	}
	return v
}

// lastBytes is the end of s, at most n bytes, starting on a whole
// character: a cut inside one drops its continuation bytes rather than
// keeping a broken byte (which would be stored as U+FFFD).
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
		s = s[1:]
	}
	return s
}

// record writes the end of run (history, status, metrics, occurrences)
// and logs a first failure or a recovery. It returns when the run ended.
func (r *Runner) record(js *jobState, sched jobs.Schedule, fire time.Time, occ occurrence, run jobs.Run, v verdict) time.Time {
	id := js.job.ID
	ended := r.now()
	if v.errText != "" {
		v.errText = jobs.Storable(v.errText)
	}
	run.FinishedAt, run.Outcome, run.Error, run.OutputTail = &ended, v.outcome, v.errText, v.output
	r.o.Store.PutRun(run)
	r.countRun(js, v.outcome)
	r.metrics.duration.WithLabelValues(id).Observe(ended.Sub(run.StartedAt).Seconds())

	overrun := ended.After(sched.Next(fire))
	r.mu.Lock()
	st := &js.status
	st.Runs++
	st.LastFinishedAt, st.LastOutcome, st.LastError = &ended, v.outcome, v.errText
	switch v.outcome {
	case jobs.OutcomeSucceeded:
		st.LastSuccessAt = &ended
	case jobs.OutcomeTimedOut:
		st.Timeouts++
		st.Failures++
	case jobs.OutcomeLockLost:
		st.LockLost++
		st.Failures++
	default:
		st.Failures++
	}
	if overrun {
		st.Overruns++
	}
	js.lastEnd = ended
	wasFailing := js.failing
	js.failing = v.outcome != jobs.OutcomeSucceeded
	r.mu.Unlock()
	if overrun {
		r.metrics.overruns.WithLabelValues(id).Inc()
	}
	if !occ.nominal.IsZero() {
		r.recordOverrun(js, sched, occ, run.StartedAt, ended) // occurrence.go
	}
	switch v.outcome {
	case jobs.OutcomeTimedOut:
		r.metrics.timeouts.WithLabelValues(id).Inc()
	case jobs.OutcomeLockLost:
		r.metrics.lockLost.WithLabelValues(id).Inc()
	}
	// Only the first failure and the recovery are logged.
	switch {
	case js.failing && !wasFailing:
		r.log.Error("runner: job failed", "job_id", id, "run_seq", run.Seq, "outcome", string(v.outcome), "error", v.errText)
	case !js.failing && wasFailing:
		r.log.Info("runner: job recovered", "job_id", id, "run_seq", run.Seq)
	}
	return ended
}

// recordEnd writes the end of a shared job's run to the installation's
// schedule (in database time, with a bus signal to every replica) and
// returns the end recorded; zero for a job that is not shared, a lost
// lock (not an end: another replica may run) or a write that failed.
func (r *Runner) recordEnd(js *jobState, run jobs.Run, outcome jobs.Outcome) time.Time {
	if !js.shared || outcome == jobs.OutcomeLockLost {
		return time.Time{}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
	defer cancel()
	e, err := r.o.Schedules.RecordEnd(ctx, js.job.ID, r.o.ReplicaID, run.Seq, run.StartedAt)
	if err != nil {
		r.log.Warn("runner: could not record the end of the run in the shared schedule; other replicas rely on the lock",
			"job_id", js.job.ID, "run_seq", run.Seq, "error", err)
		return time.Time{}
	}
	return e
}

// scheduleNext puts js back on the timer after a run that ended at ended;
// a shared job's next fire follows end, the end recorded in the shared
// schedule (zero: none was).
func (r *Runner) scheduleNext(js *jobState, end, ended time.Time) {
	if end.IsZero() {
		end = ended
	}
	// A schedule changed during the run applies to the next fire.
	r.mu.Lock()
	next := js.sched.Next(end)
	r.mu.Unlock()
	r.finishAt(js, next, ended)
}

// afterFunc calls f once d has passed on the runner's clock, unless the
// returned func is called first. On the real clock it is a runtime timer
// (time.AfterFunc): a goroutine and a timer per run cost a fire a
// goroutine start and two wake-ups (docs/cost.md). On any other clock a
// goroutine counted in wg waits for the clock's timer, stop or ctx.
func (r *Runner) afterFunc(wg *sync.WaitGroup, stop <-chan struct{}, ctx context.Context, d time.Duration, f func()) func() {
	if r.realClock() {
		t := time.AfterFunc(d, f)
		return func() { t.Stop() }
	}
	t := r.o.Clock.NewTimer(d) // started with the run, not with its goroutine
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer t.Stop()
		select {
		case <-t.C():
			f()
		case <-stop:
		case <-ctx.Done():
		}
	}()
	return func() {}
}

// lazyTimeout is a context with a timeout that is armed only when a
// statement uses it: the settings cache and the block of run seqs answer
// from memory at nearly every fire, and a context.WithTimeout per fire
// was a runtime timer armed and stopped for nothing.
type lazyTimeout struct {
	parent context.Context
	d      time.Duration
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

func newLazyTimeout(parent context.Context, d time.Duration) *lazyTimeout {
	return &lazyTimeout{parent: parent, d: d}
}

func (l *lazyTimeout) get() context.Context {
	l.once.Do(func() { l.ctx, l.cancel = context.WithTimeout(l.parent, l.d) })
	return l.ctx
}

func (l *lazyTimeout) Deadline() (time.Time, bool) { return l.get().Deadline() }
func (l *lazyTimeout) Done() <-chan struct{}       { return l.get().Done() }
func (l *lazyTimeout) Err() error                  { return l.get().Err() }
func (l *lazyTimeout) Value(key any) any           { return l.get().Value(key) }

// release frees the timer if it was armed; the context must not be used
// after it.
func (l *lazyTimeout) release() {
	l.once.Do(func() {}) // arms nothing; orders the read of cancel after any get
	if l.cancel != nil {
		l.cancel()
	}
}

// recordNoRun records a tick that could not start a run (the lock or the
// run seq could not be had) as a failure without a history row: in the
// job's status, and in its metrics as a failed run, so that the failing
// gauge and an alert on failed runs see a job that cannot start at all.
func (r *Runner) recordNoRun(js *jobState, sched jobs.Schedule, now time.Time, err error) {
	if errors.Is(context.Cause(r.runsCtx), errShutdown) {
		r.finish(js, sched.Next(now)) // shutting down: not a failure
		return
	}
	errText := db.ScrubText(err.Error(), r.o.Secrets...)
	r.mu.Lock()
	js.status.Failures++
	js.status.LastOutcome, js.status.LastError = jobs.OutcomeFailed, "could not start: "+errText
	js.lastEnd = now
	wasFailing := js.failing
	js.failing = true
	r.mu.Unlock()
	r.countRun(js, jobs.OutcomeFailed)
	if !wasFailing {
		r.log.Error("runner: job could not start", "job_id", js.job.ID, "error", errText)
	}
	r.finish(js, sched.Next(now))
}

// countRun counts a run (or a tick that could not start one) of js and
// sets its failing state. A duty's is checked and set under r.mu, so that
// it cannot race its removal: the run of a duty that has left (its lease
// ended, even if the cluster was taken again and a new duty has the same
// key) is counted but leaves the failing state alone, which is no longer
// its own.
func (r *Runner) countRun(js *jobState, outcome jobs.Outcome) {
	if js.duty == nil {
		r.metrics.runs.WithLabelValues(js.job.ID, js.job.ID, string(outcome)).Inc()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock() // lock order: r.mu, then the failing set's
	key := js.key()
	if js.duty.over() {
		key = "" // counted, not failing here
	}
	r.metrics.runs.WithLabelValues(js.job.ID, key, string(outcome)).Inc()
}

func (r *Runner) unlock(l Lock, js *jobState) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
	defer cancel()
	if err := l.Unlock(ctx); err != nil {
		r.log.Warn("runner: unlock failed; trying again at the job's next tick (the lock expires at its lockAtMostFor otherwise)",
			"job_id", js.job.ID, "error", err)
		r.mu.Lock()
		js.staleLock = l
		r.mu.Unlock()
	}
}

// tryLock is every try of js's lock (a run's, a catch-up's, a
// backfill's); the lock is the job's lock: name, or its id (SPEC §5.3).
// The lock an unlock that failed left is given back first (releaseStale).
// A try whose answer was lost may have taken the lock (MaybeHeldError): it
// is kept as such a lock, given back at the next try here, so that it does
// not hold every replica off, this one included, until its lockAtMostFor
// (a nemesis run: no run of two jobs for 40 s after a promote cut the
// answers of their tries).
func (r *Runner) tryLock(js *jobState, atMostFor, atLeastFor time.Duration) (Lock, error) {
	r.releaseStale(js)
	ctx, cancel := context.WithTimeout(r.runsCtx, lockStatementTimeout)
	defer cancel()
	l, err := r.o.Locks.TryLock(ctx, js.job.LockName(), atMostFor, atLeastFor)
	var mh *MaybeHeldError
	if err == nil {
		// Taken: the row is this try's now. A stale lock whose give-back
		// failed just before has nothing left to give back, and giving it
		// back later would cut this lock short (its own gap).
		r.mu.Lock()
		js.staleLock = nil
		r.mu.Unlock()
	} else if errors.As(err, &mh) {
		r.log.Warn("runner: the answer to a lock try was lost; giving the lock back at the job's next try, in case it was taken",
			"job_id", js.job.ID, "error", err)
		r.mu.Lock()
		if js.staleLock == nil {
			js.staleLock = mh.Lock
		}
		r.mu.Unlock()
	}
	return l, err
}

// releaseStale unlocks the lock whose unlock failed after js's last run,
// before js takes its lock again. No run of js is in progress on this
// replica then, so the row this replica holds under that name is the
// finished run's, and the unlock is the one that run should have made
// (lock_until stays at least locked_at + lockAtLeastFor). If it fails
// again it is kept for the next tick.
func (r *Runner) releaseStale(js *jobState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
	defer cancel()
	r.releaseStaleCtx(ctx, js)
}

// releaseStaleAtStop gives back, at a stop, once no run is left, every
// lock an unlock that failed or a try whose answer was lost left: they
// would otherwise hold every replica off until their lockAtMostFor, and a
// restart under the same id too. One bound for all of them.
func (r *Runner) releaseStaleAtStop() {
	r.mu.Lock()
	var stale []*jobState
	for _, js := range r.jobs {
		if js.staleLock != nil {
			stale = append(stale, js)
		}
	}
	r.mu.Unlock()
	if len(stale) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockStatementTimeout)
	defer cancel()
	for _, js := range stale {
		r.releaseStaleCtx(ctx, js)
	}
}

func (r *Runner) releaseStaleCtx(ctx context.Context, js *jobState) {
	r.mu.Lock()
	l := js.staleLock
	js.staleLock = nil
	r.mu.Unlock()
	if l == nil {
		return
	}
	if err := l.Unlock(ctx); err != nil {
		r.log.Warn("runner: releasing the lock whose unlock had failed failed again; trying at the job's next tick",
			"job_id", js.job.ID, "error", err)
		r.mu.Lock()
		if js.staleLock == nil {
			js.staleLock = l
		}
		r.mu.Unlock()
		return
	}
	r.log.Info("runner: released the lock whose unlock had failed", "job_id", js.job.ID)
}
