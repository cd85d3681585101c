package runner_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
)

// Review defect 5 (regression): a replica restarted under the same id
// (its previous process was killed -9, or is a SIGSTOPped zombie) finds the
// job's lock held under its own id by that process's run, 30 s into its
// lockAtMostFor. Its try's answer is lost; the give-back at the next try
// used to end the predecessor's lock at once, and this replica runs the job while
// the predecessor's command may still run (docs/failover.md: such a lock
// "waits out the lock's lockAtMostFor").
func TestAGiveBackLeavesAPredecessorsLockUnderTheSameIdAlone(t *testing.T) {
	e := newEnv(t)
	ft := e.task()
	o := e.options(e.job("same", jobs.ScopeInstallation, 10*time.Second, ft))
	o.Locks = &lostTries{Locker: o.Locks, maybe: newMaybeLocks(t, e), n: 1}
	e.exec(`INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('same',
		timezone('utc', now()) + interval '30 seconds', timezone('utc', now()) - interval '30 seconds', $1)`, replicaID)
	before := e.lockRow("same")
	e.start(o)

	e.waitIdle("same", t0.Add(10*time.Second)) // the try whose answer was lost
	e.clk.Advance(10 * time.Second)            // the next try gives it back, then tries
	eventually(t, "the second try to end", func() bool {
		st := status(t, e.r, "same")
		return ft.startCount() > 0 || (!st.Running && st.NextFireAt != nil && st.NextFireAt.Equal(t0.Add(20*time.Second)))
	})
	if n := ft.startCount(); n != 0 {
		t.Errorf("%d runs while the predecessor's lock (same id) had 30 s to go, want 0", n)
	}
	if after := e.lockRow("same"); after.LockedAt.Equal(before.LockedAt) && after.LockUntil != before.LockUntil {
		t.Errorf("the give-back moved the predecessor's lock_until from %v to %v", before.LockUntil, after.LockUntil)
	}
}

// Review defect 6 (regression): this replica's own lock, kept for a run's
// minimum gap (lock_until ahead of now), was cut short by the give-back of a
// backfill try whose answer was lost: the backfill's tries take the lock
// with lockAtLeastFor 0, and the give-back's unlock recomputes lock_until
// = max(locked_at + 0, now) on whatever row this holder has. The minimum
// gap that keeps every other holder (a Java ShedLock node on the same lock
// with a skewed clock) off the same tick is gone.
func TestABackfillGiveBackKeepsTheMinimumGapOfTheLastRun(t *testing.T) {
	e := newEnv(t)
	task := &bfEnvTask{}
	o := e.options(jobtask.Job{Job: jobs.Job{ID: "bf", Scope: jobs.ScopeInstallation, Schedule: every(t, time.Hour)}, Task: task})
	o.InitialDelay = func(jobs.Job) time.Duration { return 30 * time.Minute }
	o.Backfills = jobstore.NewBackfills(e.pool, replicaID)
	o.Locks = &lostTries{Locker: o.Locks, maybe: newMaybeLocks(t, e), n: 1}
	// The last run's lock, kept for its minimum gap: 5 more minutes.
	e.exec(`INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('bf',
		timezone('utc', now()) + interval '5 minutes', timezone('utc', now()) - interval '10 seconds', $1)`, replicaID)
	before := e.lockRow("bf")
	e.start(o)
	live := t0.Add(30 * time.Minute)
	e.waitIdle("bf", live)
	requestBackfill(t, e, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	if !e.r.Backfill("bf") { // the try whose answer is lost (it found the gap)
		t.Fatal("Backfill(bf) = false")
	}
	e.waitIdle("bf", live)
	if !e.r.Backfill("bf") { // the host asks again: the give-back, then a try
		t.Fatal("Backfill(bf) = false")
	}
	e.waitIdle("bf", live)
	if after := e.lockRow("bf"); after.LockedAt.Equal(before.LockedAt) && !after.LockUntil.Equal(before.LockUntil) || len(task.runs()) > 0 {
		t.Errorf("the last run's minimum gap (lock_until %v) was cut: row now %+v, %d backfill runs inside the gap", before.LockUntil, after, len(task.runs()))
	}
}
