package runner

import (
	"context"
	"slices"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// Occurrences (docs/occurrences.md): every run carries the due time it is
// the occurrence of (its nominal time, in database time), and the runner
// records the due times that did not run (skips and misses) through the
// run store, which writes them batched with the runs.

// OccurrenceRecorder is what a Recorder may also do (jobstore.Store does):
// queue a skip or a miss, and tell at start what the database already
// knows of each job's occurrences. A Recorder without it records none.
type OccurrenceRecorder interface {
	PutOccurrence(jobs.OccurrenceRecord)
	// OccurrenceStart returns, for each job id of jobIDs, whether a live
	// replica other than this one declares it, and what the database
	// knows of its occurrences under scope "" or this replica's id: the
	// latest nominal time accounted for, a newest run that never ended
	// and its replica's death, the pause changes (absent: nothing).
	OccurrenceStart(ctx context.Context, jobIDs []string) (hostedElsewhere map[string]bool, traces map[string]jobs.StartTrace, err error)
}

// maxGridSteps bounds the walk over a cron schedule's due times (a stretch
// of a minute's cron over a week is 10,080 of them); past it, a count is
// a lower bound.
const maxGridSteps = 200_000

// nominalSlack is how far ahead of a read of database time a due time may
// be and still be taken as the one that fell due: a timer fires at a due
// time as this replica measures database time, a few milliseconds off.
func nominalSlack(s jobs.Schedule, t time.Time) time.Duration {
	return min(s.Interval(t)/4, time.Second)
}

// The due times ("grid") of an installation job on the shared schedule,
// after the end of its last run: end + k × every (k >= 1), or the cron
// times after end; with a jitter offset (jitter.go), end + offset + k ×
// every, or the shifted cron times. Every replica computes the same from the same end.

// gridLast is the latest due time after end that is at or before t (zero:
// none).
func gridLast(s jobs.Schedule, end, t time.Time) time.Time {
	first := s.Next(end)
	if t.Before(first) {
		return time.Time{}
	}
	if !s.IsCron() {
		a := end.Add(s.Offset()) // a jittered fixed delay's grid (jitter.go)
		k := t.Sub(a) / s.Every
		return a.Add(k * s.Every)
	}
	d := first
	for i := 0; i < maxGridSteps; i++ {
		n := s.Next(d)
		if n.After(t) {
			break
		}
		d = n
	}
	return d
}

// gridNext is the first due time after end that is after t.
func gridNext(s jobs.Schedule, end, t time.Time) time.Time {
	if t.Before(end) {
		return s.Next(end)
	}
	if !s.IsCron() {
		a := end.Add(s.Offset()) // a jittered fixed delay's grid (jitter.go)
		if t.Before(a) {
			return s.Next(end)
		}
		k := t.Sub(a)/s.Every + 1
		return a.Add(k * s.Every)
	}
	return s.Next(t)
}

// gridSpan counts the due times after end in [from, to] (from itself one
// of them or not) and returns the first, the last and the one before the
// last (zero when n < 2).
func gridSpan(s jobs.Schedule, end, from, to time.Time) (n int, first, last, beforeLast time.Time) {
	d := s.Next(end)
	if d.Before(from) {
		d = gridNext(s, end, from.Add(-time.Nanosecond))
	}
	if d.After(to) {
		return 0, time.Time{}, time.Time{}, time.Time{}
	}
	if !s.IsCron() {
		n = int(to.Sub(d)/s.Every) + 1
		last = d.Add(time.Duration(n-1) * s.Every)
		if n >= 2 {
			beforeLast = last.Add(-s.Every)
		}
		return n, d, last, beforeLast
	}
	first = d
	for i := 0; i < maxGridSteps && !d.After(to); i++ {
		n++
		beforeLast, last = last, d
		d = s.Next(d)
	}
	if n < 2 {
		beforeLast = time.Time{}
	}
	return n, first, last, beforeLast
}

// scopeKey is js's occurrence scope key: "" for an installation job, this
// replica's id for an instance job, the cluster for a duty.
func (r *Runner) scopeKey(js *jobState) string {
	switch {
	case js.duty != nil:
		return js.duty.cluster()
	case js.job.Scope == jobs.ScopeInstance:
		return r.o.ReplicaID
	}
	return ""
}

// occurrence is what a tick knows of its due time: the nominal time, and
// for a shared job the shared schedule's end as read at the tick (with
// the database's now and this replica's time at that read).
type occurrence struct {
	nominal   time.Time
	triggered bool
	backfill  bool // a jobs backfill occurrence (backfill.go)
	// startNominal: the nominal time of the run at start after a missed
	// stretch (the first tick's only).
	startNominal time.Time
	end          time.Time // zero: never ran, or not read
	dbNow        time.Time
	readNow      time.Time // r.now() at the read
	// retry: the nominal time a retry of a held lock tries again
	// (deadline_skip.go).
	retry time.Time
	// prevEnd: for a triggered run, the end its job's due times counted
	// from before the trigger (a shared job's last end anywhere, another
	// job's last end here; zero: none), so that the due times the run
	// overran are the schedule's (recordOverrun).
	prevEnd time.Time
	// catchUp: a caught-up run (catchup.go); its overrun counts from
	// overrunFrom (the end of the run before it in the catch-up, or the
	// start), and only a cron job's times.
	catchUp     bool
	overrunFrom time.Time
}

// onGrid reports whether the shared schedule was read and the job ran
// before: its due times are a grid every replica shares.
func (o occurrence) onGrid() bool { return !o.end.IsZero() && !o.dbNow.IsZero() }

// nominalFor sets o.nominal for a tick of js that fired at fire.
//   - a trigger: its time (fire, set at the trigger);
//   - a shared job: the first due time after the last end anywhere, the
//     same on every replica; when that one is already accounted for (a
//     skip or a miss recorded it: the run after a missed stretch under
//     missed: run-once, the fallback tick after a skip) the latest due
//     time that has come; when that one is accounted for too (a run at
//     once after a resume), the database's now;
//   - any other: its own due time (fire), or the one set at start.
//
// It marks the nominal time accounted for. Nominal times are kept exact
// here (the grid's arithmetic compares them) and truncated to the
// millisecond (jobs.Nominal) only where they are written: a truncated due
// time is before the exact one, and the next due time after it was the
// same one again. Called by the tick goroutine
// (one tick of js at a time).
func (r *Runner) nominalFor(js *jobState, sched jobs.Schedule, fire time.Time, o *occurrence) {
	defer func() { js.accounted = o.nominal }()
	switch {
	case o.triggered:
		o.nominal = fire
		o.prevEnd = r.endBeforeTrigger(js)
		return
	case !o.startNominal.IsZero():
		o.nominal = o.startNominal
		return
	case !o.retry.IsZero():
		o.nominal = o.retry
		return
	case js.shared && o.onGrid():
		if c := sched.Next(o.end); c.After(js.accounted) {
			o.nominal = c
			return
		}
		if g := gridLast(sched, o.end, o.dbNow.Add(nominalSlack(sched, o.dbNow))); !g.IsZero() && g.After(js.accounted) {
			o.nominal = g
			return
		}
		o.nominal = o.dbNow
		return
	}
	o.nominal = fire
}

// endBeforeTrigger is the end js's due times count from as the trigger
// fires: a shared job's last end anywhere (one read of the shared
// schedule, for a trigger only: zero when it fails), another job's last
// end here.
func (r *Runner) endBeforeTrigger(js *jobState) time.Time {
	if js.shared && r.o.Schedules != nil {
		ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
		defer cancel()
		end, _, err := r.loadEnd(ctx, js)
		if err != nil {
			return time.Time{}
		}
		return end
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return js.lastEnd
}

// recordOccurrence queues a skip or a miss of js.
func (r *Runner) recordOccurrence(js *jobState, rec jobs.OccurrenceRecord) {
	or, ok := r.o.Store.(OccurrenceRecorder)
	if !ok {
		return
	}
	rec.JobID, rec.ScopeKey, rec.ReplicaID = js.job.ID, r.scopeKey(js), r.o.ReplicaID
	or.PutOccurrence(rec)
}

// skipPaused records a paused tick of js that fired at fire, once per due
// time, and returns the next fire: a shared job's next due time on the
// installation's grid (every replica records the same due times, and the
// table keeps one row each), any other job's next due time after fire.
func (r *Runner) skipPaused(js *jobState, sched jobs.Schedule, fire time.Time, pausedBy string) time.Time {
	now := r.now()
	if js.shared && r.o.Schedules != nil {
		ctx, cancel := context.WithTimeout(r.runsCtx, settingsTimeout)
		end, dbNow, err := r.loadEnd(ctx, js)
		pauseEnd := r.pauseEndOf(ctx, js)
		cancel()
		if err == nil && !end.IsZero() {
			g := gridLast(sched, end, pausedLimit(dbNow.Add(nominalSlack(sched, dbNow)), pauseEnd))
			if !g.IsZero() && g.After(js.accounted) {
				r.recordPausedUpTo(js, sched, end, g, pausedBy)
			}
			after := dbNow
			if g.After(after) {
				after = g
			}
			return now.Add(gridNext(sched, end, after).Sub(dbNow))
		}
	}
	if fire.After(js.accounted) {
		r.recordPaused(js, fire, pausedBy)
	}
	next := sched.Next(fire)
	if next.Before(now) {
		next = sched.Next(now)
	}
	return next
}

// maxPausedCatchUp bounds the due times one late paused tick records.
const maxPausedCatchUp = 1000

// recordPausedUpTo records the paused due times of a shared job on the
// grid after end, up to g: every one after the last accounted for, not
// only g. A tick that fires more than an interval late (a loaded machine,
// a stalled process, on every replica hosting the job) left those between
// without any row (adversarial pass of issue 22: paused occurrences 3 s
// apart for a job every 1s). At the first tick after a start (nothing
// accounted for yet) only g: the start recorded the stretch before it, or
// another replica hosted the job. At most maxPausedCatchUp, the latest.
func (r *Runner) recordPausedUpTo(js *jobState, sched jobs.Schedule, end, g time.Time, by string) {
	if js.accounted.IsZero() || !js.accounted.After(end) {
		r.recordPaused(js, g, by)
		return
	}
	n, first, _, _ := gridSpan(sched, end, js.accounted.Add(time.Nanosecond), g)
	d := first
	for ; n > maxPausedCatchUp; n-- {
		d = gridNext(sched, end, d)
	}
	for i := 0; i < n && !d.After(g); i++ {
		r.recordPaused(js, d, by)
		d = gridNext(sched, end, d)
	}
}

func (r *Runner) recordPaused(js *jobState, nominal time.Time, by string) {
	js.accounted = nominal
	r.recordOccurrence(js, jobs.OccurrenceRecord{NominalAt: nominal, Outcome: jobs.OccurrenceSkipped, Reason: jobs.ReasonPaused, PausedBy: by})
}

// skipInvalid records a tick of js whose schedule override is malformed,
// as the minute nearest to it (asked again every minute, so every replica
// records about the same minutes, and the table keeps one row each); it
// returns the next fire.
func (r *Runner) skipInvalid(js *jobState) time.Time {
	now := r.now()
	n := jobs.Nominal(now.Add(jobs.InvalidScheduleRetry / 2).Truncate(jobs.InvalidScheduleRetry))
	if n.After(js.accounted) {
		js.accounted = n
		r.recordOccurrence(js, jobs.OccurrenceRecord{NominalAt: n, Outcome: jobs.OccurrenceSkipped, Reason: jobs.ReasonInvalidSchedule})
	}
	return now.Add(jobs.InvalidScheduleRetry)
}

// recordOverrun records the due times of js that came while its run of
// the occurrence occ, started at started, lasted until ended, as one
// skipped/overrun row with their count: a cron job's cron times, an
// instance job's or a duty's interval steps. A shared fixed-delay job has
// none (its next due time counts from the end), except under a trigger.
//
// Only due times after the run's start count: a run that started late (the
// run at start after a missed stretch, or one that waited for a slot)
// did not overrun the due times before its start.
//
// A triggered run's own time is off the schedule: the due times it
// overran are the schedule's, counted from the end before the trigger
// (occ.prevEnd; a cron job with none: its cron times), a shared
// fixed-delay job's included. Such a due time fell while this replica's
// triggered run held the job (and its lock): no run was its occurrence,
// the job was running, so it was overrun (issue 22's definition: "a run
// still running when the next time came"); it is not held-elsewhere,
// which names a holder that ran or runs that due time, and never
// missed/down, since a live replica hosted the job. Defect 3 of issue
// 22's adversarial pass: nothing was recorded, and a later start counted
// it as missed/down.
func (r *Runner) recordOverrun(js *jobState, sched jobs.Schedule, occ occurrence, started, ended time.Time) {
	if occ.catchUp { // catchup.go: the live cron times the catch-up went through
		if !sched.IsCron() {
			return
		}
		started = occ.overrunFrom
	}
	anchor := occ.nominal
	switch {
	case occ.triggered && !occ.prevEnd.IsZero():
		anchor = occ.prevEnd
	case occ.triggered && !sched.IsCron():
		return
	case !occ.triggered && js.shared && !sched.IsCron():
		return
	}
	from := sched.Next(anchor)
	if !from.After(started) {
		from = started.Add(time.Nanosecond)
	}
	n, first, last, _ := gridSpan(sched, anchor, from, ended)
	if n == 0 {
		return
	}
	rec := jobs.OccurrenceRecord{NominalAt: first, Outcome: jobs.OccurrenceSkipped, Reason: jobs.ReasonOverrun, Count: n}
	if n > 1 {
		rec.LastNominalAt = last
	}
	r.recordOccurrence(js, rec)
}

// missedAtStart records, for a job that was due while no replica hosted it
// (a shared job: no live replica declares it besides this one; an instance
// job: this replica id was down), the stretch of due times that passed
// since its last end (anchor; or since the last occurrence recorded,
// whichever is later) as one row per part (stretchRecords): missed/down
// where no replica hosted it, skipped/paused where it was paused,
// skipped/overrun where a run that was never ended still went on. With
// missed: run-once the last due time of a final missed/down part is the
// occurrence of the run at start and the row covers those before it;
// with missed: skip, all. It returns the nominal time of the run at start
// (zero: none) and marks the stretch accounted for. r.mu held (Start).
func (r *Runner) missedAtStart(js *jobState, anchor, now time.Time, tr jobs.StartTrace) time.Time {
	if anchor.IsZero() {
		return time.Time{}
	}
	overrun := !js.shared || js.sched.IsCron()
	recs, runAt, last := stretchRecords(js.sched, anchor, now, tr, overrun, js.job.Missed != jobs.MissedSkip)
	if !last.IsZero() {
		js.accounted = last
	}
	for _, rec := range recs {
		r.recordOccurrence(js, rec)
		r.log.Info("runner: due times passed while no replica ran the job; recorded", "job_id", js.job.ID, "outcome", rec.Outcome, "reason", rec.Reason,
			"count", rec.Count, "first_nominal_at", jobs.FormatNominal(rec.NominalAt), "missed", string(js.job.Missed))
	}
	return runAt
}

// stretchRecords splits the due times of sched on the grid after anchor,
// from the first after tr.Recorded (or after anchor) up to to, into the
// rows that say what became of them, oldest first:
//   - those that came while a run that never ended still went on (after
//     tr.LostStarted, until its replica's death, tr.LostUntil): one
//     skipped/overrun row when overrun (an instance job, a duty, a cron
//     job; a shared fixed-delay job's next due time counts from an end,
//     so it had none), never missed/down: its replica was live and ran;
//   - then, split at each pause and resume in tr.Pauses: one
//     skipped/paused row (count, paused_by) for each part where the job
//     was paused, one missed/down row for each part where it was not.
//
// With runOnce, when the last part is missed/down, its last due time is
// taken out of it and returned as runAt, the run at start's occurrence.
// last is the last due time the rows account for (zero: none).
func stretchRecords(sched jobs.Schedule, anchor, to time.Time, tr jobs.StartTrace, overrun, runOnce bool) (recs []jobs.OccurrenceRecord, runAt, last time.Time) {
	from := sched.Next(anchor)
	if rec := tr.Recorded; !rec.IsZero() {
		// The database holds it truncated to the millisecond: the due time
		// it stands for is within the millisecond after it.
		if rec = rec.Add(time.Millisecond - time.Nanosecond); !rec.Before(from) {
			from = gridNext(sched, anchor, rec)
		}
	}
	if from.After(to) {
		return nil, time.Time{}, time.Time{}
	}
	// The cuts where a due time's fate may change, in (from, to].
	cuts := []time.Time{}
	lostUntil := time.Time{}
	if !tr.LostUntil.IsZero() && !tr.LostStarted.After(tr.LostUntil) && tr.LostUntil.After(from) {
		lostUntil = tr.LostUntil
		cuts = append(cuts, lostUntil.Add(time.Nanosecond)) // a due time at the death itself came while it ran
	}
	for _, c := range tr.Pauses {
		if c.At.After(from) && !c.At.After(to) {
			cuts = append(cuts, c.At)
		}
	}
	slices.SortFunc(cuts, func(a, b time.Time) int { return a.Compare(b) })
	type part struct {
		rec        jobs.OccurrenceRecord
		beforeLast time.Time // the due time before the last (zero: one)
	}
	var parts []part
	lo := from
	for i := 0; i <= len(cuts); i++ {
		hi := to
		if i < len(cuts) {
			hi = cuts[i].Add(-time.Nanosecond)
		}
		if hi.Before(lo) {
			continue
		}
		n, first, lastDue, beforeLast := gridSpan(sched, anchor, lo, hi)
		if i < len(cuts) {
			lo = cuts[i]
		}
		if n == 0 {
			continue
		}
		last = lastDue
		var rec jobs.OccurrenceRecord
		switch paused, by := tr.PausedAt(first); {
		case !lostUntil.IsZero() && !first.After(lostUntil):
			if !overrun {
				continue
			}
			rec = jobs.OccurrenceRecord{Outcome: jobs.OccurrenceSkipped, Reason: jobs.ReasonOverrun}
		case paused:
			rec = jobs.OccurrenceRecord{Outcome: jobs.OccurrenceSkipped, Reason: jobs.ReasonPaused, PausedBy: by}
		default:
			rec = jobs.OccurrenceRecord{Outcome: jobs.OccurrenceMissed, Reason: jobs.ReasonDown}
		}
		rec.NominalAt, rec.Count = first, n
		if n > 1 {
			rec.LastNominalAt = lastDue
		}
		// Two parts of the same fate in a row (a pause by one and by
		// another, a cut with no due time between) are one.
		if k := len(parts) - 1; k >= 0 && parts[k].rec.Outcome == rec.Outcome && parts[k].rec.Reason == rec.Reason && parts[k].rec.PausedBy == rec.PausedBy {
			if n == 1 {
				beforeLast = lastOf(parts[k].rec)
			}
			parts[k].rec.Count += n
			parts[k].rec.LastNominalAt = lastDue
			parts[k].beforeLast = beforeLast
			continue
		}
		parts = append(parts, part{rec: rec, beforeLast: beforeLast})
	}
	if k := len(parts) - 1; runOnce && k >= 0 && parts[k].rec.Reason == jobs.ReasonDown && lastOf(parts[k].rec).Equal(last) {
		p := &parts[k]
		runAt = last
		p.rec.Count--
		switch {
		case p.rec.Count == 0:
			parts = parts[:k]
			last = time.Time{}
			if k > 0 {
				last = lastOf(parts[k-1].rec)
			}
		case p.rec.Count == 1:
			p.rec.LastNominalAt, last = time.Time{}, p.rec.NominalAt
		default:
			p.rec.LastNominalAt, last = p.beforeLast, p.beforeLast
		}
	}
	for _, p := range parts {
		recs = append(recs, p.rec)
	}
	return recs, runAt, last
}

// lastOf is the last due time rec covers.
func lastOf(rec jobs.OccurrenceRecord) time.Time {
	if !rec.LastNominalAt.IsZero() {
		return rec.LastNominalAt
	}
	return rec.NominalAt
}

// DutyOccurrenceRecorder is what a Recorder may also do (jobstore.Store
// does) for per-cluster duties: read, when a cluster is acquired, what the
// database knows of each job's occurrences for that cluster
// (jobs.StartTrace, with Anchor the end of its last run there on any
// replica, kept in studio_duty_end, which no retention prunes).
type DutyOccurrenceRecorder interface {
	DutyStart(ctx context.Context, jobIDs []string, cluster string, before time.Time) (map[string]jobs.StartTrace, error)
}

// missedDutiesLocked records, in a goroutine counted in runWG (AddCluster
// must not block), the due times of cluster's duties that passed between
// the end of their last run anywhere (the previous owner's) and now, the
// acquisition, as stretchRecords splits them: missed/down where no replica
// hosted them, skipped/paused where the job was paused, skipped/overrun
// while a previous owner's run that never ended still went on (until its
// replica died). The first run here is at once, at a nominal time of its
// own. r.mu held.
func (r *Runner) missedDutiesLocked(cluster string, now time.Time) {
	dr, ok := r.o.Store.(DutyOccurrenceRecorder)
	if !ok || r.stopping || r.runsCtx == nil || len(r.clusters.templates) == 0 {
		return
	}
	or, ok := r.o.Store.(OccurrenceRecorder)
	if !ok {
		return
	}
	templates := slices.Clone(r.clusters.templates)
	ids := make([]string, len(templates))
	for i, j := range templates {
		ids[i] = j.ID
	}
	ctx := r.runsCtx
	r.runWG.Add(1)
	go func() {
		defer r.runWG.Done()
		qctx, cancel := context.WithTimeout(ctx, settingsTimeout)
		traces, err := dr.DutyStart(qctx, ids, cluster, now)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("runner: could not read the duties' last runs; no missed stretch is recorded for this acquisition", "cluster", cluster, "error", err)
			}
			return
		}
		for _, j := range templates {
			tr := traces[j.ID]
			if tr.Anchor.IsZero() {
				continue
			}
			recs, _, _ := stretchRecords(j.Schedule.ForScope(j.ID, cluster), tr.Anchor, now.Add(-time.Nanosecond), tr, true, false)
			for _, rec := range recs {
				rec.JobID, rec.ScopeKey, rec.ReplicaID = j.ID, cluster, r.o.ReplicaID
				or.PutOccurrence(rec)
				r.log.Info("runner: due times of a duty passed while no replica ran it for its cluster; recorded", "job_id", j.ID,
					"cluster", cluster, "outcome", rec.Outcome, "reason", rec.Reason, "count", rec.Count, "first_nominal_at", jobs.FormatNominal(rec.NominalAt))
			}
		}
	}()
}

// OccurrenceDropper is what a Recorder may also do (jobstore.Store does):
// take back a skip queued by PutOccurrence that the next flush has not
// written yet.
type OccurrenceDropper interface {
	DropOccurrence(job, scopeKey string, nominal time.Time)
}

// skipHeld records a tick of js that found the lock held (rec, a
// held-elsewhere skip). The store writes it only when the lock's holder is
// not a live replica, at the cost of a statement in its flush. In the
// usual case another replica holds the lock to run this very due time,
// and its end, which every replica reads from the shared schedule when it
// is signalled, says so: when that read comes before the store's flush,
// the skip is taken back (resolveHeldLocked), and a flush with nothing
// else to write makes no statement for it.
func (r *Runner) skipHeld(js *jobState, sched jobs.Schedule, occ occurrence, rec jobs.OccurrenceRecord) {
	r.recordOccurrence(js, rec)
	if _, ok := r.o.Store.(OccurrenceDropper); !ok || !js.shared || !occ.onGrid() {
		return
	}
	if _, ok := r.o.Schedules.(RunLoader); !ok {
		return
	}
	// A run of this due time starts before the next one (less a margin
	// for clocks); a run that starts later is the next occurrence's.
	next := gridNext(sched, occ.end, occ.nominal)
	r.mu.Lock()
	js.heldSkip, js.heldBefore = &rec, next.Add(-nominalSlack(sched, next))
	r.mu.Unlock()
}

// resolveHeldLocked settles js's held-elsewhere skip with a read of the
// shared schedule (the end of the last run anywhere and its start): a run
// that started before the next due time and ended after the skip's due
// time is that occurrence's, run by a replica, and the skip is taken back
// from the store if it is still queued there. r.mu held.
func (r *Runner) resolveHeldLocked(js *jobState, end, started time.Time) {
	p := js.heldSkip
	if p == nil || end.Before(p.NominalAt) {
		return
	}
	js.heldSkip = nil
	if started.IsZero() || !started.Before(js.heldBefore) {
		return
	}
	if d, ok := r.o.Store.(OccurrenceDropper); ok {
		d.DropOccurrence(js.job.ID, r.scopeKey(js), p.NominalAt)
	}
}
