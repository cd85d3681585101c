package replicas

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
)

// TestHeartbeatMeasuresTheClockOffset: a replica whose clock is 40 s fast
// measures an offset of -40 s from database time (round trip taken into
// account) at registration, and its heartbeat writes it to
// studio_replica.clock_offset_seconds, which List returns.
func TestHeartbeatMeasuresTheClockOffset(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	fast := e.register(t, "fast", Options{Clock: clock.Offset{By: 40 * time.Second}, HeartbeatEvery: 100 * time.Millisecond})
	if got := fast.ClockOffset(); got > -39*time.Second || got < -41*time.Second {
		t.Fatalf("ClockOffset() after Register = %s, want about -40s", got)
	}
	if err := fast.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		var v *float64
		if err := e.pool.QueryRow(context.Background(), `SELECT clock_offset_seconds FROM studio_replica WHERE id = 'fast'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != nil {
			if *v > -39 || *v < -41 {
				t.Fatalf("clock_offset_seconds = %v, want about -40", *v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("clock_offset_seconds still NULL after heartbeats")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	list, err := List(context.Background(), e.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.ID == "fast" {
			if in.ClockOffset == nil || *in.ClockOffset > -39 {
				t.Fatalf("List: ClockOffset = %v, want about -40", fmt.Sprint(in.ClockOffset))
			}
			return
		}
	}
	t.Fatal("List: no row for fast")
}
