package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// jobs list -o json|yaml has a key for every column of its wide table, and
// the key holds a value wherever the table shows one (docs/output.md).
func TestJobsListJSONHasEveryColumnOfTheTable(t *testing.T) {
	t.Parallel()
	keyOf := map[string]string{
		"ID": "id", "SCOPE": "scope", "SCHEDULE": "schedule", "JITTER": "jitter_seconds", "DEADLINE": "deadline_seconds", "HEALTH": "health", "LAST RUN": "last_started_at",
		"OUTCOME": "last_outcome", "WHERE": "last_replica", "NEXT FIRE": "next_fire_at", "RUNS": "runs",
		"FAILURES": "failures", "LAST DUE": "last_occurrence", "SKIP 24H": "skipped_24h", "MISS 24H": "missed_24h",
		"LAST DUE AT": "last_occurrence", "TIMEOUTS": "timeouts", "LOCK LOST": "lock_lost", "OVERRUNS": "overruns",
		"SKIPPED": "skipped_elsewhere", "ERROR": "last_error", "PAUSED": "paused_by",
	}
	started := testNow.Add(-time.Minute)
	v := jobstore.View{ID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Health: jobs.HealthFailing,
		LastOutcome: jobs.OutcomeFailed, LastError: "exit status 1", LastStartedAt: &started, LastReplica: "web-1",
		NextFireAt: &testNow, Runs: 3, Failures: 1, Timeouts: 1, LockLost: 1, Overruns: 1, SkippedElsewhere: 1,
		Occurrences: &jobstore.OccurrenceSummary{Last: &jobstore.LastOccurrence{Outcome: "ran", NominalAt: started}, Skipped24h: 1, Missed24h: 1},
		Pause:       &jobstore.PauseView{By: "ana@ops", Reason: "incident 4521", Until: &testNow}}

	var table, js bytes.Buffer
	opts := output.Options{Now: func() time.Time { return testNow }}
	if err := printJobViews(output.New(&table, output.Wide, opts), []jobstore.View{v}); err != nil {
		t.Fatal(err)
	}
	if err := printJobViews(output.New(&js, output.JSON, opts), []jobstore.View{v}); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, c := range jobColumns {
		key, ok := keyOf[c.Header]
		if !ok {
			t.Errorf("column %s: no JSON key named for it in this test", c.Header)
			continue
		}
		if val, ok := got[0][key]; !ok || val == nil {
			t.Errorf("column %s: -o json has %q = %v, want a value (the wide table shows one):\n%s", c.Header, key, val, table.String())
		}
	}
	if got[0]["paused_reason"] != "incident 4521" || got[0]["paused_until"] != testNow.UTC().Format(time.RFC3339) {
		t.Errorf("paused_reason, paused_until = %v, %v", got[0]["paused_reason"], got[0]["paused_until"])
	}
	if e := got[0]["last_error"]; e != "exit status 1" {
		t.Errorf("last_error = %v, want the whole error", e)
	}
}
