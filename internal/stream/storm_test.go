package stream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// A reconnect storm (a replica drained, its clients all come to this one,
// each with its last id) must not take the replica's pool from the work
// the pool is for: a lock acquisition on the same pool stays fast.
func TestAReconnectStormLeavesThePoolToTheReplica(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	pcfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 8 // the replica's (internal/host poolMaxConns)
	pool, err := db.OpenConfig(ctx, pcfg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h := startHub(t, pool)
	insertRuns(t, pool, "a", ReplayMax)
	latest, _ := Latest(ctx, pool)

	const clients = 1000
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range clients {
		wg.Go(func() {
			<-start
			s, err := h.Subscribe(ctx, latest-ReplayMax, false)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	close(start)
	var lat []time.Duration
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		t0 := time.Now()
		if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
	slices.Sort(lat)
	worst := lat[len(lat)-1]
	t.Logf("%d subscribes with a full replay: %d probes, p50 %s, worst %s", clients, len(lat), lat[len(lat)/2], worst)
	if worst > 500*time.Millisecond {
		t.Errorf("a query on the replica's pool waited %s during the storm; want under 500ms", worst)
	}
}
