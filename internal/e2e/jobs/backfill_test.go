package e2ejobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// bfSchema is the backfill workload's own record: one row per execution
// of the job's command, with the nominal time and occurrence key it was
// given and its own start and end in database time.
const bfSchema = `
CREATE TABLE bfexp (
    seq        bigint      PRIMARY KEY,
    replica    text        NOT NULL,
    nominal    text        NOT NULL,
    okey       text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NULL
);`

// bfRecord records the execution, sleeps and records its end, in one psql
// session that replaces the shell.
const bfRecord = "exec " + psqlExp +
	`"INSERT INTO bfexp VALUES ($STUDIO_RUN_SEQ, '$STUDIO_REPLICA_ID', '$STUDIO_SCHEDULED_AT', '$STUDIO_OCCURRENCE_KEY', clock_timestamp())"` +
	` -c "SELECT pg_sleep(0.2)" -o /dev/null -c "UPDATE bfexp SET ended_at = clock_timestamp() WHERE seq = $STUDIO_RUN_SEQ"`

type bfRow struct {
	seq             int64
	replica         string
	nominal, okey   string
	started, ended  time.Time
	endedKnown      bool
	backfillByStore bool
}

// TestBackfillUnderThreeReplicasRunsEachOccurrenceOnceInOrderWithItsNominalTime
// runs three replicas that share an installation job every 1s, and asks
// jobs backfill for four past occurrences of it. The workload's own record
// says: each occurrence ran once, oldest first, with its own nominal time
// and occurrence key as the job saw them, and no two executions of the
// job (backfill or live) overlapped.
func TestBackfillUnderThreeReplicasRunsEachOccurrenceOnceInOrderWithItsNominalTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t, shJob("bf", "installation", "1s", "", bfRecord))
	f.exec(bfSchema)
	var ps []*replicaproc.Proc
	for _, id := range []string{"bf-1", "bf-2", "bf-3"} {
		ps = append(ps, f.startReplica(id))
	}
	for _, p := range ps {
		p.WaitReady(t)
	}
	began := time.Now()
	// Every replica reported the job (its status row names its schedule).
	replicaproc.Eventually(t, 30*time.Second, "three status rows of bf", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var n int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_status WHERE job_id = 'bf' AND schedule = 'every 1s'`).Scan(&n); err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("%d status rows", n)
		}
		return nil
	})
	// Four occurrences ten minutes back, before any replica ran the job.
	from := f.dbNow().Add(-10 * time.Minute).Truncate(time.Second)
	to := from.Add(4 * time.Second)
	var want []string
	for at := from; at.Before(to); at = at.Add(time.Second) {
		want = append(want, jobs.FormatNominal(at))
	}
	stdout, stderr, code := studioctlBin.Run(t, f.dbURL, "jobs", "backfill", "bf", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339),
		"--reason", "e2e", "--yes", "-o", "json")
	if code != 0 || !strings.Contains(stderr, "requested: 4 occurrences") {
		t.Fatalf("jobs backfill: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("backfill requested %s after the replicas were ready", time.Since(began).Round(time.Millisecond))
	var rows []bfRow
	took := replicaproc.Eventually(t, 60*time.Second, "every backfill execution ended", func() error {
		var err error
		rows, err = f.bfRows()
		if err != nil {
			return err
		}
		ended := 0
		for _, r := range rows {
			if slices.Contains(want, r.nominal) && r.endedKnown {
				ended++
			}
		}
		if ended < len(want) {
			return fmt.Errorf("%d of %d backfill executions ended", ended, len(want))
		}
		return nil
	})
	t.Logf("the backfill executions ended %s after the request", took.Round(time.Millisecond))
	// Let the runs in progress end, so the overlap check sees their ends.
	replicaproc.Eventually(t, 30*time.Second, "every execution ended", func() error {
		var err error
		rows, err = f.bfRows()
		if err != nil {
			return err
		}
		for _, r := range rows {
			if !r.endedKnown {
				return fmt.Errorf("run %d has not ended", r.seq)
			}
		}
		return nil
	})

	// The run store flushes once a second: the marks reach studio_job_run.
	replicaproc.Eventually(t, 10*time.Second, "every backfill run in studio_job_run", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var n int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE job_id = 'bf' AND backfill`).Scan(&n); err != nil {
			return err
		}
		if n < len(want) {
			return fmt.Errorf("%d backfill runs recorded", n)
		}
		return nil
	})
	rows, err := f.bfRows()
	if err != nil {
		t.Fatal(err)
	}
	// Each occurrence once, oldest first, with its nominal time and key.
	var got []string
	for _, r := range rows {
		if !slices.Contains(want, r.nominal) {
			continue
		}
		got = append(got, r.nominal)
		if !r.backfillByStore {
			t.Errorf("run %d of %s is not marked backfill in studio_job_run", r.seq, r.nominal)
		}
		nominal, err := time.Parse(time.RFC3339Nano, r.nominal)
		if err != nil {
			t.Fatalf("STUDIO_SCHEDULED_AT %q: %v", r.nominal, err)
		}
		if k := jobs.OccurrenceKey("bf", "", nominal); r.okey != k {
			t.Errorf("run %d: STUDIO_OCCURRENCE_KEY %q, want %q", r.seq, r.okey, k)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("backfill executions in start order = %v, want each of %v once, oldest first", got, want)
	}
	// No two executions of the job overlapped, backfill or live.
	for i := 1; i < len(rows); i++ {
		if rows[i].started.Before(rows[i-1].ended) {
			t.Errorf("run %d (%s on %s) started at %s, before run %d (%s on %s) ended at %s",
				rows[i].seq, rows[i].nominal, rows[i].replica, rows[i].started.Format(time.RFC3339Nano),
				rows[i-1].seq, rows[i-1].nominal, rows[i-1].replica, rows[i-1].ended.Format(time.RFC3339Nano))
		}
	}
	// The request is done, and a second backfill of the range asks for
	// nothing.
	replicaproc.Eventually(t, 10*time.Second, "the request to be done", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var open int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_request WHERE kind = 'job.backfill' AND done_at IS NULL`).Scan(&open); err != nil {
			return err
		}
		if open != 0 {
			return fmt.Errorf("%d backfill requests open", open)
		}
		return nil
	})
	_, stderr, code = studioctlBin.Run(t, f.dbURL, "jobs", "backfill", "bf", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--yes")
	if code != 0 || !strings.Contains(stderr, "nothing to backfill") {
		t.Errorf("second backfill: exit %d, stderr:\n%s", code, stderr)
	}
}

// bfRows reads the workload's record with the run store's backfill mark,
// by start.
func (f *fixture) bfRows() ([]bfRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `
SELECT e.seq, e.replica, e.nominal, e.okey, e.started_at, e.ended_at, coalesce(r.backfill, false)
FROM bfexp e LEFT JOIN studio_job_run r ON r.seq = e.seq ORDER BY e.started_at, e.seq`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (bfRow, error) {
		var r bfRow
		var ended *time.Time
		err := row.Scan(&r.seq, &r.replica, &r.nominal, &r.okey, &r.started, &ended, &r.backfillByStore)
		if ended != nil {
			r.ended, r.endedKnown = *ended, true
		}
		return r, err
	})
}
