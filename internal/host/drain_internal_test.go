package host

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// The drain order is the documented one (docs/services.md).
func TestTheDrainIsThisOrderedListOfStops(t *testing.T) {
	h, err := New(Options{ID: "order"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range h.stops(true) {
		got = append(got, s.name)
	}
	want := []string{"mark draining", "release leases", "drain delay", "stream clients", "overdue metric", "control requests",
		"runner", "run store", "bus", "registry", "http server", "pool"}
	if !slices.Equal(got, want) {
		t.Fatalf("drain order\n got %q\nwant %q", got, want)
	}
	// Every step is safe on a host that started nothing (a failed start
	// runs the same list).
	h.stopAll(h.stops(false))
	h.stopAll(h.stops(true))
}

func TestHTTPServerRefusesATakenAddressAndStopsItsServeGoroutine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := listenHTTP(taken.Addr().String(), http.NotFoundHandler(), nil); err == nil {
		t.Fatal("listenHTTP on a taken address succeeded")
	}

	s, err := listenHTTP("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
	s.Stop()
	// The address is free again: nothing listens.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address is still taken after Stop: %v", err)
	}
	ln.Close()

	// Stop without Start closes the listener too.
	n, err := listenHTTP("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr = n.Addr()
	n.Stop()
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Fatalf("Stop without Start left the address taken: %v", err)
	} else {
		ln.Close()
	}
	if err := n.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// The claimer refuses to start without the parts it claims for, and then
// counts as stopped; Stop is safe without Start and twice.
func TestTheRequestClaimerFailsToStartWithoutItsPartsAndStopsSafely(t *testing.T) {
	h, err := New(Options{ID: "claimer"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.req.Start(context.Background()); err == nil {
		t.Fatal("the claimer started without a pool, registry and runner")
	}
	select {
	case <-h.req.Stopped():
	default:
		t.Error("a failed Start must leave the claimer stopped")
	}
	h.req.Stop()
	h.req.Stop()
	fresh := newRequests()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); fresh.Stop() }()
	}
	wg.Wait()
}

// A kept-alive connection that carries no request is closed after the idle
// timeout (issue 21, finding 9: the server had none).
func TestHTTPServerClosesAnIdleConnection(t *testing.T) {
	s, err := listenHTTP("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.srv.IdleTimeout != httpIdleTimeout || httpIdleTimeout <= 0 {
		t.Fatalf("IdleTimeout %s, want httpIdleTimeout %s", s.srv.IdleTimeout, httpIdleTimeout)
	}
	s.srv.IdleTimeout = 200 * time.Millisecond // the same server, a shorter bound
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the response, then wait: the server closes the connection (EOF)
	// well before the 10 s deadline.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the idle connection was not closed by the server: %v", err)
	}
}
