package stream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A client that connects while the database cannot be read (a failover, a
// restart) must be told to come back, not refused for good: EventSource
// gives up on any status but 200, so a 503 during a database blip ended
// every plain EventSource client that reconnected then. It gets a 200
// stream that says why and when to retry, and ends, so EventSource
// reconnects by itself.
func TestAClientWhileTheDatabaseIsDownIsToldToRetry(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	pool.Close() // the database cannot be read now

	resp := get(t, srv, "/?since=0", nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("while the database is down: %d %q %q, want a 200 event stream", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if !strings.Contains(string(body), "retry: ") || !strings.Contains(string(body), "cannot read the database") {
		t.Fatalf("while the database is down: %q, want a retry and the reason", body)
	}
}

// HEAD /v1/events (a monitor's probe; Go's mux sends HEAD to a GET route)
// answers the headers and ends: it is not a client that stays subscribed,
// with no body to ever read, until the prober hangs up.
func TestHeadIsAnsweredWithoutSubscribing(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodHead, srv.URL+"/?since=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := srv.Client().Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("HEAD: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("HEAD: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if n := h.Clients(); n != 0 {
		t.Fatalf("HEAD left %d subscribed clients", n)
	}
	post, err := srv.Client().Post(srv.URL+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", post.StatusCode)
	}
}
