package leases

import (
	"slices"
	"testing"
	"time"
)

// Live is the live, ready replicas the last round read, for the runner's
// designated replica: not current before a round, then the ready ones only
// (a starting replica is not among them).
func TestLiveIsTheReadyReplicasOfTheLastRound(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "live-a", "ready")
	addReplica(t, pool, "live-b", "ready")
	addReplica(t, pool, "live-c", "starting")
	s := New(Options{ID: "live-a", DB: pool, Signal: (&inproc{}).signal})
	if _, ok := s.Live(); ok {
		t.Fatal("Live is current before any round")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	var live []string
	poll(t, 10*time.Second, "a round's view", func() bool {
		var ok bool
		live, ok = s.Live()
		return ok
	})
	if want := []string{"live-a", "live-b"}; !slices.Equal(live, want) {
		t.Fatalf("Live = %v, want %v", live, want)
	}
}
