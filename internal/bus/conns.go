package bus

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// errListenerStopped refuses dials once the listener has stopped.
var errListenerStopped = errors.New("bus listener stopped")

// netConns tracks every network connection a listener dials, so that Stop
// can end pgx's background cleanup. When a round trip fails mid-query, pgx
// closes the connection in a goroutine of its own that sends a cancel
// request on a new connection and drains the old one for up to 15 s; on a
// black-holed network that goroutine would outlive Stop. Closing the
// tracked connections ends it at once.
type netConns struct {
	dial pgconn.DialFunc

	mu      sync.Mutex
	stopped bool
	open    map[*trackedConn]struct{}
	closing []*pgconn.PgConn // closed connections whose cleanup may still run
}

func newNetConns(dial pgconn.DialFunc) *netConns {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return &netConns{dial: dial, open: make(map[*trackedConn]struct{})}
}

// Dial is the listener's pgconn.DialFunc.
func (t *netConns) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	t.mu.Lock()
	stopped := t.stopped
	t.mu.Unlock()
	if stopped {
		return nil, errListenerStopped
	}
	conn, err := t.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: conn, owner: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		conn.Close()
		return nil, errListenerStopped
	}
	t.open[c] = struct{}{}
	return c, nil
}

// closed records a connection that was closed, whose cleanup may go on in
// the background, and forgets those whose cleanup has finished.
func (t *netConns) closed(pg *pgconn.PgConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = append(t.closing, pg)
	t.closing = slices.DeleteFunc(t.closing, func(p *pgconn.PgConn) bool {
		select {
		case <-p.CleanupDone():
			return true
		default:
			return false
		}
	})
}

// stop refuses new dials, closes every open network connection and waits
// for every cleanup to finish.
func (t *netConns) stop() {
	t.mu.Lock()
	t.stopped = true
	open := make([]*trackedConn, 0, len(t.open))
	for c := range t.open {
		open = append(open, c)
	}
	closing := t.closing
	t.closing = nil
	t.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	for _, pg := range closing {
		<-pg.CleanupDone()
	}
}

type trackedConn struct {
	net.Conn
	owner *netConns
}

func (c *trackedConn) Close() error {
	c.owner.mu.Lock()
	delete(c.owner.open, c)
	c.owner.mu.Unlock()
	return c.Conn.Close()
}
