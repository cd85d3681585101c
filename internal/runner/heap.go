package runner

// timerHeap orders jobs by their next fire.
type timerHeap []*jobState

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	js := x.(*jobState)
	js.index = len(*h)
	*h = append(*h, js)
}
func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	js := old[n-1]
	old[n-1] = nil
	js.index = -1
	*h = old[:n-1]
	return js
}
