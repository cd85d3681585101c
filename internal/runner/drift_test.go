package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestStartPublishesEachJobsDefinitionScrubbed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tick := e.job("tick", jobs.ScopeInstance, time.Minute, e.task())
	tick.Spec = jobs.TaskSpec{Command: []string{"psql", "postgres://app:" + dbPassword + "@db/app"}}
	tick.Env = map[string]string{"PGPASSWORD": dbPassword}
	sync := e.job("sync", jobs.ScopeInstance, time.Minute, e.task())
	sync.PerCluster = true
	// What an earlier process of this id published of a job it no longer
	// declares goes.
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO studio_job_definition (replica_id, job_id, digest, definition) VALUES ($1, 'gone', 'x', '{}')`, replicaID); err != nil {
		t.Fatal(err)
	}
	o := e.options(tick, sync)
	o.Secrets = []string{dbPassword}
	e.start(o)
	rows, err := e.pool.Query(t.Context(), `SELECT job_id, digest, definition::text FROM studio_job_definition WHERE replica_id = $1 ORDER BY job_id`, replicaID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, digest, text string
		if err := rows.Scan(&id, &digest, &text); err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
		if strings.Contains(text, dbPassword) {
			t.Errorf("%s's published definition holds the database password: %s", id, text)
		}
		if id == "tick" && (!strings.Contains(text, `postgres://app:xxxxx@db/app`) || !strings.Contains(text, `"env": "PGPASSWORD"`)) {
			t.Errorf("tick's definition %s: want the task scrubbed and the env names", text)
		}
		if id == "sync" && !strings.Contains(text, `"clusters": "owned"`) {
			t.Errorf("sync's definition %s: want it published under its own id as a per-cluster job", text)
		}
	}
	if strings.Join(got, ",") != "sync,tick" {
		t.Errorf("published %v, want sync and tick (a per-cluster job owning no cluster included, gone removed)", got)
	}
}
