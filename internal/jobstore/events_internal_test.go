package jobstore

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
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

// appendRunEvent writes the object json.Marshal writes for a runEvent,
// whatever the strings hold (the store's own encoder, docs/cost.md).
func TestAppendRunEventIsJSONMarshal(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	fin := func(d time.Duration) *time.Time { f := started.Add(d); return &f }
	texts := []string{"", "plain", `q"uo\te`, "tab\tnl\nr\rnul-free\x01\x1f", "<a href='x'>&amp;</a>", "ü 日本 \u2028 \u2029 😀", "\\\\", `"`}
	var runs []jobs.Run
	for i, s := range texts {
		runs = append(runs,
			jobs.Run{Seq: int64(i), JobID: "job-" + s, ReplicaID: s, Cluster: s, StartedAt: started, Outcome: jobs.OutcomeRunning},
			jobs.Run{Seq: -int64(i) - 1<<40, JobID: s, ReplicaID: "r", StartedAt: started, FinishedAt: fin(time.Duration(i) * 1234567 * time.Microsecond),
				Outcome: jobs.OutcomeFailed, Error: s})
	}
	runs = append(runs,
		jobs.Run{Seq: 1, JobID: "zero", StartedAt: started, FinishedAt: fin(0), Outcome: jobs.OutcomeSucceeded},
		jobs.Run{Seq: 2, JobID: "neg", StartedAt: started, FinishedAt: fin(-1500 * time.Millisecond), Outcome: jobs.OutcomeSucceeded},
		jobs.Run{Seq: 3, JobID: "long", StartedAt: started, FinishedAt: fin(90 * 24 * time.Hour), Outcome: jobs.OutcomeTimedOut})
	for _, r := range runs {
		e := runEvent{Seq: r.Seq, JobID: r.JobID, ReplicaID: r.ReplicaID, Cluster: r.Cluster, Outcome: string(r.Outcome),
			StartedAt: r.StartedAt.UTC().Format(eventTime), Error: r.Error}
		if r.FinishedAt != nil {
			e.FinishedAt = r.FinishedAt.UTC().Format(eventTime)
			d := math.Round(r.FinishedAt.Sub(r.StartedAt).Seconds()*1000) / 1000
			e.Duration = &d
		}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got := appendRunEvent(nil, r)
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("run %d: not JSON: %v\n%s", r.Seq, err, got)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("run %d:\n got  %s\n want %s", r.Seq, got, want)
		}
	}
}
