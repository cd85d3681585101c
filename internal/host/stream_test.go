package host_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// startStreamHost starts a replica with jobs and returns its address and
// a function that drains it and waits for the end.
func startStreamHost(t *testing.T, url, id string, js []jobs.Job) (string, func()) {
	t.Helper()
	ready := make(chan string, 1)
	h, err := host.New(host.Options{ConnString: url, ID: id, Version: "test", DrainDelay: 50 * time.Millisecond,
		OnReady: func(addr string) { ready <- addr }, Jobs: js, NoHousekeeping: true})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("%s stopped before ready: %v", id, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", id)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sigs <- os.Interrupt
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", id)
		}
	}
	t.Cleanup(stop)
	return addr, stop
}

// Two replicas: a client of B sees the runs of a job only A hosts, and
// B's drain sends it reconnect before its stream ends.
func TestAClientOfOneReplicaSeesRunsOfAnother(t *testing.T) {
	url := pgtest.NewDB(t)
	onA, err := jobs.Parse("a.yaml", []byte(`
jobs:
  - id: only-on-a
    scope: instance
    every: 1s
    run:
      sql: SELECT 1
`))
	if err != nil {
		t.Fatal(err)
	}
	startStreamHost(t, url, "stream-a", onA)
	addrB, drainB := startStreamHost(t, url, "stream-b", nil)

	resp, err := http.Get("http://" + addrB + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	want := func(what string, match func(string) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stream ended before %s", what)
				}
				if match(l) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s within 20s", what)
			}
		}
	}
	want("a finished run of only-on-a, run on stream-a", func(l string) bool {
		return strings.HasPrefix(l, "data: ") && strings.Contains(l, `"job_id": "only-on-a"`) &&
			strings.Contains(l, `"replica_id": "stream-a"`) && strings.Contains(l, `"outcome": "succeeded"`)
	})
	go drainB()
	want("reconnect from the draining replica", func(l string) bool { return l == "event: reconnect" })
	deadline := time.After(20 * time.Second)
	for {
		select {
		case _, ok := <-lines:
			if !ok {
				return // the stream ended after reconnect
			}
		case <-deadline:
			t.Fatal("the stream did not end after reconnect")
		}
	}
}
