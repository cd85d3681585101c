package e2ejobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// executionSlack is how long after its cron time the task's own statement
// may run on a loaded machine; the runner's start is held to 1 s.
const executionSlack = 3 * time.Second

// TestSharedScheduleSkewedClocks runs three replicas in this process, one
// with its clock 40 s fast, one 20 s fast, one on time (injected offset
// clocks), sharing a cron job every minute. Each replica measures its
// offset from the database and fires at the cron time in database time:
// one run per minute from the first tick on, each within 1 s of the cron
// time. On main the fast replica ran 40 s early and the others ran the
// same tick again.
func TestSharedScheduleSkewedClocks(t *testing.T) {
	t.Parallel()
	const ticks = 2
	f := newFixture(t)
	// The job records its own executions in database time (an sql task on
	// the replica's pool: a command run from this test process would start
	// through the test binary's shim, seconds late).
	list, err := jobs.Parse("skew.yaml", []byte(`
jobs:
  - id: skew
    scope: installation
    cron: "* * * * *"
    run:
      sql: "INSERT INTO inst (replica, at) VALUES ('skew', clock_timestamp())"
`))
	if err != nil {
		t.Fatal(err)
	}
	// Read before the replicas start too: a start that crosses a minute
	// boundary (a loaded CI machine) runs that minute's tick, which is a
	// due tick, not an early one.
	before := f.dbNow()
	skews := map[string]time.Duration{"skew-40": 40 * time.Second, "skew-20": 20 * time.Second, "skew-0": 0}
	for id, by := range skews {
		h, err := host.New(host.Options{
			ConnString: f.dbURL, ID: id, Version: "test", DrainDelay: 50 * time.Millisecond,
			Jobs: list, Clock: clock.Offset{By: by}, NoHousekeeping: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Prepare(context.Background()); err != nil {
			t.Fatalf("prepare %s: %v", id, err)
		}
		if err := h.Start(context.Background()); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		t.Cleanup(h.Stop)
	}
	started := f.dbNow()
	earliest := before.Truncate(time.Minute).Add(time.Minute) // the first cron time a replica may run
	firstTick := started.Truncate(time.Minute).Add(time.Minute)
	lastTick := firstTick.Add((ticks - 1) * time.Minute)
	var got []time.Time
	replicaproc.Eventually(t, time.Until(lastTick)+time.Minute+30*time.Second, fmt.Sprintf("%d cron ticks", ticks), func() error {
		if f.dbNow().Before(lastTick.Add(5 * time.Second)) {
			return fmt.Errorf("waiting for the tick of %s", lastTick.Format(time.TimeOnly))
		}
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		rows, err := f.pool.Query(ctx, `SELECT at FROM inst WHERE replica = 'skew' ORDER BY at`)
		if err != nil {
			return err
		}
		defer rows.Close()
		got = got[:0]
		for rows.Next() {
			var at time.Time
			if err := rows.Scan(&at); err != nil {
				return err
			}
			got = append(got, at)
		}
		return rows.Err()
	})
	perTick := map[time.Time]int{}
	for _, at := range got {
		tick := at.Truncate(time.Minute)
		off := at.Sub(tick)
		t.Logf("execution at %s: %s after the cron time", at.Format(time.RFC3339Nano), off.Round(time.Millisecond))
		if at.Before(earliest.Add(-time.Second)) {
			t.Errorf("execution at %s, before the first cron time %s", at.Format(time.RFC3339Nano), earliest.Format(time.TimeOnly))
		}
		// The runner's start is held to 1 s below; the task's own
		// statement follows it through a pool acquire and the lock, which
		// a loaded machine stretches.
		if off > executionSlack {
			t.Errorf("execution at %s started %s after its cron time, want within %s", at.Format(time.RFC3339Nano), off, executionSlack)
		}
		perTick[tick]++
	}
	// Each run the runner recorded began within 1 s of its cron time, in
	// database time (each replica corrects its clock by its measured
	// offset before it writes a run).
	runs, err := f.runs("skew")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if off := r.StartedAt.Sub(r.StartedAt.Truncate(time.Minute)); off > time.Second {
			t.Errorf("run %d on %s started at %s, %s after its cron time, want within 1s", r.Seq, r.ReplicaID, r.StartedAt.Format(time.RFC3339Nano), off)
		}
	}
	// A tick that passed while the replicas started may have run, once.
	for tick := earliest; tick.Before(firstTick); tick = tick.Add(time.Minute) {
		if n := perTick[tick]; n > 1 {
			t.Errorf("%d executions for the cron time %s, want at most 1", n, tick.Format(time.TimeOnly))
		}
	}
	for tick := firstTick; !tick.After(lastTick); tick = tick.Add(time.Minute) {
		if n := perTick[tick]; n != 1 {
			t.Errorf("%d executions for the cron time %s, want 1", n, tick.Format(time.TimeOnly))
		}
	}
	if t.Failed() {
		runs, _ := f.runs("skew")
		for _, r := range runs {
			t.Logf("run %d on %s at %s: %s %s", r.Seq, r.ReplicaID, r.StartedAt.Format(time.RFC3339Nano), r.Outcome, r.Error)
		}
	}
}
