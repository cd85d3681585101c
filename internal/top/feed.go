package top

import (
	"context"
	"strconv"

	"sync/atomic"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/studioctl/studioctl/internal/watch"
)

// HeaderEvery is how often an idle screen reads the header: a poll (no
// bus message) reads it only when the last is this old. Every read the bus
// caused, and every read of a view switched to, reads it too. doctor's
// checks read every job, which costs the most at 10,000 jobs
// (docs/benchmarks.md, "studioctl top").
const HeaderEvery = time.Minute

// Feed reads the view on screen and sends it to the program, live as
// --watch is (internal/watch): a read on every bus wake-up (coalesced), one
// more after a signal, and the fallback poll.
type Feed struct {
	src   Source
	wakes *watch.Wakes
	poll  time.Duration
	send  func(tea.Msg)
	view  atomic.Int32
	// Reads counts the reads (a test and the cost measurement read it).
	reads atomic.Int64
	trace func(why string)
}

// FeedOptions configure a Feed.
type FeedOptions struct {
	Source Source
	// Wakes are the bus's wake-ups (watch.Listen posts them); nil: poll only.
	Wakes *watch.Wakes
	// Poll is the fallback read interval; 0: watch.DefaultPoll.
	Poll time.Duration
	// Send delivers a message to the program (tea.Program.Send).
	Send func(tea.Msg)
	// Trace, when set, is told of every read after the first and why it
	// was made (--watch-trace's hook).
	Trace func(why string)
}

// NewFeed returns a feed on the replicas view.
func NewFeed(o FeedOptions) *Feed {
	w := o.Wakes
	if w == nil {
		w = watch.NewWakes()
	}
	return &Feed{src: o.Source, wakes: w, poll: o.Poll, send: o.Send, trace: o.Trace}
}

// Want makes v the view read, and reads it at once, and once more a
// moment later as after a signal (an action's effect reaches the rows with
// the replicas' next flush).
func (f *Feed) Want(v View) {
	f.view.Store(int32(v))
	f.wakes.Post(watch.Wake{Message: true, Signal: true})
}

// Reads is how many reads the feed made.
func (f *Feed) Reads() int64 { return f.reads.Load() }

// Run reads and sends until ctx is done. A failed read is sent as a
// ReadFailedMsg, and the next one that works clears it.
func (f *Feed) Run(ctx context.Context) error {
	failing := false
	var headerAt time.Time // when the header was last read
	load := func(ctx context.Context) (watch.View, error) {
		n := f.reads.Add(1)
		header := watch.Why(ctx) != "poll" || time.Since(headerAt) >= HeaderEvery
		if header {
			headerAt = time.Now()
		}
		s, err := f.src.Load(ctx, View(f.view.Load()), header)
		if err != nil {
			if ctx.Err() == nil {
				failing = true
				f.send(ReadFailedMsg{Err: oneLine(err.Error())})
			}
			// Not returned: the loop would end on a first read's error;
			// the screen shows it and the next occasion reads again.
			return watch.View{Key: "failed " + strconv.FormatInt(n, 10), Draw: func() error { return nil }}, nil
		}
		if failing {
			failing = false
			f.send(ReadFailedMsg{})
		}
		// Every read is drawn: relative times move, and a redraw costs
		// the screen nothing worth saving.
		return watch.View{Key: strconv.FormatInt(n, 10), Draw: func() error { f.send(SnapshotMsg(s)); return nil }}, nil
	}
	var trace func(string, bool)
	if f.trace != nil {
		trace = func(why string, _ bool) { f.trace(why) }
	}
	return watch.Loop(ctx, watch.Options{Load: load, Wakes: f.wakes, Poll: f.poll, Trace: trace})
}
