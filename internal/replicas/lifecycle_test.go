package replicas

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/startstop"
)

var _ startstop.Service = (*Registry)(nil)

func TestRegistryStartRegistersAndFailsForRealOnALiveDuplicate(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	first := NewRegistry(e.cfg, e.url, Options{ID: "life", HeartbeatEvery: 200 * time.Millisecond})
	defer first.Stop()
	if err := first.Start(context.Background()); err != nil {
		t.Fatalf("Start of an unregistered registry: %v", err)
	}
	if err := startstop.WaitStarted(context.Background(), first); err != nil {
		t.Fatalf("WaitStarted: %v", err)
	}
	in, err := Get(context.Background(), e.pool, "life")
	if err != nil || !in.Live || in.State != StateStarting {
		t.Fatalf("row after Start: %+v, %v", in, err)
	}

	second := NewRegistry(e.cfg, e.url, Options{ID: "life"})
	err = second.Start(context.Background())
	if !errors.Is(err, ErrLiveDuplicate) {
		t.Fatalf("Start over a live replica = %v, want ErrLiveDuplicate", err)
	}
	select {
	case <-second.Stopped():
	default:
		t.Error("a failed Start must leave the registry stopped")
	}
	if err := second.Start(context.Background()); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("Start after a failed Start = %v, want ErrStopped", err)
	}
	second.mu.Lock()
	leftConn := second.conn != nil
	second.mu.Unlock()
	if leftConn {
		t.Error("a failed Start left its connection open")
	}
}

func TestRegistryStopIsSafeTwiceAndConcurrently(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	NewRegistry(e.cfg, e.url, Options{ID: "never"}).Stop()
	r := NewRegistry(e.cfg, e.url, Options{ID: "twice", HeartbeatEvery: 200 * time.Millisecond})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); r.Stop() }()
	}
	wg.Wait()
	r.Stop()
	// The final state is written after Stop.
	if err := r.SetState(context.Background(), StateStopped); err != nil {
		t.Fatalf("SetState after Stop: %v", err)
	}
	r.Stop()
}
