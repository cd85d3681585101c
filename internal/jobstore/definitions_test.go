package jobstore_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

func def(fields ...string) jobs.Definition {
	d := jobs.Definition{"scope": "installation", "schedule": "every 30m", "tz": "UTC", "timeout": "1h30m", "lock": "nightly", "task": "command: ./report"}
	for i := 0; i+1 < len(fields); i += 2 {
		d[fields[i]] = fields[i+1]
	}
	return d
}

func publish(t testing.TB, pool *pgxpool.Pool, replica string, defs ...jobs.PublishedDefinition) {
	t.Helper()
	if err := jobstore.PublishDefinitions(t.Context(), pool, replica, defs); err != nil {
		t.Fatal(err)
	}
}

func drifted(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	ids, err := jobstore.DriftedJobs(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func diffOf(t testing.TB, pool *pgxpool.Pool, job string) ([]jobstore.Difference, jobstore.JobDefinitions) {
	t.Helper()
	defs, known, err := jobstore.ReadJobDefinitions(t.Context(), pool, job)
	if err != nil || !known {
		t.Fatalf("ReadJobDefinitions(%s) = %v, %v", job, known, err)
	}
	return defs.Diff(), defs
}

func TestLiveReplicasThatPublishTheSameDefinitionsAgree(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	insertReplica(t, pool, "b", "ready", 0)
	hk := jobs.PublishedDefinition{JobID: jobs.HousekeepingID, Definition: def("schedule", "every 1m"), Builtin: true}
	publish(t, pool, "a", jobs.PublishedDefinition{JobID: "nightly", Definition: def()}, hk)
	// b is another version: its built-in job differs, which is not drift.
	hk.Definition = def("schedule", "every 2m")
	publish(t, pool, "b", jobs.PublishedDefinition{JobID: "nightly", Definition: def()}, hk)
	if got := drifted(t, pool); len(got) != 0 {
		t.Fatalf("drifted %v, want none", got)
	}
	if diff, _ := diffOf(t, pool, "nightly"); len(diff) != 0 {
		t.Fatalf("diff %+v, want none", diff)
	}
	if diff, _ := diffOf(t, pool, jobs.HousekeepingID); len(diff) != 0 {
		t.Fatalf("diff of the built-in job %+v, want none", diff)
	}
}

func TestReplicasThatDisagreeShowTheFieldsThatDiffer(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	insertReplica(t, pool, "b", "draining", 0) // still live: it still runs its jobs
	insertReplica(t, pool, "c", "ready", 0)
	publish(t, pool, "a", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	publish(t, pool, "b", jobs.PublishedDefinition{JobID: "nightly", Definition: def("schedule", "every 1h", "timeout", "3h")})
	publish(t, pool, "c", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	if got := drifted(t, pool); !reflect.DeepEqual(got, []string{"nightly"}) {
		t.Fatalf("drifted %v, want [nightly]", got)
	}
	diff, _ := diffOf(t, pool, "nightly")
	want := []jobstore.Difference{
		{"a", "schedule", "every 30m"}, {"b", "schedule", "every 1h"}, {"c", "schedule", "every 30m"},
		{"a", "timeout", "1h30m"}, {"b", "timeout", "3h"}, {"c", "timeout", "1h30m"},
	}
	if !reflect.DeepEqual(diff, want) {
		t.Fatalf("diff\n %+v\nwant\n %+v", diff, want)
	}
	// b stops: a and c agree again.
	if _, err := pool.Exec(t.Context(), `UPDATE studio_replica SET state = 'stopped' WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	if got := drifted(t, pool); len(got) != 0 {
		t.Fatalf("drifted %v after b stopped, want none", got)
	}
	// b starts again with the same id and the new configuration: the
	// publication replaces its rows.
	if _, err := pool.Exec(t.Context(), `UPDATE studio_replica SET state = 'ready', heartbeat_at = now() WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	publish(t, pool, "b", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	if got := drifted(t, pool); len(got) != 0 {
		t.Fatalf("drifted %v after b published the same definition, want none", got)
	}
}

func TestAJobGoneFromOneLiveReplicasConfigurationIsDrift(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	insertReplica(t, pool, "b", "ready", 0)
	insertReplica(t, pool, "gone", "stopped", time.Minute)
	publish(t, pool, "a", jobs.PublishedDefinition{JobID: "nightly", Definition: def()}, jobs.PublishedDefinition{JobID: "old", Definition: def()})
	publish(t, pool, "b", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	publish(t, pool, "gone", jobs.PublishedDefinition{JobID: "nightly", Definition: def("schedule", "every 5m")})
	if got := drifted(t, pool); !reflect.DeepEqual(got, []string{"old"}) {
		t.Fatalf("drifted %v, want [old] (a stopped replica is not compared)", got)
	}
	diff, _ := diffOf(t, pool, "old")
	want := []jobstore.Difference{{"a", "defined", "present"}, {"b", "defined", "absent"}}
	if !reflect.DeepEqual(diff, want) {
		t.Fatalf("diff %+v, want %+v", diff, want)
	}
	d, err := jobstore.Drift(t.Context(), pool)
	if err != nil || len(d) != 1 || d[0].Job != "old" || !reflect.DeepEqual(d[0].Differences, want) {
		t.Fatalf("Drift = %+v, %v", d, err)
	}
}

func TestAReplicaThatPublishesNoDefinitionIsUnknownNotDrift(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "new", "ready", 0)
	insertReplica(t, pool, "old", "ready", 0) // a version before migration 00015
	publish(t, pool, "new", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	statusOf(t, pool, "new", "nightly")
	statusOf(t, pool, "old", "nightly", "legacy")
	if got := drifted(t, pool); len(got) != 0 {
		t.Fatalf("drifted %v, want none", got)
	}
	diff, defs := diffOf(t, pool, "nightly")
	if len(diff) != 0 || !reflect.DeepEqual(defs.Unknown, []string{"old"}) {
		t.Fatalf("diff %+v, unknown %v; want none and [old]", diff, defs.Unknown)
	}
	// legacy: only the old replica runs it; new does not declare it, and
	// old is not compared, so there is nothing to disagree with.
	diff, defs = diffOf(t, pool, "legacy")
	if len(diff) != 0 || !reflect.DeepEqual(defs.Unknown, []string{"old"}) {
		t.Fatalf("legacy: diff %+v, unknown %v", diff, defs.Unknown)
	}
	if _, known, err := jobstore.ReadJobDefinitions(t.Context(), pool, "nosuch"); known || err != nil {
		t.Fatalf("ReadJobDefinitions(nosuch) = %v, %v; want unknown", known, err)
	}
}

func TestAPerClusterJobIsComparedByItsDefinitionNotByWhoOwnsTheCluster(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	insertReplica(t, pool, "b", "ready", 0)
	// a owns c1 (a duty row), b owns nothing: both declare sync alike.
	statusOf(t, pool, "a", "sync@c1")
	duty := def("scope", "instance", "clusters", "owned")
	delete(duty, "lock")
	publish(t, pool, "a", jobs.PublishedDefinition{JobID: "sync", Definition: duty})
	publish(t, pool, "b", jobs.PublishedDefinition{JobID: "sync", Definition: duty})
	if got := drifted(t, pool); len(got) != 0 {
		t.Fatalf("drifted %v, want none", got)
	}
	views := []jobstore.View{{ID: "sync@c1"}, {ID: "other"}}
	if err := jobstore.AddDrift(t.Context(), pool, views); err != nil || views[0].Drift {
		t.Fatalf("AddDrift: %v, %+v", err, views)
	}
	// b's definition changes: the duty's view says drift.
	publish(t, pool, "b", jobs.PublishedDefinition{JobID: "sync", Definition: def("scope", "instance", "clusters", "owned", "timeout", "1m")})
	if err := jobstore.AddDrift(t.Context(), pool, views); err != nil || !views[0].Drift || views[1].Drift {
		t.Fatalf("AddDrift: %v, %+v; want sync@c1 drifted", err, views)
	}
	if !views[0].JSON().Drift {
		t.Fatal("the JSON of a drifted view says drift: false")
	}
}

func TestHousekeepingDropsTheDefinitionsOfLongGoneReplicas(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	insertReplica(t, pool, "old", "stopped", jobstore.ForgetStoppedAfter+time.Hour)
	publish(t, pool, "a", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	publish(t, pool, "old", jobs.PublishedDefinition{JobID: "nightly", Definition: def()})
	if _, _, _, err := jobstore.Housekeep(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_definition WHERE replica_id = 'old'`); n != 0 {
		t.Fatalf("%d definitions of a dropped replica left", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_definition WHERE replica_id = 'a'`); n != 1 {
		t.Fatalf("a live replica's definitions: %d rows, want 1", n)
	}
}
