package stream

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A client that resumes while the hub reads newer events must not end the
// other clients' streams: the newest id it read before its replay is older
// than what the hub hands out by the time it joins, which is no evidence
// that the table's ids went back (issue 21, finding 1: a 600-client resume
// burst ended every stream on the replica, "the newest event id went back"
// with last and newest one apart).
func TestAResumeDuringNewEventsEndsNoLiveStream(t *testing.T) {
	pool, _ := openPool(t)
	ctx := context.Background()
	h := startHub(t, pool)
	insertRuns(t, pool, "a", 10)
	live, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	from, _ := Latest(ctx, pool)

	// Between the resuming client's replay and its join, new events
	// commit and the hub hands them to the live client.
	var once sync.Once
	h.hooks.afterReplay = func() {
		once.Do(func() {
			insertRuns(t, pool, "b", 3)
			recv(t, h, live, 3)
		})
	}
	resumed, err := h.Subscribe(ctx, from-5, false)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	h.hooks.afterReplay = nil

	select {
	case <-live.Done():
		t.Fatalf("the live stream ended when another client resumed: %v", live.Err())
	default:
	}
	if resumed.Resync {
		t.Fatal("the resumed client was told to resync; it missed nothing")
	}
	// Both go on receiving, without a gap: the resumed one has the five it
	// missed, the three new ones, then the next.
	insertRuns(t, pool, "c", 2)
	got := recv(t, h, resumed, 10)
	for i := 1; i < len(got); i++ {
		if got[i].ID != got[i-1].ID+1 {
			t.Fatalf("the resumed client's events have a gap or a duplicate: %d then %d", got[i-1].ID, got[i].ID)
		}
	}
	if got[0].ID != from-4 {
		t.Fatalf("the resumed client's first event is %d, want %d", got[0].ID, from-4)
	}
	recv(t, h, live, 2)
}

// A burst of resuming clients while events keep coming ends no live
// stream (the reproduction of issue 21 at this package's level).
func TestAResumeBurstEndsNoLiveStream(t *testing.T) {
	pool, _ := openPool(t)
	ctx := context.Background()
	h := startHub(t, pool)
	insertRuns(t, pool, "a", ReplayMax)
	live, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	from, _ := Latest(ctx, pool)

	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				insertRuns(t, pool, "w", 1)
				h.Wake()
			}
		}
	})
	// Drain the live client as a real one would, so that it is never
	// dropped for being slow.
	var drain sync.WaitGroup
	drained := make(chan struct{})
	drain.Go(func() {
		for {
			select {
			case <-live.C():
			case <-live.Done():
				return
			case <-drained:
				return
			}
		}
	})
	defer func() { close(drained); drain.Wait() }()
	const clients = 600
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			s, err := h.Subscribe(ctx, from-950, false)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	close(stop)
	writer.Wait()
	select {
	case <-live.Done():
		t.Fatalf("the live stream ended during a resume burst: %v", live.Err())
	default:
	}
}
