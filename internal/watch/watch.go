// Package watch drives a live view of the shared tables (studioctl ...
// list --watch): it re-reads what the view shows when the bus says
// something changed, falls back to a slow poll for changes nobody
// announced (plain SQL), and redraws only when what is shown changed. It
// knows nothing of the command line: the caller reads and draws.
// docs/watch.md describes the behaviour.
package watch

import (
	"context"
	"sync"
	"time"

	"github.com/studioctl/studioctl/internal/jobstore"
)

// Defaults of Options.
const (
	// DefaultPoll is the fallback: a read at the latest this long after the
	// last one, for changes made without a bus message (plain SQL, time
	// passing: a lock expiring, a replica becoming gone).
	DefaultPoll = 10 * time.Second
	// DefaultSettle coalesces a burst of messages into one read.
	DefaultSettle = 100 * time.Millisecond
	// DefaultFollowUp is how long after a signal the view is read once more.
	// A signal wakes replicas (a pause, a trigger, a drain, a lease
	// release), and what they do in answer reaches the status rows with
	// their next flush, at most jobstore.FlushEvery later, which sends no
	// message of its own when it writes no run.
	DefaultFollowUp = jobstore.FlushEvery + 300*time.Millisecond
)

// Wake is what the bus said since the last Take: merged, so a burst of
// messages is one wake-up.
type Wake struct {
	// Message: at least one message arrived (a signal or a batch of run
	// seqs).
	Message bool
	// Signal: at least one of them was a signal, which replicas answer a
	// moment later (see DefaultFollowUp).
	Signal bool
	// Resync: the listener reconnected; messages may have been lost.
	Resync bool
}

func (w Wake) merge(o Wake) Wake {
	return Wake{Message: w.Message || o.Message, Signal: w.Signal || o.Signal, Resync: w.Resync || o.Resync}
}

// Wakes is a mailbox of wake-ups that never blocks its sender: posts merge
// until the receiver takes them. The zero value is not usable; use NewWakes.
type Wakes struct {
	c       chan struct{}
	mu      sync.Mutex
	pending Wake
}

// NewWakes returns an empty mailbox.
func NewWakes() *Wakes { return &Wakes{c: make(chan struct{}, 1)} }

// Post adds w to what is pending and wakes the receiver.
func (b *Wakes) Post(w Wake) {
	b.mu.Lock()
	b.pending = b.pending.merge(w)
	b.mu.Unlock()
	select {
	case b.c <- struct{}{}:
	default:
	}
}

// C is ready when something was posted.
func (b *Wakes) C() <-chan struct{} { return b.c }

// Take returns what was posted since the last Take, and clears it.
func (b *Wakes) Take() Wake {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.pending
	b.pending = Wake{}
	return w
}

// View is one read of what a watch shows.
type View struct {
	// Key is what is shown minus what moves on its own (ages, heartbeat
	// and renewal times, remaining times): two reads with the same Key show
	// the same thing, and the second is not drawn.
	Key string
	// Draw shows the view.
	Draw func() error
}

// Options of Loop. Zero durations mean the defaults.
type Options struct {
	// Load reads the view.
	Load func(context.Context) (View, error)
	// Wakes are the bus's wake-ups; nil: poll only.
	Wakes *Wakes
	// Poll, Settle and FollowUp: see DefaultPoll, DefaultSettle, DefaultFollowUp.
	Poll, Settle, FollowUp time.Duration
	// Notice tells the user something on the side (stderr): a read that
	// failed during the watch. Nil: say nothing.
	Notice func(string)
	// Trace, when set, is told of every read after the first: why it was
	// made ("bus", "follow-up", "poll") and whether it was drawn (a test
	// hook: it shows that an unchanged read is not drawn).
	Trace func(why string, drawn bool)
}

// Loop reads and draws the view, then re-reads it on every wake-up
// (coalesced over Settle), once more FollowUp after a signal, and at the
// latest Poll after the last read; it draws only reads whose Key differs
// from the last drawn. It returns nil when ctx is done, and the error of
// the first read or of a draw; a later failed read is told to Notice (once
// until a read succeeds again) and retried at the next occasion.
func Loop(ctx context.Context, o Options) error {
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.FollowUp <= 0 {
		o.FollowUp = DefaultFollowUp
	}
	if o.Notice == nil {
		o.Notice = func(string) {}
	}
	var wakeC <-chan struct{}
	if o.Wakes != nil {
		wakeC = o.Wakes.C()
	}
	v, err := o.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := v.Draw(); err != nil {
		return err
	}
	last := v.Key
	failing := false

	poll := time.NewTimer(o.Poll)
	defer poll.Stop()
	settle := stoppedTimer()
	defer settle.Stop()
	follow := stoppedTimer()
	defer follow.Stop()
	settling := false

	read := func(why string) error {
		poll.Reset(o.Poll)
		v, err := o.Load(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !failing {
				o.Notice("watch: read failed, retrying: " + err.Error())
				failing = true
			}
			return nil
		}
		if failing {
			o.Notice("watch: reading again")
			failing = false
		}
		drawn := v.Key != last
		if o.Trace != nil {
			o.Trace(why, drawn)
		}
		if !drawn {
			return nil
		}
		last = v.Key
		return v.Draw()
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-wakeC:
			w := o.Wakes.Take()
			if w.Signal || w.Resync {
				follow.Reset(o.FollowUp)
			}
			if !settling {
				settling = true
				settle.Reset(o.Settle)
			}
		case <-settle.C:
			settling = false
			err = read("bus")
		case <-follow.C:
			err = read("follow-up")
		case <-poll.C:
			err = read("poll")
		}
		if err != nil {
			return err
		}
	}
}

// stoppedTimer is a timer that has not been started.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}
