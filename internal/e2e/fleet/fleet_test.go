package e2efleet

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Three replicas share 15 installation jobs every 1s. In steady state only
// the designated replica tries each job's lock: lock attempts per due time
// at most 1.1. Then the replica designated for the most jobs is killed with
// SIGKILL: every later due time of its jobs starts within the grace plus
// one second (the second choice's fallback), and once the registry finds
// it gone (liveness.GoneAfter and a lease round) placement moves its jobs
// to a survivor, which runs them at their due times again.
func TestADesignatedReplicaKilledCostsItsJobsAGraceUntilPlacementMovesThem(t *testing.T) {
	const (
		replicasN = 3
		jobsN     = 15
		every     = time.Second
		grace     = runner.DefaultDesignateGrace
	)
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	path, ids := writeConfig(t, jobsN, func(int) time.Duration { return every }, target(t))
	rs := make([]*replicaproc.Proc, replicasN)
	names := make([]string, replicasN)
	for i := range rs {
		names[i] = fmt.Sprintf("fleet-%d", i+1)
		rs[i] = studioctlBin.Start(t, replicaproc.Options{ID: names[i], DatabaseURL: dbURL, Args: []string{"--config", path}, FailOnRace: true})
	}
	for _, p := range rs {
		p.WaitReady(t)
	}

	// Steady state: each replica's lease round has seen the three ready
	// (at most a round, 5 s, after the last became ready) once no new
	// held-elsewhere skip comes for 2 s.
	_, _ = attempts(t, pool)
	var lastSkips int64 = -1
	stableSince := time.Now()
	if !poll(20*time.Second, func() bool {
		a, r := attempts(t, pool)
		if skips := a - r; skips != lastSkips {
			lastSkips, stableSince = skips, time.Now()
		}
		return time.Since(stableSince) >= 2*time.Second
	}) {
		t.Fatalf("the held-elsewhere skips never stopped growing: every replica keeps trying every lock")
	}
	a0, r0 := attempts(t, pool)
	windowEnd := time.Now().Add(8 * time.Second)
	poll(10*time.Second, func() bool { return time.Now().After(windowEnd) }) // the window's length: nothing to wait for
	a1, r1 := attempts(t, pool)
	if r1-r0 < 40 {
		t.Fatalf("%d runs of %d jobs every %s in 8 s: the jobs stalled", r1-r0, jobsN, every)
	}
	perDue := float64(a1-a0) / float64(r1-r0)
	t.Logf("steady state: %d lock attempts for %d due times (%.3f per due time)", a1-a0, r1-r0, perDue)
	if perDue > 1.1 {
		t.Errorf("%.3f lock attempts per due time in steady state, want at most 1.1", perDue)
	}

	// The replica designated for the most jobs, and its jobs.
	count := map[string][]string{}
	for _, id := range ids {
		d := runner.DesignatedOrder(id, names)[0]
		count[d] = append(count[d], id)
	}
	victim := 0
	for i, n := range names {
		if len(count[n]) > len(count[names[victim]]) {
			victim = i
		}
	}
	dead, deadJobs := names[victim], count[names[victim]]
	survivors := slices.Delete(slices.Clone(names), victim, victim+1)
	killAt := dbNow(t, pool)
	rs[victim].Signal(t, syscall.SIGKILL)
	t.Logf("kill -9 %s, designated for %v", dead, deadJobs)
	// A run in progress at the kill keeps its lock for lockAtMostFor (60 s),
	// as before the designation: its job is left out of the bound. (The
	// ShedLock table's times are UTC without a zone.)
	held := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	rows, err := pool.Query(ctx, `SELECT name FROM shedlock WHERE locked_by = $1 AND lock_until > (now() AT TIME ZONE 'UTC') + interval '5 seconds'`, dead)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		held[n] = true
	}
	rows.Close()
	cancel()
	if len(held) > 0 {
		t.Logf("runs in progress at the kill, left out: %v", held)
	}

	// Placement moves: each of its jobs runs on the replica now designated
	// with a lateness under half a grace, three times.
	type run struct {
		job, replica string
		late         time.Duration
	}
	var after []run
	read := func() {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		rows, err := pool.Query(ctx, `SELECT job_id, replica_id, extract(epoch FROM started_at - nominal_at) FROM studio_job_run
WHERE job_id = ANY($1) AND started_at > $2 AND nominal_at IS NOT NULL ORDER BY started_at`, deadJobs, killAt)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		after = after[:0]
		for rows.Next() {
			var r run
			var late float64
			if err := rows.Scan(&r.job, &r.replica, &late); err != nil {
				t.Fatal(err)
			}
			r.late = time.Duration(late * float64(time.Second))
			after = append(after, r)
		}
	}
	moved := func() bool {
		read()
		onTime := map[string]int{}
		for _, r := range after {
			if r.replica == runner.DesignatedOrder(r.job, survivors)[0] && r.late < grace/2 {
				onTime[r.job]++
			}
		}
		for _, j := range deadJobs {
			if !held[j] && onTime[j] < 3 {
				return false
			}
		}
		return true
	}
	if !poll(40*time.Second, moved) {
		t.Errorf("placement did not move the jobs of %s within 40 s of its kill", dead)
	}
	late, worst := 0, time.Duration(0)
	for _, r := range after {
		if held[r.job] {
			continue
		}
		worst = max(worst, r.late)
		if r.late > grace+time.Second {
			late++
			t.Errorf("%s started %s after its due time on %s, want at most the grace (%s) plus 1s", r.job, r.late.Round(time.Millisecond), r.replica, grace)
		}
	}
	t.Logf("%d runs of %d jobs of the killed replica after the kill, the latest %s after its due time, %d later than grace + 1s",
		len(after), len(deadJobs), worst.Round(time.Millisecond), late)
}
