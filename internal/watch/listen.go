package watch

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/stream"
)

// Listen timings.
const (
	// checkEvery is how often the notifier looks whether its listener is
	// connected (no database round trip: the listener's own state).
	checkEvery = time.Second
	// retryEvery is how often a listener that never connected is tried again.
	retryEvery = 2 * time.Second
)

// ListenOptions configure Listen.
type ListenOptions struct {
	// Config and ConnString are the database to listen on (ConnString
	// only scrubs passwords from errors).
	Config     *pgx.ConnConfig
	ConnString string
	// Wakes receives a wake-up for every message and every reconnection.
	Wakes *Wakes
	// Notice tells the user, once per outage, that the bus is lost (the
	// watch then relies on its poll) and that it is back. Nil: say nothing.
	Notice func(string)
	// Lost is the text of the notice of a lost bus; Back of its return.
	Lost, Back string
	// Listener tunes the bus listener (tests shorten its ping); its Handler
	// and OnResync are set by Listen.
	Listener bus.Options
}

// Notifier holds the LISTEN connection of a watch.
type Notifier struct {
	o      ListenOptions
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	l    *bus.Listener
	told bool // the loss of the connection was told, its return not yet
}

// Listen starts listening on the bus in the background and returns at
// once: a listener that cannot connect is retried, and meanwhile the watch
// polls. Stop ends it.
func Listen(o ListenOptions) *Notifier {
	if o.Notice == nil {
		o.Notice = func(string) {}
	}
	if o.Lost == "" {
		o.Lost = "watch: lost the bus connection; reading the database by poll until it is back"
	}
	if o.Back == "" {
		o.Back = "watch: bus connection back"
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{o: o, cancel: cancel, done: make(chan struct{})}
	go n.run(ctx)
	return n
}

// Stop stops listening and waits for the listener to close.
func (n *Notifier) Stop() {
	n.cancel()
	<-n.done
}

func (n *Notifier) run(ctx context.Context) {
	defer close(n.done)
	lo := n.o.Listener
	lo.Handler = func(m bus.Message) {
		if m.Type == bus.TypeFrame && m.Stream != stream.BusStream {
			return // other stream frames carry no change of the tables
		}
		// An events frame (internal/stream) says a transaction changed runs,
		// replicas, leases or audited state: a lease claimed after its TTL,
		// for one, has no signal of its own.
		n.o.Wakes.Post(Wake{Message: true, Signal: m.Type == bus.TypeSignal})
	}
	lost := false
	lo.OnResync = func() {
		n.o.Wakes.Post(Wake{Resync: true})
		n.mu.Lock()
		defer n.mu.Unlock()
		if !n.told {
			// Lost and back between two checks: say it once now.
			n.o.Notice(n.o.Lost)
		}
		n.told = false
		n.o.Notice(n.o.Back)
	}
	// Connect, retrying until it works.
	var l *bus.Listener
	for l == nil {
		l = bus.NewListener(n.o.Config, n.o.ConnString, lo)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.Start(sctx)
		cancel()
		if err != nil {
			l = nil
			if ctx.Err() != nil {
				return
			}
			if !lost {
				n.o.Notice(n.o.Lost + ": " + err.Error())
				lost = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryEvery):
			}
		}
	}
	defer l.Stop()
	if lost {
		n.o.Notice(n.o.Back)
		lost = false
	}
	// Messages sent before it listened are lost: read again, also after a
	// first connection that worked at once. The watch's first read may
	// have been made before the LISTEN; a change between the two had no
	// wake-up until the poll (jobs_occurrences.txtar failed so in a loaded
	// CI run: the row inserted after the first draw was never drawn).
	n.o.Wakes.Post(Wake{Resync: true})
	n.mu.Lock()
	n.l = l
	n.mu.Unlock()
	// The listener reconnects by itself; OnResync says when it is back.
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Under the lock, so a reconnection (OnResync) is told after.
		n.mu.Lock()
		if !l.Connected() && !n.told {
			n.told = true
			n.o.Notice(n.o.Lost)
		}
		n.mu.Unlock()
	}
}

// Connected reports whether the listener is connected now.
func (n *Notifier) Connected() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.l != nil && n.l.Connected()
}
