package e2ejobs

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// firstHolder waits for the first run of job, on either replica, and for
// its lock row, and returns the run, the lock as then read, the replica
// that holds it and the other one. Only one run may exist: the lock keeps
// the other replica out for lockAtMostFor.
func (f *fixture) firstHolder(job string, a, b *replicaproc.Proc) (runRow, lockRow, *replicaproc.Proc, *replicaproc.Proc) {
	t := f.t
	t.Helper()
	var first runRow
	var lock lockRow
	replicaproc.Eventually(t, 60*time.Second, "a first run of "+job+" and its lock", func() error {
		list, err := f.runs(job)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return fmt.Errorf("no run yet")
		}
		if len(list) > 1 {
			t.Fatalf("%d runs of %s, want one (the first holds the lock): %+v", len(list), job, list)
		}
		first = list[0]
		if first.Outcome != "running" {
			t.Fatalf("the first run of %s is %s, want running: %s", job, first.Outcome, first.Error)
		}
		if lock, err = f.readLock(job); err != nil {
			return err
		}
		if lock.LockedBy != first.ReplicaID {
			return fmt.Errorf("lock held by %q, run by %q", lock.LockedBy, first.ReplicaID)
		}
		// The command has started once it has written its start.
		if _, ok, err := f.expStart(first.Seq); err != nil || !ok {
			return fmt.Errorf("the command of run %d has not recorded its start yet (%v)", first.Seq, err)
		}
		return nil
	})
	if first.ReplicaID == a.ID() {
		return first, lock, a, b
	}
	return first, lock, b, a
}

// waitRunOf waits for the first run of job by replica id, failing at once
// if there are two, and returns it. check, when not nil, runs at every poll.
func (f *fixture) waitRunOf(job, id string, d time.Duration, check func()) runRow {
	t := f.t
	t.Helper()
	var run runRow
	replicaproc.Eventually(t, d, "a run of "+job+" by "+id, func() error {
		list, err := f.runs(job)
		if err != nil {
			return err
		}
		mine := runsBy(list, id)
		if len(mine) > 1 {
			t.Fatalf("%d runs of %s by %s, want one: %+v", len(mine), job, id, mine)
		}
		if check != nil {
			check()
		}
		if len(mine) == 0 {
			return fmt.Errorf("none yet")
		}
		run = mine[0]
		return nil
	})
	return run
}

// waitExpStart waits until the command of run seq has recorded its start.
func (f *fixture) waitExpStart(seq int64) time.Time {
	f.t.Helper()
	var at time.Time
	replicaproc.Eventually(f.t, 15*time.Second, fmt.Sprintf("the command of run %d to record its start", seq), func() error {
		s, ok, err := f.expStart(seq)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("not yet")
		}
		at = s
		return nil
	})
	return at
}

// waitGone waits until replica id is gone in the registry (no heartbeat
// for liveness.GoneAfter, database time).
func (f *fixture) waitGone(id string, d time.Duration) time.Duration {
	f.t.Helper()
	return replicaproc.Eventually(f.t, d, "replica "+id+" to be gone", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var age time.Duration
		err := f.pool.QueryRow(ctx, `SELECT now() - heartbeat_at FROM studio_replica WHERE id = $1`, id).Scan(&age)
		if err != nil {
			return err
		}
		if age <= liveness.GoneAfter {
			return fmt.Errorf("last heartbeat %s ago", age.Round(time.Millisecond))
		}
		return nil
	})
}

// waitOutcome waits until run seq of job has outcome and returns the row.
func (f *fixture) waitOutcome(job string, seq int64, outcome string, d time.Duration) runRow {
	f.t.Helper()
	run, err := f.pollOutcome(job, seq, outcome, d)
	if err != nil {
		f.t.Fatalf("timed out after %s waiting for run %d recorded %s: %v", d, seq, outcome, err)
	}
	return run
}

// pollOutcome polls until run seq of job has outcome, for at most d, and
// returns the row as last read, with an error when it never had outcome.
func (f *fixture) pollOutcome(job string, seq int64, outcome string, d time.Duration) (runRow, error) {
	deadline := time.Now().Add(d)
	var run runRow
	for {
		err := func() error {
			list, err := f.runs(job)
			if err != nil {
				return err
			}
			for _, r := range list {
				if r.Seq == seq {
					run = r
					if r.Outcome == outcome {
						return nil
					}
					return fmt.Errorf("outcome %s (%s)", r.Outcome, r.Error)
				}
			}
			return fmt.Errorf("no run %d", seq)
		}()
		if err == nil || time.Now().After(deadline) {
			return run, err
		}
		time.Sleep(replicaproc.PollEvery)
	}
}

const (
	// pauseEvery: lockAtLeastFor 1.8 s, lockAtMostFor the 60 s floor,
	// keep-alive every 30 s.
	pauseEvery = 2 * time.Second
	// crashEvery: the same lockAtMostFor, with a slower tick.
	crashEvery = 5 * time.Second
	// expiryMargin bounds the wait past a lock's lock_until for the other
	// replica's next tick (one interval) and the batching writer (1 s).
	expiryMargin = 30 * time.Second
)

// TestPausedHolderLosesItsLock is the pause of SPEC §11: two replicas share
// an installation job every 2s whose command runs for minutes. The lock
// holder is stopped with SIGSTOP before its first keep-alive and stays
// stopped past lockAtMostFor (60 s, database time). The other replica then
// runs the job exactly once. On SIGCONT the holder's keep-alive finds its
// lock gone: its run is cancelled (the command is killed) and recorded
// lock_lost, and the other replica's lock is left alone.
//
// Housekeeping is paused, so the run record is the runner's own; see
// TestPausedHolderLosesItsLockAfterHousekeeping for the same pause with a
// housekeeping pass in it.
func TestPausedHolderLosesItsLock(t *testing.T) {
	t.Parallel()
	testPausedHolder(t, false)
}

// TestPausedHolderLosesItsLockAfterHousekeeping is the same pause, with a
// housekeeping pass while the holder is gone (as the other replica's
// studio-housekeeping does once a minute): housekeeping marks the paused
// run interrupted; when the holder wakes up and cancels the run for the
// lost lock, the history must say lock_lost, as its status does.
func TestPausedHolderLosesItsLockAfterHousekeeping(t *testing.T) {
	t.Parallel()
	testPausedHolder(t, true)
}

func testPausedHolder(t *testing.T, housekeep bool) {
	const job = "long"
	f := newFixture(t, shJob(job, "installation", pauseEvery.String(), "10m", notePIDs+recordStart+" && exec sleep 600"))
	// The built-in housekeeping would mark the paused run interrupted at a
	// random moment; the test runs it itself when it wants one.
	f.pauseJob(jobs.HousekeepingID)
	prefix := "pause-"
	if housekeep {
		prefix = "hk-"
	}
	a, b := f.startReplica(prefix+"a"), f.startReplica(prefix+"b")
	a.WaitReady(t)
	b.WaitReady(t)

	first, lock0, holder, other := f.firstHolder(job, a, b)
	holder.Signal(t, syscall.SIGSTOP)
	stoppedAt := time.Now()
	l := f.mustReadLock(job)
	if l.LockedBy != holder.ID() || !l.LockUntil.Equal(lock0.LockUntil) {
		t.Fatalf("the lock changed around the SIGSTOP: %+v, then %+v", lock0, l)
	}
	atMost := lock0.LockUntil.Sub(lock0.LockedAt)
	want := jobs.LockAtMostFor(jobs.Schedule{Every: pauseEvery})
	t.Logf("run %d on %s holds the lock (locked_at %s, lock_until %s: lockAtMostFor %s); SIGSTOP %s after locked_at",
		first.Seq, holder.ID(), lock0.LockedAt.Format(time.RFC3339Nano), lock0.LockUntil.Format(time.RFC3339Nano), atMost, l.Now.Sub(lock0.LockedAt).Round(time.Millisecond))
	if atMost != want {
		t.Errorf("lock_until - locked_at = %s, want lockAtMostFor %s", atMost, want)
	}
	holderCmd, err := f.leaderPID(first.Seq)
	if err != nil {
		t.Fatal(err)
	}

	if housekeep {
		f.waitGone(holder.ID(), liveness.GoneAfter+expiryMargin)
		_, n, _, err := jobstore.Housekeep(context.Background(), f.pool)
		if err != nil {
			t.Fatal(err)
		}
		r := f.waitOutcome(job, first.Seq, "interrupted", 5*time.Second)
		t.Logf("housekeeping %s after the SIGSTOP marked %d run(s) interrupted: run %d: %s", time.Since(stoppedAt).Round(time.Millisecond), n, first.Seq, r.Error)
	}

	// The other replica takes the lock once it has expired, and runs once.
	remaining := lock0.LockUntil.Sub(l.Now)
	second := f.waitRunOf(job, other.ID(), remaining+expiryMargin, nil)
	l2 := f.mustReadLock(job)
	secondStart := f.waitExpStart(second.Seq)
	secondSeen := time.Now()
	holderCmdAlive := alive(holderCmd)
	t.Logf("run %d on %s: lock taken %s after the old lock_until, %s after the SIGSTOP; its command started %s after the old lock_until",
		second.Seq, other.ID(), l2.LockedAt.Sub(lock0.LockUntil).Round(time.Millisecond), time.Since(stoppedAt).Round(time.Millisecond), secondStart.Sub(lock0.LockUntil).Round(time.Millisecond))
	if l2.LockedBy != other.ID() || l2.LockedAt.Before(lock0.LockUntil) {
		t.Fatalf("lock after the takeover: %+v; want it held by %s and taken at or after %s", l2, other.ID(), lock0.LockUntil.Format(time.RFC3339Nano))
	}
	if secondStart.Before(lock0.LockUntil) {
		t.Errorf("the other replica's command started at %s, before the paused holder's lock_until %s", secondStart.Format(time.RFC3339Nano), lock0.LockUntil.Format(time.RFC3339Nano))
	}
	if holderCmdAlive {
		t.Logf("the paused holder's command (pid %d) was still running when the other replica's started: SIGSTOP stopped the replica, not its command's process group, so from the takeover until the holder wakes up two executions run at once", holderCmd)
	}
	if !housekeep {
		if r := f.waitOutcome(job, first.Seq, "running", time.Second); r.FinishedAt != nil {
			t.Fatalf("the paused run %d has finished_at %s", r.Seq, r.FinishedAt)
		}
	}

	holder.Signal(t, syscall.SIGCONT)
	contAt := time.Now()
	// The status and the history row are written by the same batching
	// writer, the run before the status: once the status counts the lost
	// lock, the history row has been written too.
	var st jobs.Status
	replicaproc.Eventually(t, 30*time.Second, "lock_lost counted in the woken holder's status", func() error {
		var err error
		if st, err = f.status(holder.ID(), job); err != nil {
			return err
		}
		if st.LockLost < 1 || st.LastOutcome != jobs.OutcomeLockLost || st.LastFinishedAt == nil {
			return fmt.Errorf("lock_lost %d, last outcome %s", st.LockLost, st.LastOutcome)
		}
		return nil
	})
	t.Logf("%s counted lock_lost %s after SIGCONT (status: lock_lost %d, last outcome %s)", holder.ID(), time.Since(contAt).Round(time.Millisecond), st.LockLost, st.LastOutcome)
	lost, err := f.pollOutcome(job, first.Seq, "lock_lost", 2*time.Second+jobstore.FlushEvery)
	if err != nil {
		t.Errorf("run %d: %v, although %s's status counts the lost lock (last outcome %s): the history must say lock_lost too. "+
			"The run store updates a history row only while it is 'running' (internal/jobs/store.go, upsertRunsSQL), "+
			"so housekeeping's 'interrupted', written while the holder was paused and gone, is never corrected", first.Seq, err, holder.ID(), st.LastOutcome)
	} else {
		t.Logf("run %d on %s recorded lock_lost: %s", lost.Seq, holder.ID(), lost.Error)
	}
	if err == nil && !strings.Contains(lost.Error, "lock lost") {
		t.Errorf("error of the lock_lost run = %q, want it to say the lock was lost", lost.Error)
	}
	if err == nil && (lost.FinishedAt == nil || lost.FinishedAt.Before(l2.LockedAt)) {
		t.Errorf("the lock_lost run finished at %v, want after the SIGCONT (after %s)", lost.FinishedAt, l2.LockedAt.Format(time.RFC3339Nano))
	}
	replicaproc.Eventually(t, 15*time.Second, "the cancelled command's process group to be gone", func() error {
		if m := groupMembers(holderCmd); len(m) > 0 {
			return fmt.Errorf("group %d: %v", holderCmd, m)
		}
		return nil
	})
	if holderCmdAlive {
		t.Logf("the two commands overlapped for %s: from the other's start until the woken holder had killed its own (the test sent SIGCONT %s after it saw the other's command start; a longer pause overlaps longer)",
			st.LastFinishedAt.Sub(secondStart).Round(time.Millisecond), contAt.Sub(secondSeen).Round(time.Millisecond))
	}

	// The holder did not unlock the other replica's lock, and on its next
	// tick it skips.
	replicaproc.Eventually(t, 10*time.Second+2*pauseEvery, "the woken holder's next tick to skip", func() error {
		cur, err := f.status(holder.ID(), job)
		if err != nil {
			return err
		}
		if cur.LastSkippedElsewhereAt == nil || !cur.LastSkippedElsewhereAt.After(*st.LastFinishedAt) {
			return fmt.Errorf("last skipped elsewhere at %v", cur.LastSkippedElsewhereAt)
		}
		return nil
	})
	l3 := f.mustReadLock(job)
	if l3.LockedBy != other.ID() || !l3.LockedAt.Equal(l2.LockedAt) || !l3.LockUntil.After(l3.Now) {
		t.Errorf("lock after the holder woke up: %+v; want still %s's, taken at %s, live", l3, other.ID(), l2.LockedAt.Format(time.RFC3339Nano))
	}
	list, err := f.runs(job)
	if err != nil {
		t.Fatal(err)
	}
	if h, o := runsBy(list, holder.ID()), runsBy(list, other.ID()); len(h) != 1 || len(o) != 1 || o[0].Outcome != "running" {
		t.Errorf("runs after the pause: %+v; want one (lock_lost) by %s and one still running by %s", list, holder.ID(), other.ID())
	}
	if holder.Exited() {
		t.Errorf("the woken holder exited (%v); its heartbeat should still succeed (same incarnation)", holder.State())
	}
}

// TestKilledHolderBlocksUntilLockUntil: two replicas share an installation
// job every 5s whose command runs for two minutes. The holder is killed
// with SIGKILL during its run. No other replica runs the job before the
// lock_until read right after the kill; after it, the other replica does;
// and housekeeping marks the killed run interrupted once the killed replica
// is gone.
func TestKilledHolderBlocksUntilLockUntil(t *testing.T) {
	t.Parallel()
	const job = "crash"
	f := newFixture(t, shJob(job, "installation", crashEvery.String(), "", notePIDs+recordStart+" && exec sleep 120"))
	a, b := f.startReplica("kill-a"), f.startReplica("kill-b")
	a.WaitReady(t)
	b.WaitReady(t)

	first, _, holder, other := f.firstHolder(job, a, b)
	holder.Signal(t, syscall.SIGKILL)
	killedAt := time.Now()
	lock := f.mustReadLock(job)
	if code := holder.WaitExit(t, replicaproc.ExitTimeout); code != -1 {
		t.Fatalf("exit code after SIGKILL = %d, want -1", code)
	}
	if lock.LockedBy != holder.ID() {
		t.Fatalf("lock right after the kill: %+v, want held by %s", lock, holder.ID())
	}
	t.Logf("run %d on %s killed %s after locked_at; lock_until %s is %s away", first.Seq, holder.ID(),
		lock.Now.Sub(lock.LockedAt).Round(time.Millisecond), lock.LockUntil.Format(time.RFC3339Nano), lock.LockUntil.Sub(lock.Now).Round(time.Millisecond))
	holderCmd, err := f.leaderPID(first.Seq)
	if err != nil {
		t.Fatal(err)
	}

	// No execution by anyone else may start before lock_until: checked at
	// every poll on the commands' own records (database time) and on the
	// run records (the replica's clock, which here is the database's host).
	ctx := context.Background()
	early := func() {
		cctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		var cmds, runs int
		err := f.pool.QueryRow(cctx, `
SELECT (SELECT count(*) FROM exp WHERE job_id = $1 AND seq <> $2 AND started_at < $3),
       (SELECT count(*) FROM studio_job_run WHERE job_id = $1 AND seq <> $2 AND started_at < $3)`,
			job, first.Seq, lock.LockUntil).Scan(&cmds, &runs)
		if err != nil {
			t.Fatal(err)
		}
		if cmds > 0 || runs > 0 {
			t.Fatalf("%d executions (%d runs) of %s started before the killed holder's lock_until %s", cmds, runs, job, lock.LockUntil.Format(time.RFC3339Nano))
		}
	}
	second := f.waitRunOf(job, other.ID(), lock.LockUntil.Sub(lock.Now)+expiryMargin, early)
	secondStart := f.waitExpStart(second.Seq)
	orphan := alive(holderCmd)
	early()
	l2 := f.mustReadLock(job)
	if l2.LockedBy != other.ID() || l2.LockedAt.Before(lock.LockUntil) {
		t.Fatalf("lock after the takeover: %+v; want %s's, taken at or after %s", l2, other.ID(), lock.LockUntil.Format(time.RFC3339Nano))
	}
	t.Logf("run %d on %s: lock taken %s after lock_until (%s after the kill); its command started %s after lock_until",
		second.Seq, other.ID(), l2.LockedAt.Sub(lock.LockUntil).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond), secondStart.Sub(lock.LockUntil).Round(time.Millisecond))
	if st, err := f.status(other.ID(), job); err == nil {
		t.Logf("%s skipped %d ticks while the dead holder's lock was live", other.ID(), st.SkippedElsewhere)
	}
	if orphan {
		firstStart := f.waitExpStart(first.Seq)
		t.Logf("the killed replica's command (pid %d, sleep 120) was still running when %s started the job: kill -9 of a replica leaves its command behind; the two overlap until about %s after the takeover, when its sleep 120 ends",
			holderCmd, other.ID(), firstStart.Add(120*time.Second).Sub(secondStart).Round(time.Second))
	}

	// Housekeeping marks the killed run interrupted once its replica is gone.
	f.waitGone(holder.ID(), liveness.GoneAfter+expiryMargin)
	_, n, _, err := jobstore.Housekeep(ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitOutcome(job, first.Seq, "interrupted", 5*time.Second)
	t.Logf("housekeeping %s after the kill: this pass marked %d run(s) interrupted (0: the built-in job had); run %d: %s", time.Since(killedAt).Round(time.Millisecond), n, first.Seq, r.Error)
	if !strings.Contains(r.Error, holder.ID()) {
		t.Errorf("error of the interrupted run = %q, want it to name the gone replica %s", r.Error, holder.ID())
	}
	list, err := f.runs(job)
	if err != nil {
		t.Fatal(err)
	}
	if o := runsBy(list, other.ID()); len(o) != 1 || o[0].Outcome != "running" {
		t.Errorf("runs of the live replica %s: %+v; want one, still running", other.ID(), o)
	}
}
