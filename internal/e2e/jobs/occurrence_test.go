package e2ejobs

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// occRow is a row of the studio_occurrences view.
type occRow struct {
	Outcome, Reason, Replica string
	Nominal                  time.Time
	Last                     *time.Time
	Count                    int
	Seq                      *int64
	Holder, PausedBy         *string
	HolderKnown              *bool
}

// occurrences reads job's occurrences of outcome (all: ""), oldest first.
func (f *fixture) occurrences(job, outcome string) ([]occRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT outcome, coalesce(reason, ''), coalesce(replica_id, ''), nominal_at, last_nominal_at, count, seq, holder, paused_by, holder_known
FROM studio_occurrences WHERE job_id = $1 AND ($2 = '' OR outcome = $2) ORDER BY nominal_at`, job, outcome)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []occRow
	for rows.Next() {
		var o occRow
		if err := rows.Scan(&o.Outcome, &o.Reason, &o.Replica, &o.Nominal, &o.Last, &o.Count, &o.Seq, &o.Holder, &o.PausedBy, &o.HolderKnown); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// waitOccurrences waits until job has at least n occurrences of outcome
// (and reason, unless "") and returns them.
func (f *fixture) waitOccurrences(job, outcome, reason string, n int, d time.Duration) []occRow {
	f.t.Helper()
	var got []occRow
	replicaproc.Eventually(f.t, d, fmt.Sprintf("%d %s/%s occurrences of %s", n, outcome, reason, job), func() error {
		list, err := f.occurrences(job, outcome)
		if err != nil {
			return err
		}
		got = got[:0]
		for _, o := range list {
			if reason == "" || o.Reason == reason {
				got = append(got, o)
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d so far", len(got))
		}
		return nil
	})
	return got
}

// recordOccurrence is a command that records the run's STUDIO_SCHEDULED_AT
// and STUDIO_OCCURRENCE_KEY as it got them.
const recordOccurrence = "exec " + psqlExp + `"INSERT INTO occ_exp(seq, replica, scheduled_at, occurrence_key) VALUES ($STUDIO_RUN_SEQ, '$STUDIO_REPLICA_ID', '$STUDIO_SCHEDULED_AT', '$STUDIO_OCCURRENCE_KEY')"`

// TestOccurrencesRecordedByTwoReplicas: two real replicas share four
// installation jobs every 1s. A run's STUDIO_SCHEDULED_AT and
// STUDIO_OCCURRENCE_KEY, as its command recorded them, are the strings its
// occurrence holds. A paused job gets one skipped/paused occurrence per
// due time (both replicas record each, the table keeps one: they compute
// the same key) naming who paused it. A lock that no replica wrote (a Java
// node's) gives skipped/held-elsewhere naming that holder. A replica
// killed with -9 mid-run leaves that run missed/lost.
func TestOccurrencesRecordedByTwoReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t,
		shJob("occ", "installation", "1s", "", recordOccurrence),
		shJob("occ-paused", "installation", "1s", "", recordRun("0.1")),
		shJob("occ-java", "installation", "1s", "", recordRun("0.1")),
		shJob("occ-lost", "installation", "1s", "60s", recordRun("60")),
	)
	f.exec(`CREATE TABLE occ_exp (seq bigint PRIMARY KEY, replica text NOT NULL, scheduled_at text NOT NULL, occurrence_key text NOT NULL)`)
	f.pauseJob("occ-paused")
	f.exec(`INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('occ-java', now() + interval '1 hour', now(), 'java-node-3')`)
	// occ-paused has run before (it is on the shared grid: the last end + k × every).
	f.exec(`INSERT INTO studio_job_schedule (job_id, last_ended_at) VALUES ('occ-paused', now() - interval '500 milliseconds')`)
	p1, p2 := f.startReplica("occ-1"), f.startReplica("occ-2")
	p1.WaitReady(t)
	p2.WaitReady(t)

	// The nominal time and key the command got are the occurrence's.
	replicaproc.Eventually(t, 60*time.Second, "3 recorded runs of occ", func() error {
		var n int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM occ_exp`).Scan(&n); err != nil {
			return err
		}
		if n < 3 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	rows, err := f.pool.Query(context.Background(), `SELECT e.seq, e.scheduled_at, e.occurrence_key, o.nominal_at, coalesce(o.outcome, '')
FROM occ_exp e LEFT JOIN studio_occurrences o ON o.job_id = 'occ' AND o.seq = e.seq ORDER BY e.seq`)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for rows.Next() {
		var seq int64
		var at, key, outcome string
		var nominal *time.Time
		if err := rows.Scan(&seq, &at, &key, &nominal, &outcome); err != nil {
			t.Fatal(err)
		}
		if nominal == nil {
			continue // its run row is not flushed yet
		}
		checked++
		if want := jobs.FormatNominal(*nominal); at != want || key != jobs.OccurrenceKey("occ", "", *nominal) || outcome != jobs.OccurrenceRan {
			t.Errorf("run %d: the command got %q and %q; its occurrence is %s at %s", seq, at, key, outcome, want)
		}
	}
	rows.Close()
	if checked == 0 {
		t.Errorf("no run of occ had its occurrence recorded")
	}
	// The replica that found the other's lock skipped nothing: the
	// occurrence ran there.
	var skips int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_occurrence WHERE job_id = 'occ'`).Scan(&skips); err != nil || skips != 0 {
		t.Errorf("%d skips or misses of occ (%v); want none", skips, err)
	}

	// One skipped/paused occurrence per due time, on the shared grid.
	paused := f.waitOccurrences("occ-paused", "skipped", "paused", 5, 60*time.Second)
	for i, o := range paused {
		if o.PausedBy == nil || *o.PausedBy != testAppName {
			t.Errorf("paused occurrence %v names %v; want %s", o.Nominal, o.PausedBy, testAppName)
		}
		if i > 0 {
			// From the last due time of the row before: a start that
			// took more than a due time records those that fell while no
			// replica was up and the job was paused as one row (count,
			// last_nominal_at).
			prev := paused[i-1].Nominal
			if paused[i-1].Last != nil {
				prev = *paused[i-1].Last
			}
			if step := o.Nominal.Sub(prev); step != time.Second {
				t.Errorf("paused occurrences %v and %v are %v apart; want exactly one due time (1s): the replicas computed different keys, or a due time has none",
					prev, o.Nominal, step)
			}
		}
	}
	var byReplica int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(DISTINCT replica_id) FROM studio_occurrence WHERE job_id = 'occ-paused'`).Scan(&byReplica); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d paused occurrences from %v to %v, recorded by %d replica(s)", len(paused), paused[0].Nominal, paused[len(paused)-1].Nominal, byReplica)

	// A Java node's lock.
	for _, o := range f.waitOccurrences("occ-java", "skipped", "held-elsewhere", 2, 60*time.Second) {
		if o.Holder == nil || *o.Holder != "java-node-3" || o.HolderKnown == nil || *o.HolderKnown {
			t.Errorf("held-elsewhere occurrence %v: holder %v, known %v; want java-node-3, not a known replica", o.Nominal, o.Holder, o.HolderKnown)
		}
	}
	if runs, err := f.runs("occ-java"); err != nil || len(runs) != 0 {
		t.Errorf("occ-java ran %d times (%v) while the Java node held its lock", len(runs), err)
	}

	// A replica killed with -9 while it runs occ-lost.
	var lost execution
	replicaproc.Eventually(t, 60*time.Second, "occ-lost running", func() error {
		return f.pool.QueryRow(context.Background(), `SELECT seq, replica FROM exp WHERE job_id = 'occ-lost' ORDER BY seq LIMIT 1`).
			Scan(&lost.Seq, &lost.Replica)
	})
	victim := p1
	if lost.Replica == p2.ID() {
		victim = p2
	}
	replicaproc.Eventually(t, 30*time.Second, "occ-lost's run row", func() error {
		if runs, err := f.runs("occ-lost"); err != nil || len(runs) == 0 {
			return fmt.Errorf("not yet (%v)", err)
		}
		return nil
	})
	victim.Signal(t, syscall.SIGKILL)
	victim.WaitExit(t, 30*time.Second)
	got := f.waitOccurrences("occ-lost", "missed", "lost", 1, 60*time.Second)
	if got[0].Seq == nil || *got[0].Seq != lost.Seq || got[0].Replica != victim.ID() {
		t.Errorf("missed/lost %+v; want the run %d of %s", got[0], lost.Seq, victim.ID())
	}
}

// TestAStretchWithNoReplicaUpIsOneMissedOccurrence: every replica stops for
// 12 due times (every 2s), then one starts: one missed/down occurrence with
// the count of due times that passed (12 ± 1 and what the start took),
// then a ran occurrence, under both missed: policies.
func TestAStretchWithNoReplicaUpIsOneMissedOccurrence(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	once := shJob("md-once", "installation", every.String(), "", recordRun("0.1"))
	skip := shJob("md-skip", "installation", every.String(), "", recordRun("0.1"))
	skip.Missed = "skip"
	f := newFixture(t, once, skip)
	p := f.startReplica("md-1")
	p.WaitReady(t)
	f.waitExecutions("md-once", time.Time{}, 1, 60*time.Second)
	f.waitExecutions("md-skip", time.Time{}, 1, 60*time.Second)
	stopAll(t, []*replicaproc.Proc{p})
	ends := map[string]time.Time{}
	rows, err := f.pool.Query(context.Background(), `SELECT job_id, last_ended_at FROM studio_job_schedule`)
	if err != nil {
		t.Fatal(err)
	}
	latest := time.Time{}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		ends[id] = at
		if at.After(latest) {
			latest = at
		}
	}
	rows.Close()
	// 12 due times pass with no replica up.
	replicaproc.Eventually(t, 60*time.Second, "12 due times with no replica", func() error {
		if d := f.dbNow().Sub(latest); d < 12*every+every/4 {
			return fmt.Errorf("%v so far", d)
		}
		return nil
	})
	p2 := f.startReplica("md-2")
	p2.WaitReady(t)
	var started time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT started_at FROM studio_replica WHERE id = 'md-2'`).Scan(&started); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		job     string
		runOnce bool
	}{{"md-once", true}, {"md-skip", false}} {
		end := ends[c.job]
		// The due times that passed by the replica's start (it reads them
		// a little later: one more may count).
		passed := int(started.Sub(end) / every)
		want := passed
		if c.runOnce {
			want-- // the run at start is the last one's occurrence
		}
		down := f.waitOccurrences(c.job, "missed", "down", 1, 30*time.Second)
		ran := func() []occRow {
			var r []occRow
			replicaproc.Eventually(t, 30*time.Second, "a ran occurrence of "+c.job+" after the stretch", func() error {
				list, err := f.occurrences(c.job, "ran")
				if err != nil {
					return err
				}
				r = r[:0]
				for _, o := range list {
					if o.Nominal.After(end) {
						r = append(r, o)
					}
				}
				if len(r) == 0 {
					return fmt.Errorf("none yet")
				}
				return nil
			})
			return r
		}()
		d := down[0]
		last := d.Nominal
		if d.Last != nil {
			last = *d.Last
		}
		t.Logf("%s: stopped %v after its last end; missed/down %d from %v to %v; then ran nominal %v", c.job,
			started.Sub(end).Round(time.Millisecond), d.Count, d.Nominal.Sub(end), last.Sub(end), ran[0].Nominal.Sub(end))
		if len(down) != 1 || d.Count < want || d.Count > want+1 || d.Count < 11 {
			t.Errorf("%s: %d missed/down rows, the first of count %d; want one of %d (+1)", c.job, len(down), d.Count, want)
		}
		if !d.Nominal.Equal(end.Add(every).Truncate(time.Millisecond)) {
			t.Errorf("%s: the stretch starts at %v; want the first due time after the last end, %v", c.job, d.Nominal, end.Add(every))
		}
		// No due time is left out: run-once runs the last one that passed
		// at start, skip the next one.
		if !ran[0].Nominal.Equal(last.Add(every)) {
			t.Errorf("%s: the first run after the stretch has nominal time %v; want the due time after the stretch's last (%v)", c.job, ran[0].Nominal, last)
		}
	}
}

// TestAStretchAfterAReplicaKilledMidRunStartsAtItsDeath: the only replica
// is killed with -9 while it runs an installation job (every 2s, the run a
// minute long), after a heartbeat two due times into the run, and another
// starts once the first is gone. The killed
// run is missed/lost; the missed/down stretch starts at the first due
// time after the killed replica's last heartbeat, not inside the run
// (defect 4 of issue 22's adversarial pass: it started at the lost run's
// next due time, while its replica was live and held the job, and `jobs
// why` there told a live replica beside "no live replica hosted it").
func TestAStretchAfterAReplicaKilledMidRunStartsAtItsDeath(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	// The first run ends at once (the shared schedule gets an end); every
	// later one takes a minute.
	f := newFixture(t, shJob("kd", "installation", every.String(), "5m",
		`if [ -e "$EXP_DIR/kd-first" ]; then exec sleep 60; fi; touch "$EXP_DIR/kd-first"`))
	p := f.startReplica("kd-1")
	p.WaitReady(t)
	var started time.Time
	// The second run: a running row after the first run's end. The first
	// run's own running row is flushed before its end, and a loaded CI run
	// took it for the second, killed kd-1 before the second run's row was
	// written, and waited for a lost run that never was.
	replicaproc.Eventually(t, 60*time.Second, "kd's second run running", func() error {
		return f.pool.QueryRow(context.Background(), `SELECT r.started_at FROM studio_job_run r
WHERE r.job_id = 'kd' AND r.outcome = 'running'
  AND r.started_at > (SELECT max(p.finished_at) FROM studio_job_run p WHERE p.job_id = 'kd' AND p.outcome = 'succeeded')`).Scan(&started)
	})
	// Its replica lives on while it runs, for more than a due time.
	replicaproc.Eventually(t, 60*time.Second, "a heartbeat of kd-1 two due times after the run's start", func() error {
		var beat time.Time
		if err := f.pool.QueryRow(context.Background(), `SELECT heartbeat_at FROM studio_replica WHERE id = 'kd-1'`).Scan(&beat); err != nil {
			return err
		}
		if beat.Sub(started) < 2*every {
			return fmt.Errorf("last heartbeat %v after the start", beat.Sub(started))
		}
		return nil
	})
	p.Signal(t, syscall.SIGKILL)
	p.WaitExit(t, 30*time.Second)
	var beat time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT heartbeat_at FROM studio_replica WHERE id = 'kd-1'`).Scan(&beat); err != nil {
		t.Fatal(err)
	}
	// Gone (no heartbeat for liveness.GoneAfter), and a few due times more.
	replicaproc.Eventually(t, 60*time.Second, "kd-1 gone", func() error {
		if d := f.dbNow().Sub(beat); d < liveness.GoneAfter+3*every {
			return fmt.Errorf("%v since its last heartbeat", d)
		}
		return nil
	})
	p2 := f.startReplica("kd-2")
	p2.WaitReady(t)
	lost := f.waitOccurrences("kd", "missed", "lost", 1, 30*time.Second)
	down := f.waitOccurrences("kd", "missed", "down", 1, 30*time.Second)
	d := down[0]
	t.Logf("lost run due %v, started %v; kd-1's last heartbeat %v; missed/down %d from %v", lost[0].Nominal, started, beat, d.Count, d.Nominal)
	if len(down) != 1 || !d.Nominal.After(beat) || d.Nominal.After(beat.Add(every)) {
		t.Errorf("%d missed/down rows, the first from %v; want one from the first due time after kd-1's last heartbeat %v (within %v)",
			len(down), d.Nominal, beat, every)
	}
	if !lost[0].Nominal.Before(d.Nominal) {
		t.Errorf("the lost run is due %v, after the stretch's start %v", lost[0].Nominal, d.Nominal)
	}
}

// TestAJobPausedWhileEveryReplicaWasDownIsPausedNotMissed: the only replica
// stops; three due times later the job is paused; three more later
// another replica starts. The due times before the pause are one
// missed/down row, those after it one skipped/paused row naming who paused
// it, and nothing runs (defect 5 of issue 22's adversarial pass: all of
// them were missed/down, and the job ran at start).
func TestAJobPausedWhileEveryReplicaWasDownIsPausedNotMissed(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	f := newFixture(t, shJob("pd", "installation", every.String(), "", recordRun("0.1")))
	p := f.startReplica("pd-1")
	p.WaitReady(t)
	f.waitExecutions("pd", time.Time{}, 1, 60*time.Second)
	stopAll(t, []*replicaproc.Proc{p})
	var end time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT last_ended_at FROM studio_job_schedule WHERE job_id = 'pd'`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	waitDB := func(d time.Duration) {
		replicaproc.Eventually(t, 60*time.Second, fmt.Sprintf("%v after the last end", d), func() error {
			if got := f.dbNow().Sub(end); got < d {
				return fmt.Errorf("%v so far", got)
			}
			return nil
		})
	}
	waitDB(3*every + every/2)
	f.pauseJob("pd")
	var pausedAt time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT updated_at FROM studio_job_setting WHERE job_id = 'pd'`).Scan(&pausedAt); err != nil {
		t.Fatal(err)
	}
	replicaproc.Eventually(t, 60*time.Second, "3 due times after the pause", func() error {
		if got := f.dbNow().Sub(pausedAt); got < 3*every+every/2 {
			return fmt.Errorf("%v so far", got)
		}
		return nil
	})
	runsBefore, err := f.runs("pd")
	if err != nil {
		t.Fatal(err)
	}
	p2 := f.startReplica("pd-2")
	p2.WaitReady(t)
	paused := f.waitOccurrences("pd", "skipped", "paused", 1, 30*time.Second)
	down := f.waitOccurrences("pd", "missed", "down", 1, 30*time.Second)
	t.Logf("last end %v, paused at %v; missed/down %d from %v; skipped/paused %d from %v", end, pausedAt, down[0].Count, down[0].Nominal, paused[0].Count, paused[0].Nominal)
	// The due times before the pause (3 unless the machine was slow to
	// write it).
	wantDown := int(pausedAt.Sub(end) / every)
	if len(down) != 1 || !down[0].Nominal.Equal(end.Add(every).Truncate(time.Millisecond)) || down[0].Count != wantDown {
		t.Errorf("missed/down %+v; want one of %d from the first due time after the last end", down, wantDown)
	}
	if p := paused[0]; p.Nominal.Before(pausedAt) || p.Nominal.After(pausedAt.Add(every)) || p.Count < 3 || p.PausedBy == nil || *p.PausedBy != testAppName {
		t.Errorf("skipped/paused %+v; want one from the first due time after the pause, of 3 or more, by %s", p, testAppName)
	}
	if runs, err := f.runs("pd"); err != nil || len(runs) != len(runsBefore) {
		t.Errorf("%d runs after the start (%v); want none: the job is paused", len(runs)-len(runsBefore), err)
	}
}
