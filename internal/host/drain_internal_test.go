package host

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
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
	want := []string{"mark draining", "release leases", "drain delay", "stream clients", "control requests",
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
