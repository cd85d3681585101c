package runner

import "time"

// timerHeap orders the queued jobs by their next fire: a 4-ary min-heap of
// entries that hold the due time beside the job, so a push or a pop reads
// and writes the heap's own array only. A job queued again (a trigger, a
// new setting) leaves its old entry behind, stale, rather than moving it:
// an entry is live while its gen is the job's, and stale entries are
// dropped when they come to the top (or when they outnumber the live ones).
// At 10,000 jobs a binary container/heap that read each job's due through
// its state and wrote its index at every swap was 7-9 % of the runner's
// CPU (docs/cost.md).
type timerHeap struct {
	entries []timerEntry
	live    int
}

type timerEntry struct {
	due time.Time
	js  *jobState
	gen uint64
}

func (e timerEntry) stale() bool { return e.gen != e.js.gen }

// push queues js at js.due; an entry it had before becomes stale.
func (h *timerHeap) push(js *jobState) {
	if js.queued {
		h.live--
	}
	js.gen++
	js.queued = true
	h.live++
	h.entries = append(h.entries, timerEntry{due: js.due, js: js, gen: js.gen})
	h.up(len(h.entries) - 1)
	h.maybeCompact()
}

// maybeCompact compacts when stale entries outnumber the live ones (and a
// thousand).
func (h *timerHeap) maybeCompact() {
	if len(h.entries) > 2*h.live+1024 {
		h.compact()
	}
}

// remove takes js off the heap (its entry becomes stale).
func (h *timerHeap) remove(js *jobState) {
	if !js.queued {
		return
	}
	js.gen++
	js.queued = false
	h.live--
	h.maybeCompact()
}

// first returns the earliest live entry.
func (h *timerHeap) first() (timerEntry, bool) {
	for len(h.entries) > 0 {
		if e := h.entries[0]; !e.stale() {
			return e, true
		}
		h.popTop()
	}
	return timerEntry{}, false
}

// pop takes the earliest live job off the heap; ok is false when none is
// queued.
func (h *timerHeap) pop() (*jobState, bool) {
	e, ok := h.first()
	if !ok {
		return nil, false
	}
	h.popTop()
	e.js.queued = false
	h.live--
	h.maybeCompact()
	return e.js, true
}

func (h *timerHeap) popTop() {
	n := len(h.entries) - 1
	h.entries[0] = h.entries[n]
	h.entries[n] = timerEntry{}
	h.entries = h.entries[:n]
	if n > 0 {
		h.down(0)
	}
}

func (h *timerHeap) up(i int) {
	a := h.entries
	e := a[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.due.Before(a[p].due) {
			break
		}
		a[i] = a[p]
		i = p
	}
	a[i] = e
}

func (h *timerHeap) down(i int) {
	a := h.entries
	n := len(a)
	e := a[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if a[k].due.Before(a[m].due) {
				m = k
			}
		}
		if !a[m].due.Before(e.due) {
			break
		}
		a[i] = a[m]
		i = m
	}
	a[i] = e
}

// compact drops every stale entry and rebuilds the heap.
func (h *timerHeap) compact() {
	live := h.entries[:0]
	for _, e := range h.entries {
		if !e.stale() {
			live = append(live, e)
		}
	}
	clear(h.entries[len(live):])
	h.entries = live
	for i := len(live)/4 + 1; i >= 0; i-- {
		if i < len(live) {
			h.down(i)
		}
	}
}
