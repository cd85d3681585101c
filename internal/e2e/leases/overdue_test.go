package e2eleases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestJobsOverdueSeesADutyItsNewOwnerDoesNotRun (issue 22's adversarial
// pass, defect 2): r1 runs the duty on c1 every 2 s; r2, whose
// configuration lists c1 but not the duty, takes the lease when r1 stops
// cleanly. r1's status row of duty@c1 then has no due time and r2 has no
// row: jobs overdue listed nothing (migration 00011). It now exits 1
// naming the duty on c1 once the cluster's last end plus 2 s plus the
// grace has passed (00013), and not before.
func TestJobsOverdueSeesADutyItsNewOwnerDoesNotRun(t *testing.T) {
	t.Parallel()
	const every, grace = 2 * time.Second, 3 * time.Second
	f := newFixture(t, 1, every.String())
	a := f.start("r1")
	f.waitSettled(60*time.Second, "r1")
	replicaproc.Eventually(t, 30*time.Second, "a run of the duty on c1 ended", func() error {
		var n int
		if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM duty WHERE cluster = 'c1' AND ended_at IS NOT NULL`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	other := filepath.Join(t.TempDir(), "studio.yaml")
	conf := "clusters: [c1]\njobs:\n  - id: idle\n    scope: instance\n    every: 1h\n    run:\n      command: [\"true\"]\n"
	if err := os.WriteFile(other, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	b := studioctlBin.Start(t, replicaproc.Options{ID: "r2", DatabaseURL: f.dbURL, Args: []string{"--config", other}, FailOnRace: true, Env: f.env})
	b.WaitReady(t)
	a.Signal(t, syscall.SIGTERM) // a clean stop releases c1; r2 claims it
	a.WaitExit(t, 60*time.Second)
	f.waitSettled(60*time.Second, "r2")
	var lastEnd time.Time
	if err := f.pool.QueryRow(t.Context(), `SELECT max(ended_at) FROM duty WHERE cluster = 'c1'`).Scan(&lastEnd); err != nil {
		t.Fatal(err)
	}
	var found map[string]any
	took := replicaproc.Eventually(t, every+grace+60*time.Second, "jobs overdue to name the duty on c1", func() error {
		code, out := jobsOverdue(t, f.dbURL, grace)
		if code != 1 {
			return fmt.Errorf("exit %d, %v", code, out)
		}
		if len(out) != 1 || out[0]["job_id"] != "duty" || out[0]["scope_key"] != "c1" {
			return fmt.Errorf("exit 1 with %v, want duty on c1 alone", out)
		}
		found = out[0]
		return nil
	})
	at := f.dbNow()
	t.Logf("jobs overdue named the duty %s after r1 stopped: %v", took.Round(time.Millisecond), found)
	// Its due time is the cluster's last end (the run store's, a little
	// after the command's own) plus every; overdue only past the grace.
	if at.Before(lastEnd.Add(every + grace)) {
		t.Errorf("overdue at %s, before the last end %s plus every and the grace", at, lastEnd)
	}
	if s, _ := found["overdue_seconds"].(float64); s <= grace.Seconds() {
		t.Errorf("overdue_seconds %v, want more than the grace", found["overdue_seconds"])
	}
}

// jobsOverdue runs `studioctl jobs overdue --grace G -o json` against
// dbURL, as a monitor would, and returns its exit code and the jobs it
// printed.
func jobsOverdue(t *testing.T, dbURL string, grace time.Duration) (int, []map[string]any) {
	t.Helper()
	cmd := exec.Command(studioctlBin.Path, "jobs", "overdue", "--grace", grace.String(), "-o", "json")
	dir := t.TempDir()
	cmd.Dir = dir
	cmd.Env = studioctlBin.Env(dir, "STUDIO_DATABASE_URL="+dbURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("jobs overdue: %v", err)
	}
	var out []map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("jobs overdue -o json (exit %d): %v\nstdout %s\nstderr %s", code, err, stdout.String(), stderr.String())
	}
	if code != 0 && code != 1 {
		t.Fatalf("jobs overdue exited %d: %s", code, stderr.String())
	}
	return code, out
}
