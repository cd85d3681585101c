package demo

import (
	"context"
	"regexp"
	"testing"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// The live view's RUNS, FAIL and TMOUT count a job's run records, so they
// do not go down when a replica leaves and its status row stops counting
// (the view used to sum the live replicas' rows: 3 here, not 5).
func TestTheLiveViewCountsRunsFromTheRecordsNotTheLiveReplicasRows(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, stmt := range []string{
		`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at, stopped_at) VALUES
		  ('demo-1', gen_random_uuid(), 'h', 1, 'dev', 'ready', now(), NULL),
		  ('demo-2', gen_random_uuid(), 'h', 2, 'dev', 'stopped', now(), now())`,
		`INSERT INTO studio_job_status (replica_id, job_id, scope, runs, failures, timeouts) VALUES
		  ('demo-1', 'report', 'installation', 3, 0, 0), ('demo-2', 'report', 'installation', 2, 2, 1)`,
		`INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome) VALUES
		  ('report', 'demo-1', now(), now(), 'succeeded'), ('report', 'demo-1', now(), now(), 'succeeded'),
		  ('report', 'demo-1', now(), now(), 'succeeded'), ('report', 'demo-2', now(), now(), 'failed'),
		  ('report', 'demo-2', now(), now(), 'timed_out'), ('report', 'demo-1', now(), NULL, 'running')`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := locks.NewAdmin(pool, locks.DefaultTable())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := readSnapshot(ctx, pool, admin)
	if err != nil {
		t.Fatal(err)
	}
	view := newScreen(nil, false, true).render(snap, nil)
	if !regexp.MustCompile(`(?m)^report +installation +\S+ +5 +2 +1 `).MatchString(view) {
		t.Errorf("want report with 5 runs, 2 failures, 1 timeout (its records); the view:\n%s", view)
	}
}
