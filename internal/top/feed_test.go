package top

import (
	"context"
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

// TestFeedReadsTheWantedViewOnABusWakeAndByPoll: the first read and every
// read the bus causes read the header; a poll within HeaderEvery of the
// last header does not.
func TestFeedReadsTheWantedViewOnABusWakeAndByPoll(t *testing.T) {
	src := &fakeSource{reads: make(chan read, 64)}
	msgs := make(chan tea.Msg, 64)
	wakes := watch.NewWakes()
	f := NewFeed(FeedOptions{Source: src, Wakes: wakes, Poll: 200 * time.Millisecond, Send: func(m tea.Msg) { msgs <- m }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if r := next(t, src, "first"); r != (read{Replicas, true}) {
		t.Errorf("first read %+v, want the replicas with the header", r)
	}
	f.Want(Locks)
	// Polls may come first on a slow machine; the wanted view is read with
	// its header soon after.
	for r := next(t, src, "want"); r != (read{Locks, true}); r = next(t, src, "want") {
		if r.header {
			t.Errorf("read %+v: a poll read the header", r)
		}
	}
	// With no message, the polls read the view without the header.
	for range 3 {
		if r := next(t, src, "poll"); r.view != Locks {
			t.Errorf("read %+v after Want(locks)", r)
		}
	}
	wakes.Post(watch.Wake{Message: true})
	for r := next(t, src, "bus"); !r.header; r = next(t, src, "bus") {
	}
	if n := f.Reads(); n < 6 {
		t.Errorf("%d reads counted, want at least the 6 seen", n)
	}
	select {
	case m := <-msgs:
		if s, ok := m.(SnapshotMsg); !ok || s.View != Replicas || s.Header == nil {
			t.Errorf("first message %#v, want the replicas snapshot with its header", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no message sent")
	}
}
