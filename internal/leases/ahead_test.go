package leases

import (
	"slices"
	"testing"
	"time"
)

// Issue 21, finding 4: a studio_replica row with a heartbeat ahead of
// database time (a role with the replica's grants can insert one) was live
// until then, 'infinity' for good, so placement gave it a share of the
// clusters that nothing claimed. It is not live: the live replicas own
// every cluster, and the CLI's view agrees.
func TestARowWithAHeartbeatAheadOwnsNoShareOfTheClusters(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	live := []string{"r1", "r2"}
	for _, id := range live {
		addReplica(t, pool, id, "ready")
	}
	exec(t, pool, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES
  ('ghost', gen_random_uuid(), 'elsewhere', 1, 'dev', 'ready', 'infinity'),
  ('later', gen_random_uuid(), 'elsewhere', 1, 'dev', 'ready', now() + interval '1 hour')`)
	clusters := addClusters(t, pool, 24)
	// Placement over every row would give the planted ones a share.
	planted := 0
	for _, c := range clusters {
		if p := Place(c, []string{"ghost", "later", "r1", "r2"}); p == "ghost" || p == "later" {
			planted++
		}
	}
	if planted == 0 {
		t.Fatal("no cluster would be placed on a planted row: the test shows nothing")
	}

	got, err := LiveReady(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, live) {
		t.Errorf("LiveReady = %v, want %v", got, live)
	}
	var j journal
	var b inproc
	for _, id := range live {
		startService(t, pool, id, &j, &b, svcOpts{timing: fast})
	}
	poll(t, 10*time.Second, "every cluster owned by a live replica", func() bool { return placedOK(t, pool, live) })
	infos, err := List(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.State != StateOK || in.OwnerState != OwnerLive || !slices.Contains(live, in.Owner) {
			t.Errorf("%s: %s, owner %q %s; want ok and owned by r1 or r2", in.Cluster, in.State, in.Owner, in.OwnerState)
		}
	}
}
