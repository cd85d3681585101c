package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quietFor is how long a test waits to conclude that nothing arrives. It
// bounds a negative check, it does not synchronise anything.
const quietFor = 300 * time.Millisecond

// waitFor bounds every positive check.
const waitFor = 10 * time.Second

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func startProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{conn: c, r: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, line string) {
	t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(waitFor))
	if _, err := io.WriteString(c.conn, line+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func (c *client) read(within time.Duration) (string, error) {
	c.conn.SetReadDeadline(time.Now().Add(within))
	s, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return s[:len(s)-1], nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyForwardsBothWays(t *testing.T) {
	p := startProxy(t, echoServer(t))
	if p.Addr() != "127.0.0.1:"+strconv.Itoa(p.Port()) {
		t.Fatalf("Addr %q does not match Port %d", p.Addr(), p.Port())
	}
	c := dial(t, p.Addr())
	for i := range 3 {
		want := "hello " + strconv.Itoa(i)
		c.send(t, want)
		got, err := c.read(waitFor)
		if err != nil || got != want {
			t.Fatalf("read = %q, %v; want %q", got, err, want)
		}
	}
}

func TestBlackholeHoldsBytesUntilRestore(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	c.send(t, "before")
	if got, err := c.read(waitFor); err != nil || got != "before" {
		t.Fatalf("read = %q, %v", got, err)
	}

	p.Blackhole()
	c.send(t, "during")
	if got, err := c.read(quietFor); !isTimeout(err) {
		t.Fatalf("read during black hole = %q, %v; want a timeout", got, err)
	}
	// A new connection is accepted but goes nowhere.
	c2 := dial(t, p.Addr())
	c2.send(t, "new")
	if got, err := c2.read(quietFor); !isTimeout(err) {
		t.Fatalf("read on new connection during black hole = %q, %v; want a timeout", got, err)
	}

	p.Restore()
	if got, err := c.read(waitFor); err != nil || got != "during" {
		t.Fatalf("read after restore = %q, %v; want the held line", got, err)
	}
	if got, err := c2.read(waitFor); err != nil || got != "new" {
		t.Fatalf("read on new connection after restore = %q, %v", got, err)
	}
	c.send(t, "after")
	if got, err := c.read(waitFor); err != nil || got != "after" {
		t.Fatalf("read = %q, %v", got, err)
	}
}

func TestBlackholeAndRestoreAreIdempotent(t *testing.T) {
	p := startProxy(t, echoServer(t))
	p.Restore()
	p.Blackhole()
	p.Blackhole()
	p.Restore()
	p.Restore()
	c := dial(t, p.Addr())
	c.send(t, "x")
	if got, err := c.read(waitFor); err != nil || got != "x" {
		t.Fatalf("read = %q, %v", got, err)
	}
}

func TestCutAllClosesConnectionsAndKeepsListening(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	c.send(t, "x")
	if _, err := c.read(waitFor); err != nil {
		t.Fatal(err)
	}
	p.CutAll()
	if got, err := c.read(waitFor); err == nil || isTimeout(err) {
		t.Fatalf("read after CutAll = %q, %v; want a closed connection", got, err)
	}
	c2 := dial(t, p.Addr())
	c2.send(t, "y")
	if got, err := c2.read(waitFor); err != nil || got != "y" {
		t.Fatalf("read on a new connection = %q, %v", got, err)
	}
}

func TestCutAllDuringBlackholeClosesWaitingConnections(t *testing.T) {
	p := startProxy(t, echoServer(t))
	p.Blackhole()
	c := dial(t, p.Addr())
	c.send(t, "x")
	p.CutAll()
	// The proxy may not have registered the connection before CutAll; a
	// second CutAll after a failed quiet read covers that.
	deadline := time.Now().Add(waitFor)
	for {
		_, err := c.read(quietFor)
		if err != nil && !isTimeout(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("connection accepted during a black hole survived CutAll")
		}
		p.CutAll()
	}
}

func TestCloseEndsEverything(t *testing.T) {
	target := echoServer(t)
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	c.send(t, "x")
	if _, err := c.read(waitFor); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	dial(t, p.Addr()) // left waiting in the black hole
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
	if got, err := c.read(waitFor); err == nil || isTimeout(err) {
		t.Fatalf("read after Close = %q, %v; want a closed connection", got, err)
	}
}

func TestUnreachableTargetClosesClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startProxy(t, addr)
	c := dial(t, p.Addr())
	if got, err := c.read(waitFor); err == nil || isTimeout(err) {
		t.Fatalf("read = %q, %v; want the connection closed", got, err)
	}
}
