package runner

import (
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// The start deadline (issue 24, part 4; docs/schedules.md, "Jitter and the
// start deadline"). deadline.go is another deadline: the job shim's, for a
// run in progress.
//
// A job with deadline: D does not start an occurrence later than D after
// its nominal time. Whatever held it back (the run at start after every
// replica was down, a wait for a slot of runner.max_concurrent_runs, a
// timer that fired late on a stalled or loaded replica, the lock held by
// another holder), the occurrence is recorded skipped/deadline and does
// not run; the job waits for its next due time. A trigger has no deadline
// (its nominal time is its own). Without a deadline nothing changes.
//
// The lock held: without a deadline, a tick that finds the lock held skips
// at once (held-elsewhere) and waits for the next due time. With one, it
// tries the lock again every heldRetryEvery until shortly before the
// deadline, reading the shared schedule first at each try (a run of the
// occurrence that ended elsewhere moves the timer, and nothing is
// retried); when the deadline comes first it records skipped/deadline,
// written, like a held-elsewhere skip, only when the holder is not a live
// replica (jobstore's insertOccurrencesSQL: a live holder runs that
// occurrence or records its own overrun). A deadline that reaches the next
// due time changes nothing here: the next due time comes first.

// heldRetryMargin is how long before its deadline the last try of a held
// lock comes: the tick's own check (skipPastDeadline) must still find the
// occurrence on time when the try fires.
const heldRetryMargin = 100 * time.Millisecond

// heldRetryEvery is how often a tick tries a held lock again before its
// deadline D: D/4, at least a second and at most 30 s (a few lock
// statements per due time).
func heldRetryEvery(d time.Duration) time.Duration {
	return min(max(d/4, time.Second), 30*time.Second)
}

// startDeadline is the start deadline of occurrence occ under sched: 0
// (none) for a trigger or without a deadline.
func startDeadline(sched jobs.Schedule, occ occurrence) time.Duration {
	if occ.triggered || occ.nominal.IsZero() {
		return 0
	}
	return sched.Deadline()
}

// skipPastDeadline records occ skipped/deadline and puts js back on the
// timer at its next due time when it is later than its start deadline at
// now (the tick calls it after nominalFor, before the lock): true when it
// did. The tick goroutine's.
func (r *Runner) skipPastDeadline(js *jobState, sched jobs.Schedule, occ occurrence) bool {
	d := startDeadline(sched, occ)
	if d == 0 {
		return false
	}
	now := r.now()
	if !now.After(occ.nominal.Add(d)) {
		return false
	}
	rec := jobs.OccurrenceRecord{NominalAt: occ.nominal, Outcome: jobs.OccurrenceSkipped, Reason: jobs.ReasonDeadline}
	if !occ.retry.IsZero() {
		// A retry of a held lock whose timer fired past the deadline: the
		// skip is the held lock's, written as one (not when a live replica
		// holds it or a run carries this due time: that replica runs it).
		rec.LockName = js.job.LockName()
	}
	r.recordOccurrence(js, rec)
	r.log.Info("runner: an occurrence could not start within its deadline; skipped", "job_id", js.key(),
		"nominal_at", jobs.FormatNominal(occ.nominal), "late", now.Sub(occ.nominal).String(), "deadline", d.String())
	r.finish(js, nextAfterDeadline(sched, occ, now))
	return true
}

// nextAfterDeadline is the first due time after now once occ was given up:
// a shared job's on the installation's grid (every replica's due times
// agree), any other's on its grid through occ's nominal time.
func nextAfterDeadline(sched jobs.Schedule, occ occurrence, now time.Time) time.Time {
	if occ.onGrid() {
		return occ.readNow.Add(gridNext(sched, occ.end, occ.dbNow.Add(now.Sub(occ.readNow))).Sub(occ.dbNow))
	}
	return gridNext(sched, occ.nominal, now)
}

// retryHeld decides, for a tick of occ that found js's lock held at now,
// whether to try again before the start deadline: it puts js back on the
// timer at the next try and returns true, or returns false and the reason
// the skip is recorded with (deadline when the deadline cut the tries
// short, held-elsewhere otherwise).
func (r *Runner) retryHeld(js *jobState, sched jobs.Schedule, occ occurrence, now time.Time) (retried bool, reason string) {
	d := startDeadline(sched, occ)
	next := sched.Next(occ.nominal)
	if occ.onGrid() {
		next = gridNext(sched, occ.end, occ.nominal)
	}
	if d == 0 || occ.nominal.Add(d).After(next) {
		return false, jobs.ReasonHeldElsewhere
	}
	last := occ.nominal.Add(d - heldRetryMargin)
	at := now.Add(heldRetryEvery(d))
	if at.After(last) {
		at = last
	}
	if !at.After(now) {
		return false, jobs.ReasonDeadline
	}
	r.mu.Lock()
	js.retryAt, js.retryNominal = at, occ.nominal
	r.mu.Unlock()
	r.finish(js, at)
	return true, ""
}

// takeRetry returns the nominal time a fire at fire retries (zero: it is
// not a retry of a held lock) and forgets it: a fire at another time (the
// timer moved by a run's end elsewhere, a setting) drops the retry.
func (r *Runner) takeRetry(js *jobState, fire time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := js.retryNominal
	if !js.retryAt.Equal(fire) {
		n = time.Time{}
	}
	js.retryAt, js.retryNominal = time.Time{}, time.Time{}
	return n
}
