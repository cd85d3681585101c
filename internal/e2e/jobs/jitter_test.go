package e2ejobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// jitterFor picks a job id whose jittered minutely cron (jitter 59s) is
// next due 15 to 25 s after now, so the test waits seconds, not a minute,
// and returns it with that due time.
func jitterFor(t *testing.T, now time.Time) (string, time.Time) {
	t.Helper()
	for i := 0; i < 10_000; i++ {
		id := fmt.Sprintf("jit-%d", i)
		off := jobs.JitterOffset(59*time.Second, id, "")
		due := now.Add(-off).Truncate(time.Minute).Add(time.Minute + off)
		if lead := due.Sub(now); lead >= 15*time.Second && lead <= 25*time.Second {
			return id, due
		}
	}
	t.Fatal("no job id with a due time 15 to 25 s ahead")
	return "", time.Time{}
}

// TestJitterAndDeadlineOnTwoReplicas: two real replicas.
//   - A minutely cron with jitter: 59s runs once, at its minute plus the
//     job's offset (the same on both replicas: both status rows show that
//     next fire before it), and that shifted time is its nominal time, its
//     STUDIO_SCHEDULED_AT and its occurrence key.
//   - A job with deadline: 2s whose lock a Java node holds: no run, and its
//     due times are skipped/deadline naming the holder (not
//     held-elsewhere: the replicas tried the lock again until the deadline).
func TestJitterAndDeadlineOnTwoReplicas(t *testing.T) {
	t.Parallel()
	id, due := jitterFor(t, time.Now())
	jit := jobConf{ID: id, Scope: "installation", Cron: "* * * * *", Jitter: "59s", Run: runConf{Command: []string{"sh", "-c", recordOccurrence}}}
	dl := shJob("deadline", "installation", "2s", "", recordRun("0"))
	dl.Deadline = "2s"
	f := newFixture(t, jit, dl)
	f.exec(`CREATE TABLE occ_exp (seq bigint PRIMARY KEY, replica text NOT NULL, scheduled_at text NOT NULL, occurrence_key text NOT NULL)`)
	f.exec(`INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('deadline', now() + interval '1 hour', now(), 'java-node-3')`)
	p1, p2 := f.startReplica("jit-1"), f.startReplica("jit-2")
	p1.WaitReady(t)
	p2.WaitReady(t)

	// Both replicas wait for the same shifted time: a minute plus the
	// job's offset (due, unless a slow start passed it: then a minute on).
	off := jobs.JitterOffset(59*time.Second, id, "")
	var want time.Time
	replicaproc.Eventually(t, 30*time.Second, "both replicas' next fire of "+id, func() error {
		var nexts []*time.Time
		if err := f.pool.QueryRow(context.Background(), `SELECT array_agg(next_fire_at ORDER BY replica_id) FROM studio_job_status
WHERE job_id = $1 AND replica_id IN ('jit-1', 'jit-2')`, id).Scan(&nexts); err != nil {
			return err
		}
		if len(nexts) != 2 || nexts[0] == nil || nexts[1] == nil || !nexts[0].Equal(*nexts[1]) {
			return fmt.Errorf("next fires %v, want two equal ones", nexts)
		}
		if shift := nexts[0].Sub(nexts[0].Truncate(time.Minute)); shift != off {
			return fmt.Errorf("next fire %v is %s past its minute, want the offset %s", nexts[0], shift, off)
		}
		want = nexts[0].UTC()
		return nil
	})
	if !want.Equal(jobs.Nominal(due)) {
		t.Logf("the replicas started after %v; the next shifted time is %v", due, want)
	}

	// One run, at the shifted time, which the command got as its own.
	var at, key string
	var nominal time.Time
	var runs int
	replicaproc.Eventually(t, 90*time.Second, "the run of "+id+" at "+want.String(), func() error {
		return f.pool.QueryRow(context.Background(), `SELECT e.scheduled_at, e.occurrence_key, r.nominal_at, (SELECT count(*) FROM studio_job_run WHERE job_id = $1)
FROM occ_exp e JOIN studio_job_run r ON r.seq = e.seq ORDER BY e.seq LIMIT 1`, id).Scan(&at, &key, &nominal, &runs)
	})
	if !nominal.Equal(want) || at != jobs.FormatNominal(want) || key != jobs.OccurrenceKey(id, "", want) || runs != 1 {
		t.Errorf("%s: %d runs, nominal %v, the command got %q and %q; want one run at %v (the minute plus %s)",
			id, runs, nominal, at, key, want, off)
	}

	// The held lock past the deadline: skipped/deadline naming its holder.
	replicaproc.Eventually(t, 30*time.Second, "a skipped/deadline occurrence", func() error {
		var n int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_occurrence
WHERE job_id = 'deadline' AND outcome = 'skipped' AND reason = 'deadline' AND holder = 'java-node-3'`).Scan(&n); err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	var other, ran int
	if err := f.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM studio_occurrence WHERE job_id = 'deadline' AND reason <> 'deadline'),
(SELECT count(*) FROM studio_job_run WHERE job_id = 'deadline')`).Scan(&other, &ran); err != nil || other != 0 || ran != 0 {
		t.Errorf("deadline: %d other occurrences and %d runs (%v); want neither", other, ran, err)
	}
}
