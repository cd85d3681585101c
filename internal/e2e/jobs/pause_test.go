package e2ejobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// pauseSlack is how long after a pause's commit a due time may still run:
// a tick that read the setting just before the job.settings signal
// arrived (a loaded machine delays the signal).
const pauseSlack = 1500 * time.Millisecond

// `jobs pause --for 3s` on two real replicas: the due times in the pause
// are skipped/paused, none from its end on; the job runs again by itself
// after the end; and the resume at the end is audited once, by one of the
// replicas, although both watched the end (issue 24, part 6).
func TestAPauseForThreeSecondsEndsByItself(t *testing.T) {
	t.Parallel()
	f := newFixture(t, shJob("pz", "installation", "1s", "", recordRun("0.05")))
	p1, p2 := f.startReplica("pz-1"), f.startReplica("pz-2")
	p1.WaitReady(t)
	p2.WaitReady(t)
	ctx := context.Background()
	replicaproc.Eventually(t, 60*time.Second, "2 runs of pz before the pause", func() error {
		if runs, err := f.runs("pz"); err != nil || len(runs) < 2 {
			return fmt.Errorf("%d so far (%v)", len(runs), err)
		}
		return nil
	})

	out, errOut, code := studioctlBin.Run(t, f.dbURL, "jobs", "pause", "pz", "--for", "3s", "--reason", "e2e", "--yes")
	if code != 0 {
		t.Fatalf("jobs pause: exit %d\n%s%s", code, out, errOut)
	}
	var pausedAt, until time.Time
	if err := f.pool.QueryRow(ctx, `SELECT a.at, g.paused_until FROM studio_audit a, studio_job_setting g
WHERE a.action = 'jobs.pause' AND a.target = 'pz' AND g.job_id = 'pz'`).Scan(&pausedAt, &until); err != nil {
		t.Fatal(err)
	}
	if d := until.Sub(pausedAt); d < 3*time.Second || d > 4*time.Second {
		t.Fatalf("paused at %s until %s: %v, want 3s from the database's now", pausedAt, until, d)
	}

	// It runs again by itself: a due time from the end on ran.
	var after time.Time
	replicaproc.Eventually(t, 60*time.Second, "a run of pz due after the pause's end", func() error {
		return f.pool.QueryRow(ctx, `SELECT min(nominal_at) FROM studio_job_run WHERE job_id = 'pz' AND nominal_at >= $1 AND finished_at IS NOT NULL
HAVING count(*) > 0`, until).Scan(&after)
	})
	// One resume, at the end, by one replica.
	var resumes int
	var actor string
	var resumedAt time.Time
	replicaproc.Eventually(t, 30*time.Second, "the resume's audit row", func() error {
		return f.pool.QueryRow(ctx, `SELECT count(*), min(actor), min(at) FROM studio_audit
WHERE action = 'jobs.resume' AND target = 'pz' AND reason = 'its pause ended' HAVING count(*) > 0`).Scan(&resumes, &actor, &resumedAt)
	})
	if actor != "replica:pz-1" && actor != "replica:pz-2" {
		t.Errorf("resume audited by %q; want one of the replicas", actor)
	}
	if resumedAt.Before(until) || resumedAt.Sub(until) > 10*time.Second {
		t.Errorf("resumed at %s; the pause ended at %s", resumedAt, until)
	}
	// Both replicas' watches fired at the end; a run after it has ended,
	// so both have written or found nothing.
	var all int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_audit WHERE action = 'jobs.resume'`).Scan(&all); err != nil || all != 1 {
		t.Errorf("%d resume audit rows (%v); want exactly 1", all, err)
	}

	// The due times inside the pause were skipped/paused, none from the
	// end on; none ran after the slack. A due time just before the pause
	// that a loaded replica came to only after the pause began was rightly
	// skipped too: what counts is that the skip was decided in the pause.
	rows, err := f.pool.Query(ctx, `SELECT nominal_at, recorded_at FROM studio_occurrences
WHERE job_id = 'pz' AND outcome = 'skipped' AND reason = 'paused' ORDER BY nominal_at`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var nominal, recorded time.Time
		if err := rows.Scan(&nominal, &recorded); err != nil {
			t.Fatal(err)
		}
		n++
		if !nominal.Before(until) {
			t.Errorf("skipped/paused due time %s at or after the pause's end %s", nominal, until)
		}
		if nominal.Before(pausedAt) && recorded.Before(pausedAt) {
			t.Errorf("skipped/paused due time %s, decided at %s before the pause began at %s", nominal, recorded, pausedAt)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("no skipped/paused due time in a 3 s pause of a job every 1s")
	}
	var ranInPause int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE job_id = 'pz' AND nominal_at >= $1 AND nominal_at < $2`,
		pausedAt.Add(pauseSlack), until).Scan(&ranInPause); err != nil || ranInPause != 0 {
		t.Errorf("%d runs due inside the pause (%v); want none", ranInPause, err)
	}
	t.Logf("paused %s..%s: %d due times skipped/paused, resumed by %s at %s, first run after due %s",
		pausedAt.Format(time.StampMilli), until.Format(time.StampMilli), n, actor, resumedAt.Format(time.StampMilli), after.Format(time.StampMilli))
}
