package top

import (
	"context"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/studioctl/studioctl/internal/watch"
)

// next waits for the next read of src, failing after a generous deadline.
func next(t *testing.T, src *fakeSource, why string) View {
	t.Helper()
	select {
	case v := <-src.reads:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no read (%s)", why)
		return 0
	}
}

func TestFeedReadsTheWantedViewOnABusWakeAndByPoll(t *testing.T) {
	src := &fakeSource{reads: make(chan View, 16)}
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
	if v := next(t, src, "first"); v != Replicas {
		t.Errorf("first read of %s, want replicas", v)
	}
	f.Want(Locks)
	// The wanted view is read next (its wake-up, then the follow-up).
	if v := next(t, src, "want"); v != Locks {
		t.Errorf("read after Want(locks) of %s", v)
	}
	wakes.Post(watch.Wake{Message: true})
	if v := next(t, src, "bus"); v != Locks {
		t.Errorf("read after a bus message of %s", v)
	}
	// With no message at all, the poll reads again.
	if v := next(t, src, "poll"); v != Locks {
		t.Errorf("poll read of %s", v)
	}
	if n := f.Reads(); n < 4 {
		t.Errorf("%d reads counted, want at least the 4 seen", n)
	}
	select {
	case m := <-msgs:
		if s, ok := m.(SnapshotMsg); !ok || s.View != Replicas {
			t.Errorf("first message %#v, want the replicas snapshot", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no message sent")
	}
}
