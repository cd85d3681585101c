package watch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/watch"
)

// waitFor bounds every wait of these tests.
const waitFor = 10 * time.Second

// fake is a view whose key the test sets; every read is reported on reads.
type fake struct {
	mu    sync.Mutex
	key   string
	err   error
	reads chan string // the key each read returned
	draws chan string // the key each draw showed
}

func newFake(key string) *fake {
	return &fake{key: key, reads: make(chan string, 100), draws: make(chan string, 100)}
}

func (f *fake) set(key string, err error) {
	f.mu.Lock()
	f.key, f.err = key, err
	f.mu.Unlock()
}

func (f *fake) load(context.Context) (watch.View, error) {
	f.mu.Lock()
	key, err := f.key, f.err
	f.mu.Unlock()
	f.reads <- key
	if err != nil {
		return watch.View{}, err
	}
	return watch.View{Key: key, Draw: func() error { f.draws <- key; return nil }}, nil
}

func recv(t *testing.T, c chan string, what string) string {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitFor):
		t.Fatalf("no %s within %s", what, waitFor)
		return ""
	}
}

func none(t *testing.T, c chan string, what string, d time.Duration) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("unexpected %s %q", what, v)
	case <-time.After(d):
	}
}

// run starts Loop and returns a function that stops it and returns its error.
func run(t *testing.T, o watch.Options) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watch.Loop(ctx, o) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(waitFor):
			t.Fatal("Loop did not return after its context ended")
			return nil
		}
	}
}

// A wake-up re-reads; only a read whose key changed is drawn.
func TestLoopDrawsOnlyWhenTheKeyChanges(t *testing.T) {
	f := newFake("a")
	w := watch.NewWakes()
	stop := run(t, watch.Options{Load: f.load, Wakes: w, Poll: time.Hour, FollowUp: time.Hour})
	recv(t, f.reads, "first read")
	if got := recv(t, f.draws, "first draw"); got != "a" {
		t.Fatalf("first draw %q, want a", got)
	}
	w.Post(watch.Wake{Message: true})
	recv(t, f.reads, "read on a message")
	none(t, f.draws, "draw of an unchanged view", 200*time.Millisecond)
	f.set("b", nil)
	w.Post(watch.Wake{Message: true})
	recv(t, f.reads, "read on a message")
	if got := recv(t, f.draws, "draw"); got != "b" {
		t.Fatalf("draw %q, want b", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Loop = %v, want nil when its context ends", err)
	}
}

// A burst of messages is one read; a signal adds one follow-up read.
func TestLoopCoalescesABurstAndFollowsUpASignal(t *testing.T) {
	f := newFake("a")
	w := watch.NewWakes()
	stop := run(t, watch.Options{Load: f.load, Wakes: w, Poll: time.Hour, Settle: 100 * time.Millisecond, FollowUp: 400 * time.Millisecond})
	defer stop()
	recv(t, f.reads, "first read")
	for range 50 {
		w.Post(watch.Wake{Message: true})
	}
	recv(t, f.reads, "read of the burst")
	none(t, f.reads, "second read of one burst", 300*time.Millisecond)

	w.Post(watch.Wake{Message: true, Signal: true})
	start := time.Now()
	recv(t, f.reads, "read of the signal")
	f.set("answered", nil) // what the replicas do in answer, without a message
	recv(t, f.reads, "follow-up read")
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("follow-up read after %s, want about 400ms", took)
	}
	recv(t, f.draws, "first draw")
	if got := recv(t, f.draws, "draw of the follow-up"); got != "answered" {
		t.Fatalf("follow-up drew %q", got)
	}
}

// Without any message the view is read every Poll: a change nobody
// announced (plain SQL) is drawn at the next poll.
func TestLoopPollsWithoutMessages(t *testing.T) {
	f := newFake("a")
	stop := run(t, watch.Options{Load: f.load, Poll: 150 * time.Millisecond})
	defer stop()
	recv(t, f.reads, "first read")
	recv(t, f.draws, "first draw")
	f.set("by sql", nil)
	recv(t, f.reads, "poll")
	if got := recv(t, f.draws, "draw"); got != "by sql" {
		t.Fatalf("draw %q", got)
	}
}

// The first read's error ends the watch; a later one is told once and the
// watch goes on.
func TestLoopErrors(t *testing.T) {
	f := newFake("a")
	f.set("a", errors.New("no database"))
	err := watch.Loop(context.Background(), watch.Options{Load: f.load, Poll: time.Hour})
	if err == nil || err.Error() != "no database" {
		t.Fatalf("Loop with a failing first read = %v", err)
	}

	f = newFake("a")
	notices := make(chan string, 10)
	stop := run(t, watch.Options{Load: f.load, Poll: 100 * time.Millisecond, Notice: func(s string) { notices <- s }})
	defer stop()
	recv(t, f.draws, "first draw")
	f.set("a", errors.New("connection reset"))
	recv(t, notices, "notice of the failed read")
	recv(t, f.reads, "read")
	recv(t, f.reads, "read")
	recv(t, f.reads, "read")
	none(t, notices, "second notice of one outage", 50*time.Millisecond)
	f.set("b", nil)
	if got := recv(t, f.draws, "draw after the outage"); got != "b" {
		t.Fatalf("draw %q", got)
	}
	if got := recv(t, notices, "notice of the recovery"); got != "watch: reading again" {
		t.Fatalf("notice %q", got)
	}
}

// Posts merge until taken.
func TestWakesMerge(t *testing.T) {
	w := watch.NewWakes()
	w.Post(watch.Wake{Message: true})
	w.Post(watch.Wake{Signal: true})
	<-w.C()
	if got := w.Take(); got != (watch.Wake{Message: true, Signal: true}) {
		t.Fatalf("Take = %+v", got)
	}
	if got := w.Take(); got != (watch.Wake{}) {
		t.Fatalf("second Take = %+v", got)
	}
}
