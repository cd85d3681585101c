// Package faultproxy is a small TCP proxy that fault tests put between a
// client and PostgreSQL to black-hole or cut its connections (SPEC §11:
// faults are injected, not imagined).
//
// Black hole semantics: Blackhole pauses the proxy. Each forwarding
// goroutine stops reading from its source, so bytes pile up in the kernel's
// TCP buffers of both peers and no connection is closed; a read that was
// already in progress completes and its bytes are held, not dropped. New
// connections are accepted but not connected to the target. Restore resumes
// everything: held bytes are delivered, existing connections carry on as if
// the network had been slow, and waiting new connections are forwarded. No
// byte is lost by a black hole; to lose a connection, use CutAll.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the connection to the target.
const dialTimeout = 10 * time.Second

// copyBufferBytes is the size of each forwarding buffer.
const copyBufferBytes = 32 << 10

// Proxy forwards every connection accepted on a loopback port to a target
// address. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu     sync.Mutex
	open   chan struct{}      // closed while forwarding; open (blocking) during a black hole
	pairs  map[*pair]struct{} // live connections
	closed bool
	wg     sync.WaitGroup // every goroutine of the proxy
}

// pair is one client connection and, once dialled, its upstream connection.
type pair struct {
	client   net.Conn
	mu       sync.Mutex
	upstream net.Conn
	ctx      context.Context // cancelled by shut
	cancel   context.CancelFunc
	once     sync.Once
}

// shut closes both sides. With rst it asks for a reset instead of an
// orderly close (SO_LINGER 0).
func (c *pair) shut(rst bool) {
	c.once.Do(func() {
		c.cancel()
		c.mu.Lock()
		up := c.upstream
		c.mu.Unlock()
		for _, conn := range []net.Conn{c.client, up} {
			if conn == nil {
				continue
			}
			if tc, ok := conn.(*net.TCPConn); ok && rst {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	})
}

// Start listens on 127.0.0.1:0 and forwards every connection to target
// ("host:port").
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	open := make(chan struct{})
	close(open)
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		open:   open,
		pairs:  make(map[*pair]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Blackhole stops forwarding in both directions without closing anything;
// see the package documentation.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already black-holed
	}
}

// Restore ends a black hole: held bytes are delivered and forwarding
// resumes.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// CutAll resets every current connection, on both sides, and keeps
// accepting new ones.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.pairs))
	for c := range p.pairs {
		pairs = append(pairs, c)
	}
	p.mu.Unlock()
	for _, c := range pairs {
		c.shut(true)
	}
}

// Close stops listening, closes every connection and waits for every
// goroutine of the proxy to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

// gate blocks while the proxy is black-holed. It reports false if c was shut
// meanwhile.
func (p *Proxy) gate(c *pair) bool {
	for {
		p.mu.Lock()
		open := p.open
		p.mu.Unlock()
		select {
		case <-c.ctx.Done():
			return false
		case <-open:
		}
		// A black hole may have started again between the close of open and
		// now; look once more so that a black hole always wins.
		p.mu.Lock()
		still := open == p.open
		p.mu.Unlock()
		if still {
			return true
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		ctx, cancel := context.WithCancel(p.ctx)
		c := &pair{client: conn, ctx: ctx, cancel: cancel}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			cancel()
			conn.Close()
			return
		}
		p.pairs[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(c *pair) {
	defer p.wg.Done()
	defer func() {
		c.shut(false)
		p.mu.Lock()
		delete(p.pairs, c)
		p.mu.Unlock()
	}()
	if !p.gate(c) {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, dialTimeout)
	up, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		return
	}
	c.mu.Lock()
	c.upstream = up
	c.mu.Unlock()
	if c.ctx.Err() != nil { // shut while dialling: shut may have missed up
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, up, c.client) }()
	go func() { defer wg.Done(); p.pipe(c, c.client, up) }()
	wg.Wait()
}

// pipe copies src to dst, pausing during black holes, until either side
// fails; then it shuts the pair.
func (p *Proxy) pipe(c *pair, dst, src net.Conn) {
	defer c.shut(false)
	buf := make([]byte, copyBufferBytes)
	for {
		if !p.gate(c) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(c) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
