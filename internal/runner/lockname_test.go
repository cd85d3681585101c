package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// ShedLock's own PostgreSQL statements (usingDbTime()), as a Java node sends
// them; $1 name, $2 interval, $3 locked_by.
const (
	javaLockSQL   = `INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES($1, timezone('utc', CURRENT_TIMESTAMP) + cast($2 as interval), timezone('utc', CURRENT_TIMESTAMP), $3) ON CONFLICT (name) DO UPDATE SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + cast($2 as interval), locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = $3 WHERE shedlock.name = $1 AND shedlock.lock_until <= timezone('utc', CURRENT_TIMESTAMP)`
	javaUnlockSQL = `UPDATE shedlock SET lock_until = CASE WHEN locked_at + cast($2 as interval) > timezone('utc', CURRENT_TIMESTAMP) THEN locked_at + cast($2 as interval) ELSE timezone('utc', CURRENT_TIMESTAMP) END WHERE name = $1 AND locked_by = $3`
)

// javaLock runs ShedLock's lock statement as a Java node; true when it got the lock.
func (e *env) javaLock(name, lockedBy string) bool {
	e.t.Helper()
	tag, err := e.pool.Exec(e.t.Context(), javaLockSQL, name, "60000 milliseconds", lockedBy)
	if err != nil {
		e.t.Fatalf("java lock %q: %v", name, err)
	}
	return tag.RowsAffected() == 1
}

// A Go job with lock: scheduledTaskName shares the row a Java node names in
// ShedLock's usual style: it skips while Java holds it, then takes that row
// (not one named after its id), and Java is refused while Go runs.
func TestAJobWithALockNameSharesTheJavaNodesRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ft := e.task()
	const lock, javaHost = "scheduledTaskName", "java-host-1"
	if !e.javaLock(lock, javaHost) {
		t.Fatal("the Java node did not get the free lock")
	}
	j := e.job("scheduled-task", jobs.ScopeInstallation, 2*time.Second, ft)
	j.Lock = lock
	e.start(e.options(j))

	st := e.waitIdle("scheduled-task", t0.Add(2*time.Second))
	if st.SkippedElsewhere != 1 || st.Runs != 0 || ft.startCount() != 0 {
		t.Fatalf("while Java holds %s: skipped %d, runs %d, starts %d; want 1, 0, 0", lock, st.SkippedElsewhere, st.Runs, ft.startCount())
	}
	if row := e.lockRow(lock); row.LockedBy != javaHost {
		t.Fatalf("%s held by %q; want %q", lock, row.LockedBy, javaHost)
	}

	e.exec(javaUnlockSQL, lock, "0 milliseconds", javaHost)
	eventually(t, "the Java node's lock to be free", func() bool { return e.lockFree(lock) })
	e.clk.Advance(2 * time.Second)
	ft.waitStarts(t, 1)
	if row := e.lockRow(lock); row.LockedBy != replicaID {
		t.Fatalf("running while %s is held by %q; want %q", lock, row.LockedBy, replicaID)
	}
	if e.javaLock(lock, javaHost) {
		t.Fatal("the Java node got the lock while the Go job runs")
	}
	ft.finish(t, tasks.Result{})
	e.waitIdle("scheduled-task", t0.Add(4*time.Second))

	var names string
	if err := e.pool.QueryRow(t.Context(), `SELECT string_agg(name, ',' ORDER BY name) FROM shedlock`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	if names != lock {
		t.Errorf("lock rows %q; want only %q (never one named after the job id)", names, lock)
	}
}

func TestTwoInstallationJobsOnOneLockAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.job("a", jobs.ScopeInstallation, time.Minute, e.task())
	b := e.job("b", jobs.ScopeInstallation, time.Minute, e.task())
	b.Lock = "a"
	_, err := runner.New(e.options(a, b))
	if err == nil || !strings.Contains(err.Error(), `lock "a" is already taken by job "a"`) {
		t.Fatalf("New with two jobs on lock a: %v; want an error naming both", err)
	}
	c := e.job("c", jobs.ScopeInstallation, time.Minute, e.task())
	c.Lock = strings.Repeat("x", 65)
	if _, err := runner.New(e.options(c)); err == nil || !strings.Contains(err.Error(), "65 characters") {
		t.Fatalf("New with a 65-character lock name: %v; want an error", err)
	}
}
