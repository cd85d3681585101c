package jobstore

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/pgtest"
)

// The store's run event data and the SQL function's (which housekeeping
// uses) are the same object for the same run (docs/events.md).
func TestRunEventDataIsTheSameInGoAndInSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	started := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
	finished := started.Add(1500*time.Millisecond + 4567*time.Microsecond)
	for _, r := range []jobs.Run{
		{Seq: 7, JobID: "sync", ReplicaID: "r1", Cluster: "eu-1", StartedAt: started, Outcome: jobs.OutcomeRunning},
		{Seq: 8, JobID: "report", ReplicaID: "r2", StartedAt: started, FinishedAt: &finished, Outcome: jobs.OutcomeFailed, Error: `exit "3"` + "\n" + "ü"},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO studio_job_run (seq, job_id, replica_id, cluster, started_at, finished_at, outcome, error)
VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7, NULLIF($8, ''))`, r.Seq, r.JobID, r.ReplicaID, r.Cluster, r.StartedAt, r.FinishedAt, string(r.Outcome), r.Error); err != nil {
			t.Fatal(err)
		}
		var fromSQL []byte
		if err := pool.QueryRow(ctx, `SELECT studio_event_run_data(r) FROM studio_job_run r WHERE seq = $1`, r.Seq).Scan(&fromSQL); err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(fromSQL, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(runEventData(r)), &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("run %d:\n SQL %v\n Go  %v", r.Seq, a, b)
		}
	}
}
