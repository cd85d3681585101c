package e2ejobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestThreeReplicasCatchUpAStretchOnce: an installation job every 1s with
// missed: catch-up and catch_up {max: 3, within: 1h}. Its only replica
// stops; about 8 due times pass; then three replicas start at once. The
// three newest due times of the stretch run, each exactly once, on one
// replica, one after another (the command's own start after the previous
// one's end), oldest first, each with its own nominal time as the command
// got it (STUDIO_SCHEDULED_AT) and as `jobs occurrences` shows it (ran);
// the due times before them are one missed/down row that does not claim
// them; and the live schedule follows the last caught-up run's end.
func TestThreeReplicasCatchUpAStretchOnce(t *testing.T) {
	t.Parallel()
	const every, max = time.Second, 3
	job := shJob("cu", "installation", every.String(), "", "exec "+psqlExp+
		`"INSERT INTO cu_exp(seq, replica, scheduled_at, started_at) VALUES ($STUDIO_RUN_SEQ, '$STUDIO_REPLICA_ID', '$STUDIO_SCHEDULED_AT', clock_timestamp())"`+
		` -c "SELECT pg_sleep(0.3)" -o /dev/null -c "UPDATE cu_exp SET ended_at = clock_timestamp() WHERE seq = $STUDIO_RUN_SEQ"`)
	job.Missed, job.CatchUp = "catch-up", map[string]string{"max": fmt.Sprint(max), "within": "1h"}
	f := newFixture(t, job)
	f.exec(`CREATE TABLE cu_exp (seq bigint PRIMARY KEY, replica text NOT NULL, scheduled_at text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`)
	p := f.startReplica("cu-1")
	p.WaitReady(t)
	replicaproc.Eventually(t, 60*time.Second, "a first run of cu", func() error {
		runs, err := f.runs("cu")
		if err != nil || len(runs) == 0 || runs[0].FinishedAt == nil {
			return fmt.Errorf("none ended yet (%v)", err)
		}
		return nil
	})
	stopAll(t, []*replicaproc.Proc{p})
	var end time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT last_ended_at FROM studio_job_schedule WHERE job_id = 'cu'`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	replicaproc.Eventually(t, 60*time.Second, "8 due times with no replica", func() error {
		if d := f.dbNow().Sub(end); d < 8*every+every/4 {
			return fmt.Errorf("%v so far", d)
		}
		return nil
	})
	ps := []*replicaproc.Proc{f.startReplica("cu-1"), f.startReplica("cu-2"), f.startReplica("cu-3")}
	for _, p := range ps {
		p.WaitReady(t)
	}
	// The caught-up runs: those of a nominal time in the stretch.
	type run struct {
		seq                int64
		replica, scheduled string
		nominal            time.Time
		started, ended     time.Time
	}
	var caught []run
	var next *run
	replicaproc.Eventually(t, 60*time.Second, "the caught-up runs and the next live one", func() error {
		rows, err := f.pool.Query(context.Background(), `SELECT r.seq, r.replica_id, e.scheduled_at, r.nominal_at, e.started_at, e.ended_at
FROM studio_job_run r JOIN cu_exp e USING (seq) WHERE r.job_id = 'cu' AND r.nominal_at > $1 AND e.ended_at IS NOT NULL ORDER BY e.started_at`, end)
		if err != nil {
			return err
		}
		defer rows.Close()
		caught, next = caught[:0], nil
		var all []run
		for rows.Next() {
			var r run
			if err := rows.Scan(&r.seq, &r.replica, &r.scheduled, &r.nominal, &r.started, &r.ended); err != nil {
				return err
			}
			all = append(all, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(all) < max+1 {
			return fmt.Errorf("%d runs after the stretch so far", len(all))
		}
		caught, next = all[:max], &all[max]
		return nil
	})
	down := f.waitOccurrences("cu", "missed", "down", 1, 30*time.Second)
	var started time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT started_at FROM studio_replica WHERE id = $1`, caught[0].replica).Scan(&started); err != nil {
		t.Fatal(err)
	}
	d := down[0]
	last := d.Nominal
	if d.Last != nil {
		last = *d.Last
	}
	t.Logf("stopped %v after the last end; missed/down %d from +%v to +%v; caught up +%v, +%v, +%v on %s; next +%v",
		started.Sub(end).Round(time.Millisecond), d.Count, d.Nominal.Sub(end), last.Sub(end),
		caught[0].nominal.Sub(end), caught[1].nominal.Sub(end), caught[2].nominal.Sub(end), caught[0].replica, next.nominal.Sub(end))
	for i, r := range caught {
		if r.replica != caught[0].replica {
			t.Errorf("caught-up run %d ran on %s, run 1 on %s; want one replica", i+1, r.replica, caught[0].replica)
		}
		if r.scheduled != jobs.FormatNominal(r.nominal) {
			t.Errorf("caught-up run %d: the command got STUDIO_SCHEDULED_AT %s, the run's nominal time is %s", i+1, r.scheduled, jobs.FormatNominal(r.nominal))
		}
		// Before the catch-up began (the runner starts a little after the
		// replica registers, so a due time may fall between the two).
		if off := r.nominal.Sub(end.Truncate(time.Millisecond)); off%every != 0 || off <= 0 || r.nominal.After(caught[0].started) {
			t.Errorf("caught-up run %d has nominal time %v (+%v): want a due time of the stretch (last end + k × %v, before the catch-up)", i+1, r.nominal, off, every)
		}
		if i > 0 {
			if !r.nominal.Equal(caught[i-1].nominal.Add(every)) {
				t.Errorf("caught-up run %d has nominal time %v after %v: want the next due time, oldest first", i+1, r.nominal, caught[i-1].nominal)
			}
			if r.started.Before(caught[i-1].ended) {
				t.Errorf("caught-up run %d started at %v, before run %d ended at %v", i+1, r.started, i, caught[i-1].ended)
			}
		}
	}
	// The newest due times of the stretch: the start took the last one
	// before it (a replica reads its start a little later: one more may).
	if passed := started.Sub(end) / every; caught[max-1].nominal.Sub(end) < (passed-1)*every {
		t.Errorf("the last caught-up due time is +%v; %d due times had passed at the start: want the newest", caught[max-1].nominal.Sub(end), passed)
	}
	// The rest of the stretch: one row, up to the first caught-up one.
	if len(down) != 1 || !d.Nominal.Equal(end.Add(every).Truncate(time.Millisecond)) || !last.Equal(caught[0].nominal.Add(-every)) ||
		d.Count != int(last.Sub(d.Nominal)/every)+1 || d.Count < 5 {
		t.Errorf("%d missed/down rows, the first from %v to %v of count %d; want one from the first due time after the last end (%v) to the one before the first caught up (%v)",
			len(down), d.Nominal, last, d.Count, end.Add(every), caught[0].nominal.Add(-every))
	}
	// Each caught-up due time ran once (ran in jobs occurrences), and the
	// live schedule follows the last caught-up run's end.
	ran, err := f.occurrences("cu", "ran")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caught {
		n := 0
		for _, o := range ran {
			if o.Nominal.Equal(c.nominal) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("due time %v: %d ran occurrences; want 1", c.nominal, n)
		}
	}
	if !next.nominal.After(caught[max-1].nominal) || next.started.Before(caught[max-1].ended) {
		t.Errorf("the next run (nominal %v, started %v) does not follow the catch-up (last nominal %v, ended %v)",
			next.nominal, next.started, caught[max-1].nominal, caught[max-1].ended)
	}
	stopAll(t, ps)
}
