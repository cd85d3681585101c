package runner

import (
	"fmt"
	"testing"

	"github.com/studioctl/studioctl/internal/leases"
)

// The rank is the place in DesignatedOrder, whose first is the replica
// cluster placement would pick (leases.Place, the same hash); a replica
// that is not a member (starting, draining) comes after every member.
func TestDesignateRankFollowsTheLeasePlacementHash(t *testing.T) {
	t.Parallel()
	members := []string{"web-1", "web-2", "web-3", "web-4", "web-5"}
	seen := map[string]int{}
	for i := range 500 {
		job := fmt.Sprintf("job-%d", i)
		order := DesignatedOrder(job, members)
		if order[0] != leases.Place(job, members) {
			t.Fatalf("%s: designated %s, placement %s", job, order[0], leases.Place(job, members))
		}
		seen[order[0]]++
		for want, m := range order {
			if got := designateRank(job, m, members); got != want {
				t.Fatalf("%s: rank of %s = %d, want %d (order %v)", job, m, got, want, order)
			}
		}
		if got := designateRank(job, "web-starting", members); got != len(members) {
			t.Fatalf("%s: rank of a replica that is not ready = %d, want %d", job, got, len(members))
		}
	}
	// Every replica is designated for some jobs: 100 of 500 each on
	// average, and no replica far off it.
	for _, m := range members {
		if seen[m] < 60 || seen[m] > 140 {
			t.Errorf("%s designated for %d of 500 jobs, want about 100 (%v)", m, seen[m], seen)
		}
	}
	if got := designateRank("job-1", "web-1", nil); got != 0 {
		t.Errorf("rank with no member = %d, want 0 (every replica tries)", got)
	}
}
