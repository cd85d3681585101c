package runner

import (
	"context"
	"errors"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
)

// Bounded catch-up (missed: catch-up, issue 24 part 3, docs/schedules.md
// "Catch-up"). After a stretch with no replica up, the job runs the newest
// catch_up.max of the due times of the stretch's last missed/down part that
// fell due within catch_up.within before the start, oldest first, one
// after another, each with its own nominal time; the rest of the stretch
// is recorded as before (missed/down, skipped/paused, skipped/overrun).
//
// Who catches up: the stretch is not recorded at the start (as missed:
// run-once and skip do) but at the job's first tick, by the replica that
// holds the job's lock (an installation job) and finds the shared schedule
// still at the end the stretch counts from. It keeps the lock through the
// whole catch-up and records each caught-up run's end in the shared
// schedule before it lets the lock go. Every other replica that started
// into the same stretch finds the lock held (and keeps waiting), or the
// shared schedule moved (someone ran since: it drops its catch-up). So each
// caught-up occurrence runs once, on one replica, and the rows of the
// stretch are written once, by that replica, from one plan.

// catchUpPending is a stretch that waits for the job's first tick.
type catchUpPending struct {
	anchor time.Time       // the end the stretch counts from
	to     time.Time       // the start: the stretch's end and the window's
	trace  jobs.StartTrace // what the database knew at the start
}

// deferCatchUp keeps the stretch of js (due times after anchor up to now,
// as missedAtStart would record them) for its first tick when the job
// catches up, and reports whether it did. r.mu held (Start).
func (r *Runner) deferCatchUp(js *jobState, anchor, now time.Time, tr jobs.StartTrace) bool {
	if js.job.Missed != jobs.MissedCatchUp || js.job.CatchUp.Max < 1 || anchor.IsZero() || js.duty != nil {
		return false
	}
	if first := js.sched.Next(anchor); first.IsZero() || first.After(now) {
		return false // nothing missed: the job is due as usual
	}
	if paused, _ := tr.PausedAt(now); paused {
		return false // nothing would run: the stretch is recorded at the start, as before
	}
	js.catchUp = &catchUpPending{anchor: anchor, to: now, trace: tr}
	return true
}

// catchUpTick is the first tick of js with a stretch to catch up; it
// reports whether it handled the tick (false: the tick goes on as any
// other). Called by the tick goroutine after the shared schedule's read
// (occ), before the nominal time is chosen.
func (r *Runner) catchUpTick(js *jobState, sched jobs.Schedule, occ occurrence) bool {
	p := js.catchUp
	if occ.triggered {
		// A jobs trigger run before the catch-up replaces it: its end
		// moves the schedule. An installation job's stretch is settled
		// once the trigger holds the lock (catchUpTriggered); without a
		// lock it is this replica's, and recorded now.
		if js.job.Scope != jobs.ScopeInstallation {
			r.recordWholeStretch(js, sched, p)
		}
		return false
	}
	var held *runLock
	if js.job.Scope == jobs.ScopeInstallation {
		if js.shared && occ.dbNow.IsZero() {
			// The shared schedule could not be read: ask again soon.
			r.finish(js, r.now().Add(catchUpRetry(sched, r.now())))
			return true
		}
		if !js.shared || !occ.onGrid() || !occ.end.Equal(p.anchor) {
			js.catchUp = nil // someone ran since the stretch
			return false
		}
		if held = r.catchUpLock(js, sched, p); held == nil {
			return true
		}
	}
	js.catchUp = nil
	plan := planCatchUp(sched, p.anchor, p.to, p.trace, !js.shared || sched.IsCron(), js.job.CatchUp)
	r.recordStretch(js, plan.recs)
	if !plan.last.IsZero() {
		js.accounted = plan.last
	}
	if len(plan.caught) == 0 {
		// Nothing in the window (or the job is paused): as missed: skip.
		if held != nil {
			r.unlock(held.current(), js)
		}
		r.finish(js, jobs.DueAfter(sched, p.anchor, r.now(), jobs.MissedSkip))
		return true
	}
	r.log.Info("runner: catching up missed occurrences", "job_id", js.job.ID, "count", len(plan.caught),
		"first_nominal_at", jobs.FormatNominal(plan.caught[0]), "last_nominal_at", jobs.FormatNominal(plan.caught[len(plan.caught)-1]))
	r.runCatchUp(js, sched, plan, held)
	return true
}

// recordWholeStretch records the whole stretch of p, as missed: skip would,
// so that its due times are not left out, and drops the catch-up.
func (r *Runner) recordWholeStretch(js *jobState, sched jobs.Schedule, p *catchUpPending) {
	js.catchUp = nil
	recs, _, last := stretchRecords(sched, p.anchor, p.to, p.trace, !js.shared || sched.IsCron(), false)
	r.recordStretch(js, recs)
	if !last.IsZero() {
		js.accounted = last
	}
}

// catchUpTriggered settles the pending catch-up of installation job js
// when a jobs trigger's tick has taken the job's lock (acquire): the
// trigger replaces the catch-up, and the stretch is recorded whole, but
// only while the shared schedule still ends at the stretch's anchor. A
// schedule that moved means another replica ran (or caught up) the
// stretch, and recorded it: the catch-up is dropped. A trigger that does
// not get the lock (another replica catching up holds it) never comes
// here: the catch-up stays pending, and nothing of the stretch is
// recorded by this replica while another runs it.
func (r *Runner) catchUpTriggered(js *jobState, sched jobs.Schedule) {
	p := js.catchUp
	if p == nil {
		return
	}
	if js.shared {
		ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
		end, _, _, err := r.loadRun(ctx, js)
		cancel()
		if err == nil && !end.Equal(p.anchor) {
			r.log.Debug("runner: the shared schedule moved before a trigger replaced the catch-up; dropping it", "job_id", js.job.ID)
			js.catchUp = nil
			return
		}
		// A read that fails records the stretch: the lock is held, so no
		// catch-up runs elsewhere now, and a stretch left out is lost.
	}
	r.recordWholeStretch(js, sched, p)
}

// recordStretch records the rows of a stretch of js (stretchRecords).
func (r *Runner) recordStretch(js *jobState, recs []jobs.OccurrenceRecord) {
	for _, rec := range recs {
		r.recordOccurrence(js, rec)
		r.log.Info("runner: due times passed while no replica ran the job; recorded", "job_id", js.job.ID, "outcome", rec.Outcome, "reason", rec.Reason,
			"count", rec.Count, "first_nominal_at", jobs.FormatNominal(rec.NominalAt), "missed", string(js.job.Missed))
	}
}

// catchUpLock takes the lock of installation job js for its catch-up and
// checks, under it, that the shared schedule still ends at p.anchor. It
// returns the lock held, or nil when it rescheduled the tick: the lock is
// held elsewhere or could not be had, or the schedule could not be read
// (the catch-up waits), or the schedule moved (the catch-up is dropped).
func (r *Runner) catchUpLock(js *jobState, sched jobs.Schedule, p *catchUpPending) *runLock {
	lockFrom := time.Now() // the real clock, as the job shim's (deadline.go)
	// No minimum gap: the end of the last caught-up run is in the shared
	// schedule before the lock goes, and a catch-up found not to be this
	// replica's lets it go at once.
	l, err := r.tryLock(js, jobs.LockAtMostFor(sched), 0)
	switch {
	case errors.Is(err, locks.ErrHeldElsewhere):
		// Another replica catches up (or a dead one's lock has yet to
		// expire): its ends move this timer (the bus); ask again soon.
		r.log.Debug("runner: the lock of a job to catch up is held; waiting", "job_id", js.job.ID)
		r.finish(js, r.now().Add(catchUpRetry(sched, r.now())))
		return nil
	case err != nil:
		r.recordNoRun(js, sched, r.now(), err) // rescheduled; the catch-up waits
		return nil
	}
	ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
	end, started, dbNow, err := r.loadRun(ctx, js)
	var ranSince time.Time
	if rf, ok := r.o.Store.(RunFinder); ok && err == nil && end.Equal(p.anchor) {
		// A run after the anchor's run whose end is not in the shared
		// schedule: another catch-up ran it and could not record its end
		// (recordCatchUpEnd), kept the lock, and the lock expired. Its
		// stretch is that replica's (it recorded the rows); running it
		// again would repeat its due times. The check reads the run's row
		// with its end, which its replica's store wrote (within a second,
		// or once the database answers again).
		since := started
		if since.IsZero() {
			since = p.anchor
		}
		ranSince, err = rf.LastStartAfter(ctx, js.job.ID, since)
	}
	cancel()
	switch {
	case err != nil:
		r.unlock(l, js)
		r.finish(js, r.now().Add(catchUpRetry(sched, r.now())))
		return nil
	case !end.Equal(p.anchor):
		// A run ended between the read and the lock: the stretch is that
		// replica's.
		r.log.Debug("runner: the shared schedule moved before the catch-up; dropping it", "job_id", js.job.ID)
		js.catchUp = nil
		r.unlock(l, js)
		r.finish(js, jobs.LocalDue(jobs.DueAfter(sched, end, dbNow, jobs.MissedRunOnce), dbNow, r.now()))
		return nil
	case !ranSince.IsZero():
		r.log.Warn("runner: a run of the job started after the shared schedule's last end and ended without recording it there; dropping the catch-up, whose stretch is that run's",
			"job_id", js.job.ID, "run_started_at", ranSince)
		js.catchUp = nil
		r.unlock(l, js)
		r.finish(js, jobs.LocalDue(jobs.DueAfter(sched, ranSince, dbNow, jobs.MissedRunOnce), dbNow, r.now()))
		return nil
	}
	return &runLock{lock: l, end: newLockDeadline(lockFrom, jobs.LockAtMostFor(sched))}
}

// maxCatchUpRetry is the longest a replica waits before it asks again
// whether a stretch is its to catch up (the lock was held, or the shared
// schedule could not be read); a shorter interval is asked at each due
// time. An end elsewhere moves the timer sooner (the bus).
const maxCatchUpRetry = 5 * time.Second

func catchUpRetry(sched jobs.Schedule, now time.Time) time.Duration {
	return min(sched.Interval(now), maxCatchUpRetry)
}

// catchUpPlan is what a catch-up does: the rows of the stretch that it
// does not run, and the due times it runs, oldest first.
type catchUpPlan struct {
	recs   []jobs.OccurrenceRecord
	caught []time.Time
	to     time.Time // the start: the window's end
	last   time.Time // the last due time the plan accounts for (zero: none)
}

// planCatchUp splits the stretch of sched's due times after anchor up to
// to (stretchRecords, with the trace tr) into the rows it records and the
// due times it catches up: the newest c.Max of the last part's due times
// at or after to − c.Within, when that part is missed/down and ends the
// stretch (a job still paused at the start catches up nothing). The rows
// do not claim the due times caught up.
func planCatchUp(sched jobs.Schedule, anchor, to time.Time, tr jobs.StartTrace, overrun bool, c jobs.CatchUp) catchUpPlan {
	recs, _, last := stretchRecords(sched, anchor, to, tr, overrun, false)
	plan := catchUpPlan{recs: recs, to: to, last: last}
	k := len(recs) - 1
	if k < 0 || recs[k].Reason != jobs.ReasonDown || !lastOf(recs[k]).Equal(last) {
		return plan
	}
	p := &plan.recs[k]
	before, tail := gridTail(sched, anchor, p.NominalAt, lastOf(*p), to.Add(-c.Within), c.Max)
	if len(tail) == 0 {
		return plan
	}
	plan.caught = tail
	p.Count -= len(tail)
	switch {
	case p.Count <= 0:
		plan.recs = plan.recs[:k]
	case p.Count == 1:
		p.LastNominalAt = time.Time{}
	default:
		p.LastNominalAt = before
	}
	return plan
}

// gridTail returns the newest n due times of sched's grid after anchor in
// [max(first, from), last] (first and last on the grid), oldest first, and
// the due time before the first of them (zero when that one is first).
func gridTail(sched jobs.Schedule, anchor, first, last, from time.Time, n int) (before time.Time, tail []time.Time) {
	if n < 1 || last.Before(first) || last.Before(from) {
		return time.Time{}, nil
	}
	if !sched.IsCron() {
		// end + k × every: counted, not walked (a year of every 1s).
		span := int64(last.Sub(first) / sched.Every) // last's index from first
		lo := int64(0)
		if from.After(first) {
			lo = int64((from.Sub(first) + sched.Every - 1) / sched.Every)
		}
		m := min(int64(n), span-lo+1)
		for i := span - m + 1; i <= span; i++ {
			tail = append(tail, first.Add(time.Duration(i)*sched.Every))
		}
		if tail[0].After(first) {
			before = tail[0].Add(-sched.Every)
		}
		return before, tail
	}
	// A cron: walk the grid, keeping the newest n+1.
	ring := make([]time.Time, 0, n+1)
	d := first
	for i := 0; i < maxGridSteps && !d.IsZero() && !d.After(last); i++ {
		if len(ring) == n+1 {
			copy(ring, ring[1:])
			ring = ring[:n]
		}
		ring = append(ring, d)
		d = gridNext(sched, anchor, d)
	}
	i := max(len(ring)-n, 0)
	for i < len(ring) && ring[i].Before(from) {
		i++
	}
	if i == len(ring) {
		return time.Time{}, nil
	}
	if i > 0 {
		before = ring[i-1]
	}
	return before, append([]time.Time(nil), ring[i:]...)
}

// runCatchUp runs plan's due times of js one after another, each its own
// run with its own nominal time, under held (an installation job's lock,
// kept from the first to the last: extended before each run after the
// first). A shared job's end goes to the shared schedule after each run,
// before the lock goes. A stop, a pause, a lost lock, a run that could not
// start or an end that could not be written to the shared schedule (the
// lock is then kept until it expires) ends the catch-up early; the due
// times it did not run are
// recorded (missed/down, or skipped/paused). The job then follows its
// schedule from the last run's end.
func (r *Runner) runCatchUp(js *jobState, sched jobs.Schedule, plan catchUpPlan, held *runLock) {
	timeout := js.job.TimeoutFor(sched)
	prevEnd, end, ended := plan.to, time.Time{}, time.Time{}
	keepLock := false // the lock may be another's, or must outlast this replica's say
	for i, nominal := range plan.caught {
		if i > 0 {
			if !r.catchUpGoesOn(js, held, sched, plan.caught[i:]) {
				break // a lock that could not be extended is nil now: no unlock
			}
		}
		occ := occurrence{nominal: nominal, catchUp: true, overrunFrom: prevEnd}
		run, ok := r.begin(js, sched, occ)
		if !ok {
			// Recorded as a run that could not start, and rescheduled.
			r.recordCatchUpRest(js, plan.caught[i:], "")
			if held != nil {
				r.unlock(held.current(), js)
			}
			return
		}
		res, cause := r.execute(js, sched, run, occ, held, timeout)
		v := r.classify(js, res, cause, timeout)
		ended = r.record(js, sched, run.StartedAt, occ, run, v)
		js.accounted, prevEnd, end = nominal, ended, ended
		if v.outcome == jobs.OutcomeLockLost {
			keepLock = true // another replica may hold it: no end, no unlock
			r.recordCatchUpRest(js, plan.caught[i+1:], "")
			break
		}
		if js.shared {
			var recorded bool
			if end, recorded = r.recordCatchUpEnd(js, run, ended); !recorded {
				// The shared schedule still ends before this run (at the
				// stretch's anchor, when it is the first): a replica that
				// took a freed lock would run this due time again. The
				// lock is kept (it expires at its lockAtMostFor), the
				// catch-up ends and the due times left are recorded.
				r.log.Error("runner: could not record the end of a caught-up run in the shared schedule; the catch-up ends and the job's lock is kept until it expires",
					"job_id", js.job.ID, "run_seq", run.Seq)
				keepLock = true
				r.recordCatchUpRest(js, plan.caught[i+1:], "")
				break
			}
		}
		if v.outcome == jobs.OutcomeInterrupted {
			r.recordCatchUpRest(js, plan.caught[i+1:], "")
			break
		}
	}
	if held != nil && !keepLock {
		r.unlock(held.current(), js)
	}
	if end.IsZero() {
		end = r.now()
	}
	if ended.IsZero() {
		ended = end
	}
	r.mu.Lock()
	next := js.sched.Next(end)
	r.mu.Unlock()
	r.finishAt(js, next, ended)
}

// catchUpGoesOn reports whether the catch-up of js runs its next due time
// (rest: those left): not when the runner stops, the job was paused, or
// its lock (held) cannot be extended; then it records rest.
func (r *Runner) catchUpGoesOn(js *jobState, held *runLock, sched jobs.Schedule, rest []time.Time) bool {
	r.mu.Lock()
	stopping := r.stopping
	r.mu.Unlock()
	if stopping {
		r.recordCatchUpRest(js, rest, "")
		return false
	}
	ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
	_, paused, _, by, err := r.settings(ctx, js)
	cancel()
	if err == nil && paused {
		r.recordCatchUpRest(js, rest, by)
		return false
	}
	if held == nil {
		return true
	}
	// A fresh lockAtMostFor for each run: the keep-alive counts from the
	// run's start, and the job shim's deadline from the last extension.
	ctx, cancel = context.WithTimeout(r.runsCtx, lockStatementTimeout)
	from := time.Now()
	next, err := held.current().Extend(ctx, jobs.LockAtMostFor(sched), 0)
	cancel()
	if err != nil {
		r.log.Error("runner: lost the lock during a catch-up; the rest is not run", "job_id", js.job.ID, "error", err)
		held.set(nil)
		r.recordCatchUpRest(js, rest, "")
		return false
	}
	held.set(next)
	held.end.extended(from)
	return true
}

// recordCatchUpRest records the due times a catch-up did not run (a tail
// of its plan, on the grid): missed/down, or skipped/paused by pausedBy.
func (r *Runner) recordCatchUpRest(js *jobState, rest []time.Time, pausedBy string) {
	if len(rest) == 0 {
		return
	}
	rec := jobs.OccurrenceRecord{NominalAt: rest[0], Outcome: jobs.OccurrenceMissed, Reason: jobs.ReasonDown, Count: len(rest)}
	if pausedBy != "" {
		rec.Outcome, rec.Reason, rec.PausedBy = jobs.OccurrenceSkipped, jobs.ReasonPaused, pausedBy
	}
	if len(rest) > 1 {
		rec.LastNominalAt = rest[len(rest)-1]
	}
	js.accounted = rest[len(rest)-1]
	r.recordOccurrence(js, rec)
	r.log.Info("runner: a catch-up ended early; its due times left are recorded", "job_id", js.job.ID, "outcome", rec.Outcome,
		"reason", rec.Reason, "count", rec.Count, "first_nominal_at", jobs.FormatNominal(rec.NominalAt))
}

// catchUpEndAttempts is how many times a catch-up tries to write a
// caught-up run's end to the shared schedule before it gives up (and ends
// the catch-up, keeping the lock); catchUpEndPause is the pause after the
// first failure, doubled after each (real time: a short wait for the
// database, not a schedule).
const (
	catchUpEndAttempts = 3
	catchUpEndPause    = 100 * time.Millisecond
)

// recordCatchUpEnd writes the end of a caught-up run of shared job js to
// the shared schedule (with its bus signal), while the lock is held,
// trying catchUpEndAttempts times, and returns the end recorded. ok is
// false when it could not be written (end is then ended).
func (r *Runner) recordCatchUpEnd(js *jobState, run jobs.Run, ended time.Time) (end time.Time, ok bool) {
	pause := catchUpEndPause
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runsCtx), lockStatementTimeout)
		e, err := r.o.Schedules.RecordEnd(ctx, js.job.ID, r.o.ReplicaID, run.Seq, run.StartedAt)
		cancel()
		if err == nil {
			return e, true
		}
		r.log.Warn("runner: could not record the end of a caught-up run in the shared schedule",
			"job_id", js.job.ID, "run_seq", run.Seq, "attempt", attempt, "error", err)
		if attempt == catchUpEndAttempts {
			return ended, false
		}
		t := time.NewTimer(pause)
		<-t.C
		pause *= 2
	}
}
