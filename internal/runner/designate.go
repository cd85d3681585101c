package runner

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
)

// The designated replica (docs/schedules.md, "Designated replica"): for
// each installation job the replicas agree, by rendezvous hashing of the
// job id over the live, ready replicas (leases.Weight, the hash cluster
// placement uses), on the one that tries the lock at the due time. The
// others wait: the second choice tries after one grace, the third after
// two, and so on, each only if it has not heard that a run started. The
// lock and the shared schedule still decide; a wrong guess costs a
// skipped attempt or a grace of delay, never a second run.

// DefaultDesignateGrace is how long the second choice waits after a due
// time before it reads the shared schedule and tries the lock, when it has
// not heard the run start (the k-th choice waits k-1 graces). It bounds
// the delay of a due time whose designated replica died until the registry
// says so (liveness.GoneAfter plus a lease round), and is long enough for
// the designated replica's read, lock and start signal on a loaded
// machine.
const DefaultDesignateGrace = time.Second

// designation is one shared job's state of the designated-replica wait;
// r.mu.
type designation struct {
	// fallbackAt is the time of the pending fallback fire (the job is
	// queued at it) and due the due time it waits on; zero: none.
	fallbackAt, due time.Time
	// heardStart is when a run start of the job was last heard, since the
	// last end heard (zero: none): a start heard just before this
	// replica's own fire of the same due time counts for it.
	heardStart time.Time
}

// Members is the view of the live, ready replicas the designation is
// computed over (Options.Members): ids and whether the view is current.
// A view that is not current (never read, or the reads failing) turns the
// designation off: every replica tries the lock at the due time, as
// without it.
type Members func() (ids []string, ok bool)

// designateRank is replica's place among members in the order of the
// rendezvous weights of job (highest first, equal weights by smaller id):
// 0 is the designated replica. A replica that is not among members (it is
// starting or draining, or the view is older than its start) comes after
// all of them; with no member at all, every replica is first.
func designateRank(job, replica string, members []string) int {
	if len(members) == 0 {
		return 0
	}
	mine := leases.Weight(job, replica)
	rank, found := 0, false
	for _, m := range members {
		if m == replica {
			found = true
			continue
		}
		if w := leases.Weight(job, m); w > mine || (w == mine && m < replica) {
			rank++
		}
	}
	if !found {
		return len(members)
	}
	return rank
}

// DesignatedOrder is the order in which the replicas members try job's
// lock: the designated one first (for docs, tests and tools).
func DesignatedOrder(job string, members []string) []string {
	out := slices.Clone(members)
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(leases.Weight(job, b), leases.Weight(job, a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// designateStep is the wait between one choice and the next for a job
// under sched among n members: the grace, or less for a job with a start
// deadline, so that every choice tries before the deadline.
func (r *Runner) designateStep(sched jobs.Schedule, n int) time.Duration {
	step := r.o.DesignateGrace
	if dl := sched.Deadline(); dl > 0 {
		step = min(step, dl/time.Duration(n+1))
	}
	return step
}

// deferToDesignated is the tick's hook (runner.go): a fire of a shared job
// at its due time on a replica that is not the designated one puts the job
// back on the timer at its fallback time and returns true; that fallback
// fire, and every fire of the designated replica, a trigger or a retry,
// returns false and goes on as before (the read, the lock). A run start
// heard for this due time moves the timer to the next due time instead.
func (r *Runner) deferToDesignated(js *jobState, sched jobs.Schedule, fire time.Time, forced, retry bool) bool {
	if !js.shared || forced || retry || r.o.Members == nil || r.o.DesignateGrace <= 0 {
		return false
	}
	r.mu.Lock()
	if js.staleLock != nil {
		// This replica may hold the job's lock: an unlock that failed,
		// or a try whose answer was lost (run.go, tryLock). Only it can
		// give the lock back before its lockAtMostFor, at its own next
		// try (releaseStale); deferring would leave every replica's try
		// "held elsewhere" until its fallback, or until then if a start
		// heard moved it on.
		r.mu.Unlock()
		return false
	}
	d := &js.designate
	fallback := !d.fallbackAt.IsZero() && fire.Equal(d.fallbackAt)
	d.fallbackAt, d.due = time.Time{}, time.Time{}
	heard := d.heardStart
	r.mu.Unlock()
	if fallback {
		return false // the grace ran out without a start heard: read, and try the lock
	}
	members, ok := r.o.Members()
	if !ok {
		return false
	}
	rank := designateRank(js.job.ID, r.o.ReplicaID, members)
	if rank == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	js.running = false
	if r.stopping { // as finishAt: the status keeps the due time for readers
		t := fire
		js.status.NextFireAt = &t
		r.putStatusLocked(js)
		return true
	}
	if !heard.IsZero() && !heard.Before(fire.Add(-r.designateStep(sched, len(members)))) {
		// The designated replica's clock ran a little ahead: its start
		// came before this fire. Counted once.
		js.designate.heardStart = time.Time{}
		r.push(js, r.afterStart(sched, fire))
		return true
	}
	at := fire.Add(time.Duration(rank) * r.designateStep(sched, len(members)))
	js.designate.fallbackAt, js.designate.due = at, fire
	r.push(js, at)
	return true
}

// afterStart is the next fire of a job under sched whose run of due time
// due started elsewhere: the next due time as if that run took no time
// (its end signal moves the timer to the real one; if the signal is lost,
// that fire reads the shared schedule after its grace).
func (r *Runner) afterStart(sched jobs.Schedule, due time.Time) time.Time {
	next, now := sched.Next(due), r.now()
	if next.Before(now) {
		return now
	}
	return next
}

// RunStarted is the bus's job.started signal (jobstore.KindJobStarted): a
// run of installation job id took its lock somewhere. A fallback waiting
// on the due time is given up (the job goes on the timer at its next due
// time); otherwise the start is kept for this replica's own fire of the
// same due time, if it comes within a grace.
func (r *Runner) RunStarted(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	js, ok := r.jobs[id]
	if !ok || !js.shared || r.stopping || r.runsCtx == nil {
		return
	}
	d := &js.designate
	if js.queued && !js.running && !js.forced && !js.backfill && !d.fallbackAt.IsZero() && js.due.Equal(d.fallbackAt) {
		due := d.due
		d.fallbackAt, d.due = time.Time{}, time.Time{}
		r.push(js, r.afterStart(js.sched, due))
		return
	}
	d.heardStart = r.now()
}

// ScheduleEnded is ScheduleChanged with the end the job.schedule signal
// carries (jobstore.EndOf): the timer moves without a read of the shared
// schedule, so an end costs no statement on the replicas that did not run
// it. The end is believed only up to FutureTolerance ahead of this
// replica's database time (a forged or skewed one is read instead); the
// next fire reads the row anyway, so a wrong signal costs at most a delay.
func (r *Runner) ScheduleEnded(id string, end, started time.Time) {
	now := r.now()
	if end.IsZero() || end.After(now.Add(endSignalTolerance)) {
		r.ScheduleChanged(id)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	js, ok := r.jobs[id]
	if !ok || !js.shared || r.stopping || r.runsCtx == nil {
		return
	}
	js.designate.heardStart = time.Time{}
	r.resolveHeldLocked(js, end, started)
	if !js.queued || js.running || js.forced || js.backfill {
		return
	}
	dbNow := now // this replica's estimate of database time, never before the end it heard
	if end.After(dbNow) {
		dbNow = end
	}
	due := jobs.LocalDue(jobs.DueAfter(js.sched, end, dbNow, jobs.MissedRunOnce), dbNow, now)
	due = jitterStart(js.sched, due, now)
	if d := due.Sub(js.due); d > -time.Millisecond && d < time.Millisecond {
		return
	}
	js.designate.fallbackAt, js.designate.due = time.Time{}, time.Time{}
	r.push(js, due)
	r.putStatusLocked(js)
}

// endSignalTolerance is how far ahead of this replica's database time an
// end carried by a signal may be and still be believed.
const endSignalTolerance = 5 * time.Second

// StartAnnouncer is what a Schedules may also do (jobstore.Schedules
// does): LoadRun, and in the same statement send the job.started signal,
// so that the designated replica's read under the lock (endedMeanwhile)
// tells the others that the run started without a statement more.
type StartAnnouncer interface {
	LoadRunAnnouncing(ctx context.Context, job string) (end, started, dbNow time.Time, err error)
}

// loadRunUnderLock is the read of endedMeanwhile: with the designation on
// and a StartAnnouncer, it announces the start.
func (r *Runner) loadRunUnderLock(ctx context.Context, js *jobState) (time.Time, time.Time, time.Time, error) {
	if sa, ok := r.o.Schedules.(StartAnnouncer); ok && r.o.Members != nil && r.o.DesignateGrace > 0 {
		return sa.LoadRunAnnouncing(ctx, js.job.ID)
	}
	return r.loadRun(ctx, js)
}
