package bus

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/startstop"
)

// Listener timings. With the defaults a silently dead connection is
// noticed at most DefaultPingEvery+DefaultPingTimeout (6 s) after its last
// sign of life, inside the 10 s of SPEC §6.
const (
	DefaultPingEvery   = 3 * time.Second // periodic round trip on the listener connection
	DefaultPingTimeout = 3 * time.Second // its deadline
	DefaultBackoffMin  = 100 * time.Millisecond
	DefaultBackoffMax  = 2 * time.Second
	// UndecodableLogEvery is the least time between two log lines about
	// undecodable payloads; the ones in between are only counted.
	UndecodableLogEvery = time.Minute
)

const (
	// connectTimeout bounds one connection attempt including LISTEN: a
	// black-holed network can hang a connect forever.
	connectTimeout = 5 * time.Second
	// closeTimeout bounds the goodbye sent when closing a connection.
	closeTimeout = time.Second
	// listenSQL starts listening; Channel is lower case and needs no quoting.
	listenSQL = "LISTEN " + Channel
)

// Options configure a Listener. Zero durations mean the defaults.
type Options struct {
	Logger *slog.Logger // nil: discard
	// Handler is called for every message on arrival, from the listener
	// goroutine, in the order of arrival. It must be quick (while it runs,
	// nothing else is received) and must not call Stop.
	Handler func(Message)
	// OnResync is called after every reconnection (not the first connect),
	// once LISTEN is active again: messages sent while the bus was down are
	// lost, so caches must be cleared and stream clients told to resync. It
	// runs on the listener goroutine, like Handler.
	OnResync func()

	PingEvery   time.Duration // idle time before a round trip on the listener connection
	PingTimeout time.Duration // deadline of that round trip
	BackoffMin  time.Duration // first delay before reconnecting
	BackoffMax  time.Duration // largest delay between attempts

	// Now tells the time for the rate limit of the undecodable-payload
	// log line (tests inject a fake); default time.Now.
	Now func() time.Time
}

// Listener holds the dedicated LISTEN connection of one process and
// reconnects it when it dies. Create it with NewListener, then Start and
// Stop it; its methods are safe for concurrent use.
type Listener struct {
	cfg        *pgx.ConnConfig
	connString string
	o          Options
	log        *slog.Logger

	startstop.Base

	stateMu   sync.Mutex
	connected bool
	downSince time.Time // last moment the lost connection was known healthy

	reconnects  atomic.Int64
	received    atomic.Int64
	undecodable atomic.Int64

	conns *netConns // every network connection of the listener

	// Only the loop goroutine touches these.
	badLoggedAt   time.Time // last warning about an undecodable payload
	badSuppressed int64     // undecodable payloads since, not logged
}

// NewListener returns a stopped listener for cfg (from db.ParseConnConfig).
// connString is used only to scrub passwords from errors.
func NewListener(cfg *pgx.ConnConfig, connString string, o Options) *Listener {
	cfg = cfg.Copy()
	conns := newNetConns(cfg.DialFunc)
	cfg.DialFunc = conns.Dial
	// pgx buffers notifications that arrive during other queries (the
	// ping) only when no callback of its own is set.
	cfg.OnNotification = nil
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PingEvery <= 0 {
		o.PingEvery = DefaultPingEvery
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = DefaultPingTimeout
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = DefaultBackoffMin
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = o.BackoffMin
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Listener{
		cfg:        cfg,
		connString: connString,
		o:          o,
		log:        o.Logger,
		conns:      conns,
	}
}

// Start connects and runs LISTEN, returning the error if that first attempt
// fails (ctx bounds it), then receives in its own goroutine until Stop. The
// goroutine does not end with ctx: the bus keeps working while a replica
// drains, and only Stop ends it. The first connect runs on the listener's
// own goroutine, so a Stop that comes during Start ends the connect and
// waits for it; a failed Start leaves no connection behind.
func (l *Listener) Start(ctx context.Context) error {
	runCtx, err := l.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start bus listener: %w", err)
	}
	first := make(chan error, 1)
	if !l.Go(func() { l.run(ctx, runCtx, first) }) {
		return fmt.Errorf("start bus listener: %w", startstop.ErrStopped)
	}
	if err := <-first; err != nil {
		l.StartFailed()
		return fmt.Errorf("start bus listener: %w", err)
	}
	l.MarkStarted()
	return nil
}

// Stop ends the listener and waits for its goroutine, which closes the
// connection. It is safe to call more than once, concurrently, and without
// Start; a stopped listener cannot be started again.
func (l *Listener) Stop() { l.Base.Stop() }

// Connected reports whether the listener connection is up and listening.
func (l *Listener) Connected() bool {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	return l.connected
}

// DownFor is 0 while connected and while not running (before Start, after
// Stop); otherwise it is the time since the lost connection was last known
// healthy, on the monotonic clock.
func (l *Listener) DownFor() time.Duration {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	if l.connected || l.downSince.IsZero() {
		return 0
	}
	return time.Since(l.downSince)
}

// Reconnects counts successful reconnections (the first connect excluded).
func (l *Listener) Reconnects() int64 { return l.reconnects.Load() }

// Received counts the messages handled.
func (l *Listener) Received() int64 { return l.received.Load() }

// Undecodable counts the payloads skipped because Decode rejected them.
func (l *Listener) Undecodable() int64 { return l.undecodable.Load() }

func (l *Listener) setConnected() {
	l.stateMu.Lock()
	l.connected, l.downSince = true, time.Time{}
	l.stateMu.Unlock()
}

func (l *Listener) setDown(since time.Time) {
	l.stateMu.Lock()
	l.connected, l.downSince = false, since
	l.stateMu.Unlock()
}

// setStopped makes DownFor 0 once the listener no longer runs.
func (l *Listener) setStopped() {
	l.stateMu.Lock()
	l.connected, l.downSince = false, time.Time{}
	l.stateMu.Unlock()
}

// connect opens the dedicated connection and runs LISTEN, within
// connectTimeout.
func (l *Listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := db.Connect(ctx, l.cfg, l.connString)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		l.closeConn(conn)
		return nil, db.Scrub(fmt.Errorf("listen %s: %w", Channel, err), l.connString)
	}
	return conn, nil
}

// closeConn closes conn; pgx may finish the job in the background, which
// Stop waits for.
func (l *Listener) closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	conn.Close(ctx)
	l.conns.closed(conn.PgConn())
}

// run is the loop goroutine: the first connect (bounded by startCtx and
// runCtx, its result sent on first), then receive until the connection
// fails, then reconnect, until runCtx ends.
func (l *Listener) run(startCtx, ctx context.Context, first chan<- error) {
	defer l.conns.stop()
	connectCtx, cancel := context.WithCancelCause(startCtx)
	unhook := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	conn, err := l.connect(connectCtx)
	unhook()
	cancel(nil)
	if err != nil {
		first <- err
		return
	}
	l.setConnected()
	l.log.Info("bus: listening", "channel", Channel, "database", db.Describe(l.cfg))
	first <- nil
	defer l.setStopped()
	for {
		healthyAt, err := l.receive(ctx, conn)
		l.closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		l.setDown(healthyAt)
		l.log.Warn("bus: connection lost, reconnecting", "error", db.Scrub(err, l.connString))
		conn = l.reconnect(ctx)
		if conn == nil {
			return
		}
		n := l.reconnects.Add(1)
		down := l.DownFor()
		l.setConnected()
		l.log.Info("bus: reconnected", "down_for", down.String(), "reconnects", n)
		if l.o.OnResync != nil {
			l.o.OnResync()
		}
	}
}

// receive hands every notification of conn to the handler. When the
// connection stays quiet for PingEvery it makes a round trip with deadline
// PingTimeout, so a silently dead connection is noticed. It returns the
// error that ended it and the last moment the connection was known
// healthy.
func (l *Listener) receive(ctx context.Context, conn *pgx.Conn) (time.Time, error) {
	for {
		healthyAt := time.Now()
		waitCtx, cancel := context.WithTimeout(ctx, l.o.PingEvery)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		if n != nil {
			l.handle(n)
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return healthyAt, ctx.Err()
		}
		if !pgconn.Timeout(err) {
			return healthyAt, fmt.Errorf("wait for notification: %w", err)
		}
		// Quiet for PingEvery: prove the connection still answers.
		// Notifications that arrive meanwhile are buffered by pgx and
		// returned by the next WaitForNotification.
		pingCtx, cancel := context.WithTimeout(ctx, l.o.PingTimeout)
		err = conn.Ping(pingCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return healthyAt, ctx.Err()
			}
			return healthyAt, fmt.Errorf("ping listener connection (deadline %s): %w", l.o.PingTimeout, err)
		}
	}
}

// reconnect tries to connect with exponential backoff until it succeeds or
// ctx ends (then it returns nil).
func (l *Listener) reconnect(ctx context.Context) *pgx.Conn {
	delay := l.o.BackoffMin
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(jitter(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		conn, err := l.connect(ctx)
		if err == nil {
			return conn
		}
		if ctx.Err() != nil {
			return nil
		}
		l.log.Warn("bus: reconnect failed", "attempt", attempt, "down_for", l.DownFor().String(), "error", err)
		delay = min(2*delay, l.o.BackoffMax)
	}
}

// jitter spreads reconnections of many replicas: d minus up to a quarter.
func jitter(d time.Duration) time.Duration {
	q := int64(d / 4)
	if q <= 0 {
		return d
	}
	return d - time.Duration(rand.Int64N(q))
}

// handle decodes one notification and hands it to the handler. Payloads
// that do not decode are counted and skipped. A sender that floods the
// channel must not flood the log: one warning at most every
// UndecodableLogEvery, naming how many were skipped without a line since
// the last one.
func (l *Listener) handle(n *pgconn.Notification) {
	if n.Channel != Channel {
		return
	}
	m, err := Decode(n.Payload)
	if err != nil {
		total := l.undecodable.Add(1)
		now := l.o.Now()
		if !l.badLoggedAt.IsZero() && now.Sub(l.badLoggedAt) < UndecodableLogEvery && now.Sub(l.badLoggedAt) >= 0 {
			l.badSuppressed++
			return
		}
		l.log.Warn("bus: skipping undecodable payload",
			"error", err, "sender_pid", n.PID, "payload_bytes", len(n.Payload),
			"suppressed_since_last_log", l.badSuppressed, "undecodable_total", total)
		l.badLoggedAt, l.badSuppressed = now, 0
		return
	}
	l.received.Add(1)
	if l.o.Handler != nil {
		l.o.Handler(m)
	}
}
