package leases

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
)

// startWithBus starts a lease loop for id whose wake-ups come from its own
// bus listener (a leases.rebalance signal calls Rebalance), as the host
// will wire it, and whose signals go out with the default bus.Notify.
func startWithBus(t *testing.T, url string, q Querier, id string, j *journal) *Service {
	t.Helper()
	s := New(Options{ID: id, DB: q,
		OnAcquire: func(c string, _ context.Context) { j.add(event{replica: id, cluster: c, acquire: true}) },
		OnLose:    func(c string, cause error) { j.add(event{replica: id, cluster: c, cause: cause}) },
	})
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	l := bus.NewListener(cfg, url, bus.Options{Handler: func(m bus.Message) {
		if m.Type == bus.TypeSignal && m.Kind == bus.KindLeasesRebalance {
			s.Rebalance()
		}
	}})
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// The drain handover through the real bus (NOTIFY, LISTEN), at the default
// numbers: from the drain request to the new owner's first duty start.
func TestDrainHandoverThroughTheBus(t *testing.T) {
	t.Parallel()
	url, pool := newDB(t)
	others := []string{"stay-1", "stay-2"}
	for _, id := range others {
		addReplica(t, pool, id, "ready")
	}
	addClusters(t, pool, 30)
	var j journal
	for _, id := range others {
		startWithBus(t, url, pool, id, &j)
	}
	poll(t, 10*time.Second, "placed", func() bool { return placedOK(t, pool, others) })
	var all []time.Duration
	const drains = 20
	for i := range drains {
		id := fmt.Sprintf("drainer-%d", i)
		addReplica(t, pool, id, "ready")
		s := startWithBus(t, url, pool, id, &j)
		live := append(slices.Clone(others), id)
		poll(t, 10*time.Second, id+" owns its share", func() bool { return placedOK(t, pool, live) && len(s.Owned()) > 0 })
		var mine []string
		for c := range s.Owned() {
			mine = append(mine, c)
		}
		start := time.Now()
		exec(t, pool, `UPDATE studio_replica SET state = 'draining' WHERE id = $1`, id)
		if _, err := s.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		poll(t, 10*time.Second, "the others own "+id+"'s share", func() bool { return placedOK(t, pool, others) })
		s.Stop()
		exec(t, pool, `UPDATE studio_replica SET state = 'stopped', stopped_at = now() WHERE id = $1`, id)
		for _, c := range mine {
			for _, e := range j.snapshot() {
				if e.cluster == c && e.acquire && e.replica != id && e.at.After(start) {
					all = append(all, e.at.Sub(start))
					break
				}
			}
		}
	}
	slices.Sort(all)
	p50, p99 := all[len(all)/2], all[min(len(all)-1, len(all)*99/100)]
	t.Logf("graceful handover through the bus, %d drains, %d moved clusters: p50 %s, p99 %s, max %s",
		drains, len(all), p50.Round(time.Microsecond), p99.Round(time.Microsecond), all[len(all)-1].Round(time.Microsecond))
	if all[len(all)-1] >= RenewEvery {
		t.Fatalf("a handover took %s: it waited for a tick instead of the signal", all[len(all)-1])
	}
	if o := j.overlaps(); len(o) > 0 {
		t.Fatalf("duties overlapped: %v", o)
	}
}
