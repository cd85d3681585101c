package demo

import (
	"context"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestReportFindsEveryOverlap feeds demo_execution by hand: executions of
// one installation job that intersect (one still running counts as running
// for ever) are overlapping pairs, executions of different jobs or ones
// that only follow each other are not, and the report says it failed.
func TestReportFindsEveryOverlap(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rows := []struct {
		job, replica string
		start, end   float64 // end < 0: no end
	}{
		{MainJob, "demo-1", 0, 1},
		{MainJob, "demo-2", 3, 4},   // follows: no overlap
		{MainJob, "demo-3", 3.5, 5}, // overlaps the one before
		{secondJob, "demo-1", 3.6, 4.1},
		{secondJob, "demo-2", 10, -1}, // still running ...
		{secondJob, "demo-3", 20, 21}, // ... so this overlaps it
		{instanceJob, "demo-1", 0, 1}, // instance jobs run everywhere at once
		{instanceJob, "demo-2", 0, 1},
	}
	for _, r := range rows {
		var end *time.Time
		if r.end >= 0 {
			e := at(r.end)
			end = &e
		}
		if _, err := pool.Exec(ctx, `INSERT INTO demo_execution (job_id, replica, started_at, ended_at) VALUES ($1, $2, $3, $4)`, r.job, r.replica, at(r.start), end); err != nil {
			t.Fatal(err)
		}
	}
	la, err := locks.NewAdmin(pool, locks.DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Job: MainJob, stopAt: at(30)}
	if err := rep.build(ctx, pool, la); err != nil {
		t.Fatal(err)
	}
	if rep.OverlappingPairs != 2 || rep.OK() {
		t.Errorf("overlapping pairs %d (ok %v), want 2: %v", rep.OverlappingPairs, rep.OK(), rep.Overlaps)
	}
	if got := rep.ExecutionsPerReplica; len(got) != 3 || got["demo-1"] != 1 || got["demo-3"] != 1 {
		t.Errorf("executions per replica %v, want one each on demo-1..3", got)
	}
	if rep.Runs != 3 {
		t.Errorf("runs %d, want 3", rep.Runs)
	}
	// 30 s from the first start, mean execution 1.17 s: 1 + 30/3.17.
	if rep.Due < 10 || rep.Due > 10.6 {
		t.Errorf("due %.1f, want about 10.5", rep.Due)
	}
	if rep.Lock != nil {
		t.Errorf("lock %+v, want none (no lock row)", rep.Lock)
	}
}
