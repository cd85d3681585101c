package runner

import (
	"context"
	"errors"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// Backfill runs (docs/schedules.md, "Backfill"). A jobs backfill request
// is a list of past nominal times of an installation job
// (jobstore.Backfills). The host wakes the runner for a job that has one
// pending (Backfill); the runner then runs the oldest, as a fire of the
// job's own: never beside a live run here (the job is running), nor
// anywhere (it holds the job's lock, and claims the occurrence only while
// it holds it). Each run carries its occurrence's nominal time
// (STUDIO_SCHEDULED_AT, the occurrence key) and is marked backfill. It
// does not move the live schedule: the shared schedule's end is not
// written, and the job goes back to its live due time, which comes first
// when it has passed meanwhile; the next occurrence follows at once
// otherwise.

// Backfills is the backfill occurrences as a replica works on them
// (jobstore.Backfills).
type Backfills interface {
	// Claim takes the oldest pending occurrence of job; the caller holds
	// the job's lock. ok is false when none is pending.
	Claim(ctx context.Context, job string) (c jobs.BackfillClaim, ok bool, err error)
	// Release gives a claimed occurrence back (its run could not begin).
	Release(ctx context.Context, c jobs.BackfillClaim) error
	// End records the end of its run; more says another occurrence of the
	// job is pending.
	End(ctx context.Context, c jobs.BackfillClaim, runSeq int64, outcome jobs.Outcome) (more bool, err error)
}

// Backfill makes installation job id run its oldest pending backfill
// occurrence now, unless it is running, triggered or paused behind one
// already (then it is ignored: the host asks again). The host calls it
// for a job with a pending occurrence (jobstore.PendingBackfills), never
// for a bare bus signal; the claim under the lock decides.
func (r *Runner) Backfill(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	js, ok := r.jobs[id]
	if !ok || r.o.Backfills == nil || r.o.Locks == nil || js.job.Scope != jobs.ScopeInstallation || js.duty != nil ||
		js.running || js.forced || js.backfill || r.stopping || !js.queued {
		return false
	}
	js.backfill, js.liveDue = true, js.due
	r.push(js, r.now())
	return true
}

// takeBackfill reports (and clears) whether the fire of js is a backfill.
func (r *Runner) takeBackfill(js *jobState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := js.backfill
	js.backfill = false
	return b
}

// runBackfill is a backfill fire of js: settings, slot, lock, claim, run,
// record, and back to the live schedule.
func (r *Runner) runBackfill(js *jobState) {
	r.mu.Lock()
	liveDue := js.liveDue
	js.liveDue = time.Time{}
	r.mu.Unlock()
	back := func() { r.finish(js, liveDue) } // the live schedule, where it was
	ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
	sched, paused, invalid, _, err := r.settings(ctx, js)
	cancel()
	if err != nil || paused || invalid != "" {
		back() // a paused job runs no backfill either; it waits
		return
	}
	if !r.acquireSlot(js) {
		r.finish(js, time.Time{})
		return
	}
	defer r.releaseSlot(js)
	lockFrom := time.Now() // the real clock, as the job shim's (deadline.go)
	// No minimum gap: the lock keeps the live schedule and the other
	// replicas out while the occurrence runs, and no longer.
	l, err := r.tryLock(js, jobs.LockAtMostFor(sched), 0)
	if err != nil {
		// A live run, or another replica's backfill: the host asks again.
		back()
		return
	}
	held := &runLock{lock: l, end: newLockDeadline(lockFrom, jobs.LockAtMostFor(sched))}
	ctx, cancel = context.WithTimeout(r.runsCtx, lockStatementTimeout)
	claim, ok, err := r.o.Backfills.Claim(ctx, js.job.ID)
	cancel()
	if err != nil || !ok {
		if err != nil && r.runsCtx.Err() == nil {
			r.log.Warn("runner: claim a backfill occurrence; the next wake-up asks again", "job_id", js.job.ID, "error", err)
		}
		r.unlock(held.current(), js)
		back()
		return
	}
	r.mu.Lock()
	stopping := r.stopping
	r.mu.Unlock()
	occ := occurrence{nominal: claim.NominalAt, backfill: true}
	var run jobs.Run
	if !stopping {
		run, ok = r.begin(js, sched, occ) // on failure it recorded and rescheduled js
	}
	if stopping || !ok {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
		if err := r.o.Backfills.Release(ctx, claim); err != nil {
			r.log.Warn("runner: give back a backfill occurrence", "job_id", js.job.ID, "error", err)
		}
		cancel()
		r.unlock(held.current(), js)
		if stopping {
			r.finish(js, time.Time{})
			return
		}
		// begin put the job back at its schedule's next time after now:
		// the live due time, when sooner, is where it was (unless a
		// trigger or another fire came meanwhile).
		now := r.now()
		r.mu.Lock()
		if !r.stopping && js.queued && !js.running && !js.forced && !js.backfill && !liveDue.IsZero() && liveDue.Before(js.due) {
			r.push(js, liveDue)
			r.putStatusAtLocked(js, now)
		}
		r.mu.Unlock()
		return
	}
	r.log.Info("runner: backfill occurrence started", "job_id", js.job.ID, "run_seq", run.Seq,
		"nominal_at", claim.NominalAt.Format(time.RFC3339Nano), "request_seq", claim.RequestSeq)
	timeout := js.job.TimeoutFor(sched)
	res, cause := r.execute(js, sched, run, occ, held, timeout)
	v := r.classify(js, res, cause, timeout)
	// The occurrence's end is written before the lock is freed: a claim
	// under the lock finds an occurrence claimed and not ended abandoned,
	// so a replica that took the freed lock first would end this one so.
	ctx, cancel = context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
	more, err := r.o.Backfills.End(ctx, claim, run.Seq, v.outcome)
	cancel()
	if err != nil {
		r.log.Warn("runner: record the end of a backfill occurrence", "job_id", js.job.ID, "run_seq", run.Seq, "error", err)
	}
	if v.outcome != jobs.OutcomeLockLost {
		r.unlock(held.current(), js)
	}
	// Recorded as any run, without the due times a live run overran: a
	// backfill run overruns none of its own (occurrence{}: no nominal).
	ended := r.record(js, sched, run.StartedAt, occurrence{}, run, v)
	// A shared job's live due time as it is now: a run that ended
	// elsewhere meanwhile moved it (its signal was left alone while this
	// fire was pending), and a live due time that passed comes first.
	if js.shared {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), settingsTimeout)
		end, _, dbNow, err := r.loadRun(ctx, js)
		cancel()
		if err == nil && !end.IsZero() {
			liveDue = jobs.LocalDue(jobs.DueAfter(sched, end, dbNow, jobs.MissedRunOnce), dbNow, r.now())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	js.running = false
	switch {
	case r.stopping:
		if !liveDue.IsZero() {
			t := liveDue
			js.status.NextFireAt = &t
		}
	case more && liveDue.After(ended) && !errors.Is(context.Cause(r.runsCtx), errShutdown):
		// The live schedule is not due yet: the next occurrence now.
		js.backfill, js.liveDue = true, liveDue
		r.push(js, ended)
	default:
		r.push(js, liveDue) // a live due time that passed runs first
	}
	r.putStatusAtLocked(js, ended)
}
