package e2ejobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// overdueGrace is the grace the test gives `jobs overdue`.
const overdueGrace = 5 * time.Second

// jobsOverdue runs `studioctl jobs overdue --grace 5s -o json` against the
// fixture's database, as a cron entry on another machine would, and
// returns its exit code and the jobs it printed.
func (f *fixture) jobsOverdue() (int, []map[string]any) {
	f.t.Helper()
	cmd := exec.Command(studioctlBin.Path, "jobs", "overdue", "--grace", overdueGrace.String(), "-o", "json")
	dir := f.t.TempDir()
	cmd.Dir = dir
	cmd.Env = studioctlBin.Env(dir, "STUDIO_DATABASE_URL="+f.dbURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatalf("jobs overdue: %v", err)
	}
	var out []map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		f.t.Fatalf("jobs overdue -o json (exit %d): %v\nstdout %s\nstderr %s", code, err, stdout.String(), stderr.String())
	}
	if code != 0 && code != 1 {
		f.t.Fatalf("jobs overdue exited %d: %s", code, stderr.String())
	}
	return code, out
}

// The dead man's switch (issue 22): `jobs overdue` needs no live replica.
// Two replicas run an installation job every 2s; both are killed with -9.
// jobs overdue says nothing is overdue until the job's due time plus the
// grace, then exits 1 naming the job; once one replica is started again
// and runs it, it exits 0 again.
func TestJobsOverdueWithEveryReplicaKilled(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	f := newFixture(t, shJob("od", "installation", every.String(), "", recordRun("0")))
	a, b := f.startReplica("od-1"), f.startReplica("od-2")
	a.WaitReady(t)
	b.WaitReady(t)
	f.waitExecutions("od", time.Time{}, 2, 30*time.Second)
	if code, out := f.jobsOverdue(); code != 0 || len(out) != 0 {
		t.Fatalf("with both replicas running the job: exit %d, %v; want 0 and none", code, out)
	}
	// Kill both between two runs, once each replica's row says when the
	// next is due (a row written during a run says so only once the
	// runner keeps next_fire_at during runs: docs/occurrences-overdue.md).
	due := f.waitIdle([]string{"od"}, 2)
	a.Signal(t, syscall.SIGKILL)
	b.Signal(t, syscall.SIGKILL)
	a.WaitExit(t, 10*time.Second)
	b.WaitExit(t, 10*time.Second)
	killed := f.dbNow()
	// Not yet: the due time (at most 2 s away) plus the 5 s grace.
	if code, out := f.jobsOverdue(); code != 0 && f.dbNow().Before(due.Add(overdueGrace)) {
		t.Fatalf("right after the kill (due %s from now): exit %d, %v; want 0 until the due time plus the grace", due.Sub(killed), code, out)
	}
	var found map[string]any
	took := replicaproc.Eventually(t, every+overdueGrace+30*time.Second, "jobs overdue to exit 1", func() error {
		code, out := f.jobsOverdue()
		if code != 1 {
			return fmt.Errorf("exit %d", code)
		}
		if len(out) != 1 || out[0]["job_id"] != "od" || out[0]["scope_key"] != "" {
			return fmt.Errorf("exit 1 with %v, want od alone", out)
		}
		found = out[0]
		return nil
	})
	at := f.dbNow()
	t.Logf("killed %s before the due time; jobs overdue exited 1 %s after the kill (%s after due + grace): %v",
		due.Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond), at.Sub(due.Add(overdueGrace)).Round(time.Millisecond), found)
	if at.Before(due.Add(overdueGrace)) {
		t.Errorf("overdue at %s, before its due time plus the grace (%s)", at, due.Add(overdueGrace))
	}
	if s, _ := found["overdue_seconds"].(float64); s <= overdueGrace.Seconds() {
		t.Errorf("overdue_seconds %v, want more than the grace", found["overdue_seconds"])
	}

	// One replica comes back under its id (once the killed one counts as
	// gone, as a restart after a crash does) and runs the job: nothing is
	// overdue.
	replicaproc.Eventually(t, 30*time.Second, "od-1 gone", func() error {
		var live bool
		if err := f.pool.QueryRow(t.Context(), `SELECT heartbeat_at > now() - interval '15 seconds' FROM studio_replica WHERE id = 'od-1'`).Scan(&live); err != nil {
			return err
		}
		if live {
			return errors.New("its heartbeat is less than 15s old")
		}
		return nil
	})
	if code, _ := f.jobsOverdue(); code != 1 {
		t.Fatalf("with every replica gone: exit %d, want 1", code)
	}
	restarted := f.dbNow()
	a = f.startReplica("od-1")
	a.WaitReady(t)
	f.waitExecutions("od", restarted, 1, 30*time.Second)
	replicaproc.Eventually(t, 30*time.Second, "jobs overdue to exit 0 again", func() error {
		if code, out := f.jobsOverdue(); code != 0 {
			return fmt.Errorf("exit %d, %v", code, out)
		}
		return nil
	})
}

// waitIdle waits until the n status rows of the jobs are between two runs
// with the next due time at least 0.5 s ahead, and returns the latest.
func (f *fixture) waitIdle(jobs []string, n int) time.Time {
	f.t.Helper()
	var due time.Time
	replicaproc.Eventually(f.t, 30*time.Second, "the rows idle with the next due time ahead", func() error {
		var got int
		if err := f.pool.QueryRow(f.t.Context(), `SELECT count(*), coalesce(max(next_fire_at), 'epoch') FROM studio_job_status
WHERE job_id = ANY($1) AND NOT running AND next_fire_at > now() + interval '500 milliseconds'`, jobs).Scan(&got, &due); err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%d of %d rows idle with the next due time 0.5 s ahead", got, n)
		}
		return nil
	})
	return due
}

// A job stays watched after every replica stopped cleanly: the stop keeps
// the status rows and their due times, and jobs overdue exits 1 once the
// due time plus the grace has passed.
func TestJobsOverdueWithEveryReplicaStoppedCleanly(t *testing.T) {
	t.Parallel()
	// 4 s: both rows must be idle with their next due time 0.5 s ahead at
	// once, between a run's end flushed (up to seconds late at load 25)
	// and the next; at 2 s a local CI run never saw that within 30 s.
	const every = 4 * time.Second
	f := newFixture(t, shJob("oc", "installation", every.String(), "", recordRun("0")),
		shJob("oc-inst", "instance", every.String(), "", recordRun("0")))
	a := f.startReplica("oc-1")
	a.WaitReady(t)
	f.waitExecutions("oc", time.Time{}, 1, 30*time.Second)
	f.waitExecutions("oc-inst", time.Time{}, 1, 30*time.Second)
	f.waitIdle([]string{"oc", "oc-inst"}, 2)
	stopAll(t, []*replicaproc.Proc{a})
	var found []map[string]any
	replicaproc.Eventually(t, every+overdueGrace+30*time.Second, "jobs overdue to exit 1", func() error {
		code, out := f.jobsOverdue()
		if code != 1 || len(out) != 2 {
			return fmt.Errorf("exit %d, %v", code, out)
		}
		found = out
		return nil
	})
	// The installation job, and the instance job of the stopped replica
	// (no replica is live).
	if found[0]["job_id"] != "oc" || found[0]["scope_key"] != "" || found[1]["job_id"] != "oc-inst" || found[1]["scope_key"] != "oc-1" {
		t.Fatalf("overdue: %v, want oc and oc-inst on oc-1", found)
	}
}
