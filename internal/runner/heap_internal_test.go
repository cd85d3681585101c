package runner

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The timer heap pops live jobs in due order whatever mix of pushes,
// pushes of queued jobs (which leave stale entries) and removes came
// before, and compacts its stale entries away.
func TestTimerHeapPopsLiveJobsInDueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	for round := range 50 {
		var h timerHeap
		jobs := make([]*jobState, 200+round*40)
		for i := range jobs {
			jobs[i] = &jobState{}
		}
		want := map[*jobState]time.Time{}
		for range 20 * len(jobs) {
			js := jobs[rng.IntN(len(jobs))]
			switch rng.IntN(10) {
			case 0:
				h.remove(js)
				delete(want, js)
			case 1:
				if js, ok := h.pop(); ok {
					var earliest time.Time
					for _, d := range want {
						if earliest.IsZero() || d.Before(earliest) {
							earliest = d
						}
					}
					if !js.due.Equal(earliest) {
						t.Fatalf("round %d: popped %v; the earliest live due is %v", round, js.due, earliest)
					}
					delete(want, js)
				}
			default:
				js.due = base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
				h.push(js)
				want[js] = js.due
			}
			if h.live != len(want) {
				t.Fatalf("round %d: %d live; want %d", round, h.live, len(want))
			}
			if len(h.entries) > 2*h.live+1024 {
				t.Fatalf("round %d: %d entries for %d live: not compacted", round, len(h.entries), h.live)
			}
		}
		var got, sorted []time.Time
		for _, d := range want {
			sorted = append(sorted, d)
		}
		slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
		for {
			js, ok := h.pop()
			if !ok {
				break
			}
			if js.queued {
				t.Fatal("a popped job is still marked queued")
			}
			got = append(got, js.due)
		}
		if !slices.EqualFunc(got, sorted, time.Time.Equal) {
			t.Fatalf("round %d: popped %d dues out of order or not all (%d live)", round, len(got), len(sorted))
		}
	}
}
