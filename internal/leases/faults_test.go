package leases

import (
	"errors"
	"testing"
	"time"
)

// clusterTimes reads acquired_at and renewed_at (database time) of every
// owned cluster.
func clusterTimes(t *testing.T, q Querier) map[string][2]time.Time {
	t.Helper()
	rows, err := q.Query(t.Context(), `SELECT cluster, acquired_at, renewed_at FROM cluster_lease WHERE owner IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]time.Time{}
	for rows.Next() {
		var c string
		var a, r time.Time
		if err := rows.Scan(&c, &a, &r); err != nil {
			t.Fatal(err)
		}
		out[c] = [2]time.Time{a, r}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A partition at the default numbers: the cut-off owner (its lease loop
// and its heartbeat both go through a black-holed proxy) stops its duties
// within the 10 s trust window of its last renewal, and the other replica
// claims nothing before the 15 s TTL has passed in database time, nor
// before the cut-off owner's duties stopped.
func TestAPartitionedOwnerStopsItsDutiesBeforeAnyoneClaims(t *testing.T) {
	t.Parallel()
	url, pool := newDB(t)
	cut, proxy := proxied(t, url)
	addReplica(t, pool, "cut", "ready")
	addReplica(t, pool, "other", "ready")
	heartbeat(t, cut, "cut")
	heartbeat(t, pool, "other")
	addClusters(t, pool, 12)
	var j journal
	var b inproc
	sc := startService(t, cut, "cut", &j, &b, svcOpts{})
	startService(t, pool, "other", &j, &b, svcOpts{})
	live := []string{"cut", "other"}
	poll(t, 20*time.Second, "placed", func() bool { return placedOK(t, pool, live) && len(sc.Owned()) > 0 })
	var theirs []string
	for c, o := range owners(t, pool) {
		if o == "cut" {
			theirs = append(theirs, c)
		}
	}
	// Wait for a renewal to pass, so the last one's time is known closely.
	r := sc.Rounds() + 1
	poll(t, 10*time.Second, "a round", func() bool { return sc.Rounds() >= r })
	proxy.Blackhole()
	cutAt := time.Now()
	lastRenewed := clusterTimes(t, pool)

	poll(t, TrustWindow+time.Second, "the cut-off owner's duties stop", func() bool { return len(sc.Owned()) == 0 })
	stopped := time.Since(cutAt)
	poll(t, 40*time.Second, "the other replica takes over", func() bool { return placedOK(t, pool, []string{"other"}) })
	took := time.Since(cutAt)
	t.Logf("partition: duties stopped %s after the cut, takeover %s after the cut", stopped.Round(time.Millisecond), took.Round(time.Millisecond))

	var lostAt time.Time
	for _, e := range j.snapshot() {
		if e.replica == "cut" && !e.acquire {
			if !errors.Is(e.cause, ErrLost) {
				t.Errorf("%s lost with cause %v, want ErrLost", e.cluster, e.cause)
			}
			if e.at.After(lostAt) {
				lostAt = e.at
			}
		}
	}
	after := clusterTimes(t, pool)
	for _, c := range theirs {
		gap := after[c][0].Sub(lastRenewed[c][1])
		if gap < LeaseTTL {
			t.Errorf("%s claimed %s after its last renewal, before the TTL", c, gap)
		}
		for _, e := range j.snapshot() {
			if e.cluster == c && e.acquire && e.replica == "other" && e.at.After(cutAt) && !e.at.After(lostAt) {
				t.Errorf("%s started on other at %s, before cut stopped its duties at %s", c, e.at, lostAt)
			}
		}
	}
	proxy.Restore()
	// Back on the network its heartbeat resumes: it is live again and
	// gets its share back by handover, never by overlap.
	poll(t, 40*time.Second, "the restored replica gets its share back", func() bool { return placedOK(t, pool, live) })
	if o := j.overlaps(); len(o) > 0 {
		t.Fatalf("duties overlapped: %v", o)
	}
}

// A crashed owner (its heartbeat and its loop stop without a release) is
// taken over once it is gone and its leases expired: within 20 s.
func TestACrashedOwnersClustersAreTakenOverAfterTheTTL(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "crash", "ready")
	addReplica(t, pool, "survivor", "ready")
	stopBeat := heartbeat(t, pool, "crash")
	heartbeat(t, pool, "survivor")
	addClusters(t, pool, 12)
	var j journal
	var b inproc
	sc := startService(t, pool, "crash", &j, &b, svcOpts{})
	startService(t, pool, "survivor", &j, &b, svcOpts{})
	poll(t, 20*time.Second, "placed", func() bool {
		return placedOK(t, pool, []string{"crash", "survivor"}) && len(sc.Owned()) > 0
	})
	var theirs []string
	for c, o := range owners(t, pool) {
		if o == "crash" {
			theirs = append(theirs, c)
		}
	}
	// The crash: no release, no more heartbeats or renewals.
	stopBeat()
	sc.Stop()
	lastRenewed := clusterTimes(t, pool)
	took := poll(t, 40*time.Second, "the survivor takes over", func() bool { return placedOK(t, pool, []string{"survivor"}) })
	t.Logf("crash takeover of %d clusters: %s", len(theirs), took.Round(time.Millisecond))
	after := clusterTimes(t, pool)
	for _, c := range theirs {
		if gap := after[c][0].Sub(lastRenewed[c][1]); gap < LeaseTTL {
			t.Errorf("%s taken over %s after its last renewal, before the TTL", c, gap)
		}
	}
	if took > 20*time.Second+time.Second {
		t.Errorf("takeover took %s, the goal is at most 20 s", took)
	}
}
