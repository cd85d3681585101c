package top

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/studioctl/studioctl/internal/watch"
)

// next waits for the next read of src, failing after a generous deadline.
func next(t *testing.T, src *fakeSource, why string) read {
	t.Helper()
	select {
	case r := <-src.reads:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("no read (%s)", why)
		return read{}
	}
}

// fakeClock is the feed's clock in a test: it moves only when told.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.t.Load()) }
func (c *fakeClock) add(d time.Duration) { c.t.Add(int64(d)) }
func newFakeClock() *fakeClock           { c := &fakeClock{}; c.t.Store(at.UnixNano()); return c }

// startFeed runs a feed on src with a 50 ms poll and the clock c until the
// test ends.
func startFeed(t *testing.T, src *fakeSource, wakes *watch.Wakes, c *fakeClock) (*Feed, chan tea.Msg) {
	t.Helper()
	msgs := make(chan tea.Msg, 256)
	f := NewFeed(FeedOptions{Source: src, Wakes: wakes, Poll: 50 * time.Millisecond, Now: c.now,
		Send: func(m tea.Msg) {
			select {
			case msgs <- m:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return f, msgs
}

// waitMarks waits until the feed read the marks n more times than before:
// that many occasions (polls) passed.
func waitMarks(t *testing.T, f *Feed, n int64) {
	t.Helper()
	want := f.Marks() + n
	deadline := time.Now().Add(30 * time.Second)
	for f.Marks() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the feed read the marks %d times, want %d", f.Marks(), want)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter with a deadline, not synchronising
	}
}

// noRead fails when src was read.
func noRead(t *testing.T, src *fakeSource, why string) {
	t.Helper()
	select {
	case r := <-src.reads:
		t.Errorf("%s: read %+v, want none", why, r)
	default:
	}
}

// The first read and a view switched to read the view and the header; a
// poll whose marks are unchanged reads nothing else; a changed view mark
// reads the view alone, a changed header mark the header alone. The marks
// come from the tables, not the bus: a change made while the bus was lost
// (no wake-up) shows at the next poll.
func TestFeedReadsOnlyWhatItsMarksSayChanged(t *testing.T) {
	src := &fakeSource{reads: make(chan read, 64), marks: Marks{View: "v1", Header: "h1"}}
	wakes := watch.NewWakes()
	f, msgs := startFeed(t, src, wakes, newFakeClock())
	if r := next(t, src, "first"); r != (read{Replicas, false}) {
		t.Errorf("first read %+v, want the replicas", r)
	}
	if r := next(t, src, "first header"); !r.header {
		t.Errorf("second read %+v, want the header", r)
	}
	f.Want(Locks)
	// A poll between Want's two stores may read the locks once more.
	locks := 0
	for r := next(t, src, "want"); !r.header; r = next(t, src, "want") {
		if r != (read{Locks, false}) {
			t.Errorf("read %+v after Want(locks)", r)
		}
		locks++
	}
	if locks == 0 {
		t.Error("Want(locks) read the header but not the locks")
	}
	// Nothing changed: the polls and a bus wake-up read the marks only.
	waitMarks(t, f, 3)
	wakes.Post(watch.Wake{Message: true})
	waitMarks(t, f, 3)
	noRead(t, src, "unchanged marks")
	// The view changed (nothing on the bus): the next poll reads it.
	src.setMarks(Marks{View: "v2", Header: "h1"})
	if r := next(t, src, "view changed"); r != (read{Locks, false}) {
		t.Errorf("read %+v after the view's mark changed, want the locks", r)
	}
	waitMarks(t, f, 3)
	noRead(t, src, "the view read once")
	src.setMarks(Marks{View: "v2", Header: "h2"})
	if r := next(t, src, "header changed"); !r.header {
		t.Errorf("read %+v after the header's mark changed, want the header", r)
	}
	waitMarks(t, f, 3)
	noRead(t, src, "the header read once")
	if n := f.Reads(); n != int64(2+locks) {
		t.Errorf("%d view reads counted, want %d", n, 2+locks)
	}
	var sawHeaderAlone bool
	for len(msgs) > 0 {
		if _, ok := (<-msgs).(HeaderMsg); ok {
			sawHeaderAlone = true
		}
	}
	if !sawHeaderAlone {
		t.Error("the header read alone was not sent as a HeaderMsg")
	}
}

// A view without a mark ("") is read at every occasion, as before marks.
func TestFeedReadsAViewWithoutAMarkEveryTime(t *testing.T) {
	src := &fakeSource{reads: make(chan read, 64), marks: Marks{Header: "h1"}}
	startFeed(t, src, nil, newFakeClock())
	next(t, src, "first")
	next(t, src, "first header")
	for range 3 {
		if r := next(t, src, "poll"); r != (read{Replicas, false}) {
			t.Errorf("read %+v at a poll, want the replicas (no mark)", r)
		}
	}
}

// An unchanged view is read again once refreshAfter passed (its relative
// times, and what changes with time alone), the header after HeaderEvery.
func TestFeedReadsAnUnchangedViewAgainAfterItsRefresh(t *testing.T) {
	src := &fakeSource{reads: make(chan read, 64), marks: Marks{View: "v1", Header: "h1"}}
	c := newFakeClock()
	f, _ := startFeed(t, src, nil, c)
	next(t, src, "first")
	next(t, src, "first header")
	waitMarks(t, f, 2)
	noRead(t, src, "unchanged")
	c.add(HeaderEvery)
	got := map[read]bool{}
	for len(got) < 2 {
		got[next(t, src, "refresh")] = true
	}
	if !got[read{Replicas, false}] || !got[read{-1, true}] {
		t.Errorf("reads %v after HeaderEvery, want the view and the header", got)
	}
}

func TestRefreshAfterIsTheReadsCostTimesIdleShareBetweenItsBounds(t *testing.T) {
	for _, c := range []struct {
		name        string
		cost, least time.Duration
		want        time.Duration
	}{
		{"a cheap read is read at every poll", 5 * time.Millisecond, 10 * time.Second, 10 * time.Second},
		{"a read of a second waits a hundred", time.Second, 10 * time.Second, 100 * time.Second},
		{"a slow read waits at most RefreshMax", 10 * time.Second, 10 * time.Second, RefreshMax},
		{"a bound above RefreshMax wins", time.Millisecond, time.Hour, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := refreshAfter(c.cost, c.least); got != c.want {
				t.Errorf("refreshAfter(%s, %s) = %s, want %s", c.cost, c.least, got, c.want)
			}
		})
	}
}
