package top

import (
	"context"
	"strconv"

	"sync/atomic"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/studioctl/studioctl/internal/watch"
)

// HeaderEvery is the shortest time between two reads of the header when
// nothing changed (its mark is the same): its checks read every job, which
// costs the most at 10,000 jobs (docs/benchmarks.md, "studioctl top").
// What its checks judge by time alone (a job becoming overdue, a pause's
// end, a lock or a lease expiring) is in its mark (Source.Mark), so it
// shows at the next poll; the refresh is for what is left (a crash
// leaving the last 24 h, relative ages in its details).
const HeaderEvery = time.Minute

// Reading an unchanged view again (for its relative times and what
// changes with time alone that the marks do not take) is bounded by the
// read's own cost: a read that
// took d is made again, when its mark says nothing changed, only
// IdleShare times d later (so idle reading takes at most 1/IdleShare of
// the time), and at the latest after RefreshMax. A read of 10 jobs takes
// a few milliseconds, so it is read at every poll as before; one of
// 10,000 jobs takes seconds, so it is read every few minutes, plus every
// time its mark changes.
const (
	IdleShare  = 100
	RefreshMax = 5 * time.Minute
)

// refreshAfter is how long an unchanged read whose last read took cost
// stays on screen: IdleShare times its cost, at least least, at most
// RefreshMax.
func refreshAfter(cost, least time.Duration) time.Duration {
	return min(max(cost*IdleShare, least), max(RefreshMax, least))
}

// lastRead is what the feed knows of the last read of a view or of the
// header.
type lastRead struct {
	ok   bool
	mark string
	at   time.Time
	cost time.Duration
}

// due says whether a read is needed now: none yet, no mark to compare,
// the mark changed, or the last read is older than refreshAfter.
func (r lastRead) due(mark string, now time.Time, least time.Duration) bool {
	return !r.ok || mark == "" || mark != r.mark || now.Sub(r.at) >= refreshAfter(r.cost, least)
}

// Feed reads the view on screen and sends it to the program, live as
// --watch is (internal/watch): on every bus wake-up (coalesced), once more
// after a signal, and at the fallback poll. Each of these first reads the
// view's and the header's marks (Source.Mark, one cheap statement), and
// reads the view, or the header, only when its mark changed, when the view
// was switched to, or when refreshAfter passed. The marks read the tables,
// not the bus, so a change made while the bus was lost shows at the next
// poll.
type Feed struct {
	src   Source
	wakes *watch.Wakes
	poll  time.Duration
	send  func(tea.Msg)
	view  atomic.Int32
	// force: the next read reads the view and the header whatever their
	// marks (Want).
	force atomic.Bool
	// reads counts the reads of a view, marks the reads of the marks (a
	// test and the cost measurement read them).
	reads atomic.Int64
	marks atomic.Int64
	trace func(why string)
	now   func() time.Time
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
	// Now is the clock of refreshAfter (a test's); nil: time.Now.
	Now func() time.Time
}

// NewFeed returns a feed on the replicas view.
func NewFeed(o FeedOptions) *Feed {
	w := o.Wakes
	if w == nil {
		w = watch.NewWakes()
	}
	if o.Poll <= 0 {
		o.Poll = watch.DefaultPoll
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Feed{src: o.Source, wakes: w, poll: o.Poll, send: o.Send, trace: o.Trace, now: o.Now}
}

// Want makes v the view read, and reads it (and the header) at once
// whatever their marks, and once more a moment later as after a signal
// (an action's effect reaches the rows with the replicas' next flush).
func (f *Feed) Want(v View) {
	f.view.Store(int32(v))
	f.force.Store(true)
	f.wakes.Post(watch.Wake{Message: true, Signal: true})
}

// Reads is how many reads of a view the feed made.
func (f *Feed) Reads() int64 { return f.reads.Load() }

// Marks is how many times the feed read the marks.
func (f *Feed) Marks() int64 { return f.marks.Load() }

// Run reads and sends until ctx is done. A failed read is sent as a
// ReadFailedMsg, and the next one that works clears it.
func (f *Feed) Run(ctx context.Context) error {
	failing := false
	var views [numViews]lastRead
	var header lastRead
	var n int64 // reads that changed the screen
	key := "0"  // the last of them, for watch's "unchanged, not drawn"
	fail := func(ctx context.Context, err error) (watch.View, error) {
		if ctx.Err() == nil {
			failing = true
			f.send(ReadFailedMsg{Err: oneLine(err.Error())})
		}
		// Not returned: the loop would end on a first read's error; the
		// screen shows it and the next occasion reads again.
		n++
		key = "failed " + strconv.FormatInt(n, 10)
		return watch.View{Key: key, Draw: func() error { return nil }}, nil
	}
	load := func(ctx context.Context) (watch.View, error) {
		v := View(f.view.Load())
		forced := f.force.Swap(false)
		f.marks.Add(1)
		m, err := f.src.Mark(ctx, v)
		if err != nil {
			m = Marks{} // unknown: read both
		}
		now := f.now()
		viewDue := forced || views[v].due(m.View, now, f.poll)
		headerDue := forced || header.due(m.Header, now, HeaderEvery)
		if !viewDue && !headerDue {
			if failing {
				failing = false
				f.send(ReadFailedMsg{})
			}
			return watch.View{Key: key, Draw: func() error { return nil }}, nil
		}
		snap := Snapshot{View: v}
		if viewDue {
			f.reads.Add(1)
			snap, err = f.src.Load(ctx, v)
			if err != nil {
				return fail(ctx, err)
			}
			views[v] = lastRead{ok: true, mark: m.View, at: now, cost: f.now().Sub(now)}
		}
		if headerDue {
			at := f.now()
			snap.Header, err = f.src.Header(ctx)
			if err != nil {
				return fail(ctx, err)
			}
			header = lastRead{ok: true, mark: m.Header, at: now, cost: f.now().Sub(at)}
		}
		if failing {
			failing = false
			f.send(ReadFailedMsg{})
		}
		n++
		key = strconv.FormatInt(n, 10)
		if !viewDue {
			return watch.View{Key: key, Draw: func() error { f.send(HeaderMsg(snap.Header)); return nil }}, nil
		}
		return watch.View{Key: key, Draw: func() error { f.send(SnapshotMsg(snap)); return nil }}, nil
	}
	var trace func(string, bool)
	if f.trace != nil {
		trace = func(why string, _ bool) { f.trace(why) }
	}
	return watch.Loop(ctx, watch.Options{Load: load, Wakes: f.wakes, Poll: f.poll, Trace: trace})
}
