package host_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// startLeaseHost starts a replica with clusters and jobs; it is drained at
// the end of the test unless the test did so.
func startLeaseHost(t *testing.T, url, id string, clusters []string, list []jobs.Job) (*host.Host, chan os.Signal, chan error) {
	t.Helper()
	ready := make(chan string, 1)
	h, err := host.New(host.Options{ConnString: url, ID: id, Version: "test", DrainDelay: host.NoDrainDelay,
		Clusters: clusters, Jobs: list, NoHousekeeping: true, OnReady: func(a string) { ready <- a }})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("%s stopped before ready: %v", id, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", id)
	}
	t.Cleanup(func() {
		h.Drain("test end")
		<-h.Done()
	})
	return h, sigs, done
}

// Two replicas with clusters: in their configuration share the clusters;
// a clusters: owned job runs once per owned cluster and records the
// cluster; a drain hands every lease over at once (not at the next 5 s
// tick) and records the drained replica's cancelled runs lock_lost.
func TestTwoReplicasShareTheClustersAndADrainHandsThemOver(t *testing.T) {
	url := pgtest.NewDB(t)
	var clusters []string
	for i := 1; i <= 8; i++ {
		clusters = append(clusters, fmt.Sprintf("c%d", i))
	}
	list, err := jobs.Parse("test.yaml", []byte(`
jobs:
  - id: per-cluster
    scope: instance
    clusters: owned
    every: 1h
    run:
      command: ["sh", "-c", "sleep 30"]
`))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, sigsA, doneA := startLeaseHost(t, url, "lease-a", clusters, list)
	b, _, _ := startLeaseHost(t, url, "lease-b", clusters[:2], list) // a shorter list removes nothing
	counts := func() map[string]int {
		m, err := leases.CountByOwner(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	waitUntil(t, 15*time.Second, "both replicas to own their share of 8 clusters", func() bool {
		m := counts()
		return m["lease-a"] > 0 && m["lease-b"] > 0 && m["lease-a"]+m["lease-b"] == 8 &&
			a.LeasesOwned() == m["lease-a"] && b.LeasesOwned() == m["lease-b"]
	})
	// Each cluster's duty runs on its owner, once, with the cluster recorded.
	waitUntil(t, 15*time.Second, "a running duty per cluster on its owner", func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT r.cluster) FROM studio_job_run r
JOIN cluster_lease l ON l.cluster = r.cluster AND l.owner = r.replica_id
WHERE r.job_id = 'per-cluster' AND r.outcome = 'running'`).Scan(&n)
		return err == nil && n == 8
	})
	// The runs cancelled when a replica released clusters at the other's
	// start are recorded within a flush.
	waitUntil(t, 15*time.Second, "one running duty per cluster", func() bool { // a cancelled command's end, then a flush: seconds at load 25
		var dup int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT cluster FROM studio_job_run
WHERE job_id = 'per-cluster' AND outcome = 'running' GROUP BY cluster HAVING count(*) > 1) d`).Scan(&dup)
		return err == nil && dup == 0
	})
	var keys int
	// A replica keeps the row of a duty that moved away (not running, no
	// next fire); one row per cluster is hosted, on its owner.
	waitUntil(t, 5*time.Second, "one hosted status row job@cluster per cluster, on its owner", func() bool {
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_job_status s
JOIN cluster_lease l ON s.job_id = 'per-cluster@' || l.cluster AND l.owner = s.replica_id
WHERE s.running OR s.next_fire_at IS NOT NULL`).Scan(&keys)
		return err == nil && keys == 8
	})

	moved := counts()["lease-a"]
	began := time.Now()
	sigsA <- os.Interrupt
	waitUntil(t, 3*time.Second, "lease-b to own all 8 clusters", func() bool { return counts()["lease-b"] == 8 })
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("handover of %d clusters took %s; the drain's signal should make it at once", moved, d)
	}
	if err := <-doneA; err != nil {
		t.Fatalf("drained replica: %v", err)
	}
	var lost int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_job_run WHERE replica_id = 'lease-a' AND outcome = 'lock_lost'
AND error LIKE 'cluster lease lost%'`).Scan(&lost); err != nil || lost < moved {
		t.Errorf("%d runs of lease-a recorded lock_lost, want at least the %d drained (%v)", lost, moved, err)
	}
	waitUntil(t, 10*time.Second, "lease-b to run every cluster's duty", func() bool {
		var n int
		pool.QueryRow(context.Background(), `SELECT count(DISTINCT cluster) FROM studio_job_run WHERE replica_id = 'lease-b' AND outcome = 'running'`).Scan(&n)
		return n == 8
	})
	if a.State() != replicas.StateStopped {
		t.Errorf("drained replica state %s", a.State())
	}
}

// leases.rebalance signals that arrive while the replica starts wake the
// lease loop safely: the loop exists before the bus handler can see a
// message (under -race, the old order, which built it after the bus
// started, was a data race on the host's field).
func TestRebalanceSignalsDuringTheStartAreSafe(t *testing.T) {
	url := pgtest.NewDB(t)
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for {
			select {
			case <-stop:
				return
			default:
			}
			bus.Notify(context.Background(), pool, bus.Signal(bus.KindLeasesRebalance, "other"))
			time.Sleep(time.Millisecond) // the pace of the flood, not a synchronisation
		}
	}()
	h, _, _ := startLeaseHost(t, url, "flooded", []string{"c1", "c2"}, nil)
	waitUntil(t, 15*time.Second, "the replica to own both clusters", func() bool { return h.LeasesOwned() == 2 })
	close(stop)
	<-flooded
}
