package runner_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/runner"
)

// membersRanking returns n live, ready replica ids, replicaID among them,
// in which replicaID has place rank for job (0: designated).
func membersRanking(t *testing.T, job string, rank, n int) []string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		ms := []string{replicaID}
		for k := 1; k < n; k++ {
			ms = append(ms, fmt.Sprintf("replica-%d-%d", i, k))
		}
		if slices.Index(runner.DesignatedOrder(job, ms), replicaID) == rank {
			return ms
		}
	}
	t.Fatalf("no %d replicas in which %s ranks %d for %s", n, replicaID, rank, job)
	return nil
}

func fixedMembers(ms []string, ok bool) runner.Members {
	return func() ([]string, bool) { return ms, ok }
}

// The designated replica tries the lock at the due time; the one that
// ranks third waits two graces, and tries only then.
func TestOnlyTheDesignatedReplicaTriesAtTheDueTime(t *testing.T) {
	for _, c := range []struct {
		name string
		rank int
	}{{"designated", 0}, {"second choice", 1}, {"third choice", 2}} {
		t.Run(c.name, func(t *testing.T) {
			e, _, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
			o.Members = fixedMembers(membersRanking(t, "shared", c.rank, 3), true)
			e.start(o)
			due := t0.Add(7 * time.Second)
			e.waitIdle("shared", due)
			e.clk.Advance(7 * time.Second) // the due time
			if c.rank == 0 {
				ft.waitEnds(t, 1)
				if n := lk.n(); n != 1 {
					t.Fatalf("%d lock attempts at the due time, want 1", n)
				}
				return
			}
			fallback := due.Add(time.Duration(c.rank) * runner.DefaultDesignateGrace)
			e.waitIdle("shared", fallback)
			e.clk.Advance(fallback.Sub(due) - time.Millisecond)
			if n := lk.n(); n != 0 || ft.startCount() != 0 {
				t.Fatalf("%d lock attempts and %d runs before the fallback, want none", n, ft.startCount())
			}
			e.clk.Advance(time.Millisecond) // the grace ran out: no start heard
			ft.waitEnds(t, 1)
			if n := lk.n(); n != 1 {
				t.Fatalf("%d lock attempts at the fallback, want 1", n)
			}
		})
	}
}

// A start heard while a replica waits gives up its fallback: no read and
// no lock attempt for that due time; the end the signal carries moves the
// timer without a read.
func TestAStartHeardGivesUpTheFallbackAndTheEndMovesTheTimerWithoutARead(t *testing.T) {
	e, sch, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	o.Members = fixedMembers(membersRanking(t, "shared", 1, 3), true)
	r := e.start(o)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(7 * time.Second)
	e.waitIdle("shared", due.Add(runner.DefaultDesignateGrace))
	reads := sch.n()
	r.RunStarted("shared") // the designated replica took the lock
	e.waitIdle("shared", due.Add(10*time.Second))
	e.clk.Advance(2 * runner.DefaultDesignateGrace)
	end := e.clk.Now()
	r.ScheduleEnded("shared", end, due)
	e.waitIdle("shared", end.Add(10*time.Second))
	if n, got := lk.n(), sch.n(); n != 0 || got != reads || ft.startCount() != 0 {
		t.Fatalf("%d lock attempts, %d reads of the schedule, %d runs for a due time run elsewhere; want none", n, got-reads, ft.startCount())
	}
}

// A start heard just before this replica's own fire of the same due time
// (the designated replica's clock a little ahead) counts for it.
func TestAStartHeardJustBeforeTheFireCounts(t *testing.T) {
	e, _, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	o.Members = fixedMembers(membersRanking(t, "shared", 1, 3), true)
	r := e.start(o)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(7*time.Second - 20*time.Millisecond)
	r.RunStarted("shared")
	e.clk.Advance(20 * time.Millisecond)
	e.waitIdle("shared", due.Add(10*time.Second))
	e.clk.Advance(3 * runner.DefaultDesignateGrace)
	if n := lk.n(); n != 0 || ft.startCount() != 0 {
		t.Fatalf("%d lock attempts and %d runs for a due time that started elsewhere, want none", n, ft.startCount())
	}
}

// With no current view of the replicas (the registry unreadable, or before
// the first read), every replica tries at the due time, as without the
// designation; so does a trigger on any replica.
func TestWithoutAViewEveryReplicaTriesAtTheDueTime(t *testing.T) {
	e, _, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	o.Members = fixedMembers(nil, false)
	e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	e.clk.Advance(7 * time.Second)
	ft.waitEnds(t, 1)
	if n := lk.n(); n != 1 {
		t.Fatalf("%d lock attempts at the due time, want 1", n)
	}
}

// A trigger runs at once on a replica that is not designated.
func TestATriggerDoesNotWaitForTheDesignatedReplica(t *testing.T) {
	e, _, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	o.Members = fixedMembers(membersRanking(t, "shared", 2, 3), true)
	r := e.start(o)
	e.waitIdle("shared", t0.Add(7*time.Second))
	if !r.Trigger("shared") {
		t.Fatal("trigger refused")
	}
	ft.waitEnds(t, 1)
	if n := lk.n(); n != 1 {
		t.Fatalf("%d lock attempts for a trigger, want 1", n)
	}
}

// A job with a start deadline shortens the wait so that every choice tries
// before the deadline: 3 replicas, a 2 s deadline, steps of 0.5 s.
func TestTheFallbacksComeBeforeTheStartDeadline(t *testing.T) {
	e, _, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	o.Jobs[0].Schedule = o.Jobs[0].Schedule.WithDeadline(2 * time.Second)
	o.Members = fixedMembers(membersRanking(t, "shared", 2, 3), true)
	e.start(o)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(7 * time.Second)
	e.waitIdle("shared", due.Add(time.Second)) // 2 × 2 s / 4
	e.clk.Advance(time.Second)
	ft.waitEnds(t, 1)
	if n := lk.n(); n != 1 {
		t.Fatalf("%d lock attempts, want 1 before the deadline", n)
	}
}

// A replica that is not designated but holds the job's lock from an unlock
// that failed tries at the due time, and gives the lock back first: only
// it can, before the lock's lockAtMostFor (60 s).
func TestAReplicaHoldingALockWhoseUnlockFailedDoesNotDefer(t *testing.T) {
	e, _, lk, ft, o := sharedEnv(t, "", t0.Add(-3*time.Second))
	o.Members = fixedMembers(membersRanking(t, "shared", 1, 3), true)
	o.Locks = &unlockFails{Locker: lk, n: 1}
	e.start(o)
	due := t0.Add(7 * time.Second)
	e.waitIdle("shared", due)
	e.clk.Advance(7 * time.Second)
	fallback := due.Add(runner.DefaultDesignateGrace)
	e.waitIdle("shared", fallback)
	e.clk.Advance(runner.DefaultDesignateGrace) // no start heard: this replica runs, and its unlock fails
	ft.waitEnds(t, 1)
	eventually(t, "the failed unlock to be logged", func() bool {
		return strings.Contains(e.logs.String(), "unlock failed")
	})
	next := fallback.Add(10 * time.Second)
	e.waitIdle("shared", next)
	e.clk.Advance(10 * time.Second) // the next due time, before any fallback
	ft.waitEnds(t, 2)
	if n := lk.n(); n != 2 {
		t.Fatalf("%d lock attempts, want 2 (one at the fallback, one at the next due time)", n)
	}
	eventually(t, "the release to be logged", func() bool {
		return strings.Contains(e.logs.String(), "released the lock whose unlock had failed")
	})
}
