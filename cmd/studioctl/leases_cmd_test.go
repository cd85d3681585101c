package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/output"
)

// leases list counts the renewal age from the display clock (STUDIO_NOW),
// in its table and its JSON; the state stays the database's judgement.
func TestLeasesListRunCountsTheRenewalAgeFromTheDisplayClock(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.JSON, nil)
	e.exec(t, `INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation)
		VALUES ('c1', 'web-9', '2026-11-30T06:00:00Z', '2026-11-30T06:59:30Z', 3), ('c2', NULL, NULL, NULL, 1)`)
	if err := leasesListRun(context.Background(), &leasesListOptions{deps: e.deps}); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(e.out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, e.out.String())
	}
	if len(got) != 2 || got[0]["cluster"] != "c1" || got[0]["renewed_age_seconds"] != testNow.Sub(time.Date(2026, 11, 30, 6, 59, 30, 0, time.UTC)).Seconds() ||
		got[0]["owner_state"] != "gone" || got[0]["state"] != "expired" || got[1]["renewed_age_seconds"] != nil || got[1]["state"] != "unowned" {
		t.Fatalf("leases list -o json = %s", e.out.String())
	}
}

// replicas list prints how many leases each replica owns.
func TestReplicasListShowsTheLeaseCount(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.JSON, nil)
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at)
		VALUES ('web-2', gen_random_uuid(), 'h2', 2, 'dev', 'ready', '2026-11-30T06:10:00Z', now()),
		       ('web-3', gen_random_uuid(), 'h3', 3, 'dev', 'ready', '2026-11-30T06:10:00Z', now())`)
	e.exec(t, `INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at) VALUES
		('a', 'web-2', now(), now()), ('b', 'web-2', now(), now()), ('c', NULL, NULL, NULL)`)
	if err := replicasListRun(context.Background(), &replicasListOptions{deps: e.deps}); err != nil {
		t.Fatal(err)
	}
	var got []struct {
		ID     string `json:"id"`
		Leases *int   `json:"leases"`
	}
	if err := json.Unmarshal(e.out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "web-2" || got[0].Leases == nil || *got[0].Leases != 2 || got[1].Leases == nil || *got[1].Leases != 0 {
		t.Fatalf("replicas list -o json = %s", e.out.String())
	}
}
