package runner

import "time"

// timerHeap orders jobs by their next fire. Each entry holds its due time
// beside the job, so the comparisons of a push or a pop read the heap's
// own array: reading it through each job's state (a cache miss per
// comparison at 10,000 jobs) was 7 % of the runner's CPU (docs/cost.md).
// An entry's due is the job's (jobState.due); push keeps them equal.
type timerHeap []timerEntry

type timerEntry struct {
	due time.Time
	js  *jobState
}

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].js.index, h[j].js.index = i, j
}
func (h *timerHeap) Push(x any) {
	js := x.(*jobState)
	js.index = len(*h)
	*h = append(*h, timerEntry{due: js.due, js: js})
}
func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	js := old[n-1].js
	old[n-1] = timerEntry{}
	js.index = -1
	*h = old[:n-1]
	return js
}
