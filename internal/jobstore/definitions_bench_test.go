package jobstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// BenchmarkDriftedJobs10k measures what jobs list adds for its drift mark
// at 10,000 jobs published by three live replicas (30,000 rows, one job
// drifted), and what one replica's publication at start costs:
//
//	go test -run '^$' -bench 'DriftedJobs10k' -benchtime 20x ./internal/jobstore/
func BenchmarkDriftedJobs10k(b *testing.B) {
	pool, _ := newPool(b)
	defs := make([]jobs.PublishedDefinition, 0, 10000)
	for i := range 10000 {
		defs = append(defs, jobs.PublishedDefinition{JobID: fmt.Sprintf("job-%d", i), Definition: jobs.Definition{
			"scope": "installation", "schedule": "every 1m", "tz": "UTC", "timeout": "5m", "lock": fmt.Sprintf("job-%d", i),
			"task": fmt.Sprintf("command: ./bin/job --id %d --to postgres://app:xxxxx@db/app", i), "env": "A, B"}})
	}
	for _, r := range []string{"web-1", "web-2", "web-3"} {
		insertReplica(b, pool, r, "ready", 0)
		if err := jobstore.PublishDefinitions(b.Context(), pool, r, defs); err != nil {
			b.Fatal(err)
		}
	}
	defs[7].Definition = jobs.Definition{"scope": "installation", "schedule": "every 2m"}
	if _, err := pool.Exec(b.Context(), `ANALYZE studio_job_definition; ANALYZE studio_replica`); err != nil {
		b.Fatal(err)
	}
	b.Run("publish", func(b *testing.B) {
		for b.Loop() {
			if err := jobstore.PublishDefinitions(b.Context(), pool, "web-3", defs); err != nil {
				b.Fatal(err)
			}
		}
	})
	var plan []string
	rows, err := pool.Query(b.Context(), `EXPLAIN (ANALYZE, TIMING OFF) `+jobstore.DriftedSQL)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	b.Logf("drifted, server side:\n%s", strings.Join(plan, "\n"))
	b.Run("drifted", func(b *testing.B) {
		if _, err := pool.Exec(b.Context(), `UPDATE studio_replica SET heartbeat_at = now()`); err != nil { // live again
			b.Fatal(err)
		}
		for b.Loop() {
			ids, err := jobstore.DriftedJobs(b.Context(), pool)
			if err != nil || len(ids) != 1 {
				b.Fatalf("DriftedJobs = %v, %v; want job-7", ids, err)
			}
		}
	})
}
