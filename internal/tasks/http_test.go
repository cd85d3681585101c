package tasks_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/tasks"
)

// request is what a test server saw.
type request struct {
	method string
	header http.Header
	host   string
	body   string
}

// newServer starts a test server with handler and returns it with the
// requests it receives.
func newServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, <-chan request) {
	t.Helper()
	seen := make(chan request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- request{method: r.Method, header: r.Header.Clone(), host: r.Host, body: string(body)}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func TestHTTPKind(t *testing.T) {
	if got := (tasks.HTTP{}).Kind(); got != "http" {
		t.Errorf("Kind() = %q", got)
	}
}

func TestHTTPSucceedsOn2xxWithTheBodyTail(t *testing.T) {
	t.Parallel()
	var body strings.Builder
	for i := 0; body.Len() < 3*tasks.OutputTailBytes; i++ {
		body.WriteString(strconv.Itoa(i) + "\n")
	}
	srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, body.String())
	})
	env := testEnv
	env.Cluster = "kafka-eu-1"
	res := tasks.HTTP{
		Method:  http.MethodPost,
		URL:     srv.URL + "/tasks/report",
		Headers: map[string]string{"Authorization": "Bearer s3cret", "Content-Type": "text/plain", "X-Studio-Job-Id": "spoofed"},
		Body:    "payload",
	}.Run(context.Background(), env)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	want := body.String()[body.Len()-tasks.OutputTailBytes:]
	if res.Output != want {
		t.Errorf("output is not the last %d bytes of the body (got %d bytes)", tasks.OutputTailBytes, len(res.Output))
	}
	r := <-seen
	if r.method != http.MethodPost || r.body != "payload" {
		t.Errorf("server saw %s with body %q", r.method, r.body)
	}
	for name, want := range map[string]string{
		"Authorization":       "Bearer s3cret",
		"Content-Type":        "text/plain",
		"X-Studio-Job-Id":     "nightly-report",
		"X-Studio-Replica-Id": "replica-7",
		"X-Studio-Run-Seq":    "42",
		"X-Studio-Cluster":    "kafka-eu-1",
	} {
		if got := r.header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func TestHTTPWithoutClusterOrMethod(t *testing.T) {
	t.Parallel()
	srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	res := tasks.HTTP{URL: srv.URL, Headers: map[string]string{"Host": "app.internal"}}.Run(context.Background(), testEnv)
	if res.Err != nil || res.Output != "" {
		t.Fatalf("Run = %q, %v", res.Output, res.Err)
	}
	r := <-seen
	if r.method != http.MethodGet {
		t.Errorf("method = %s, want GET when none is set", r.method)
	}
	if _, ok := r.header["X-Studio-Cluster"]; ok {
		t.Errorf("X-Studio-Cluster sent for a run without a cluster")
	}
	if r.host != "app.internal" {
		t.Errorf("host = %q, want the configured Host header", r.host)
	}
}

func TestHTTPFailsOnAnErrorStatus(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "report generator crashed", http.StatusInternalServerError)
	})
	res := tasks.HTTP{Method: http.MethodPost, URL: srv.URL}.Run(context.Background(), testEnv)
	if res.Err == nil || res.Err.Error() != "http 500 Internal Server Error" {
		t.Fatalf("error = %v, want http 500 Internal Server Error", res.Err)
	}
	var statusErr *tasks.HTTPStatusError
	if !errors.As(res.Err, &statusErr) || statusErr.StatusCode != 500 {
		t.Errorf("error %v is not an *HTTPStatusError with code 500", res.Err)
	}
	if res.Output != "report generator crashed\n" {
		t.Errorf("output = %q, want the body", res.Output)
	}
}

func TestHTTPDeadlineOnAHangingHandlerReturnsPromptly(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	tests := []struct {
		name     string
		timeout  time.Duration
		handler  http.HandlerFunc
		wantBody string
	}{
		{"a handler that never answers", 300 * time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}, ""},
		// Long enough for the first part of the body to arrive, even on a
		// loaded machine.
		{"a handler that stops in the middle of the body", time.Second, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "partial ")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}, "partial "},
	}
	srvs := make([]*httptest.Server, len(tests))
	for i, tt := range tests {
		srvs[i], _ = newServer(t, tt.handler)
	}
	t.Cleanup(func() { close(release) }) // runs before the servers close
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			start := time.Now()
			res := tasks.HTTP{Method: http.MethodPost, URL: srvs[i].URL}.Run(ctx, testEnv)
			if elapsed := time.Since(start); elapsed > tt.timeout+slack {
				t.Errorf("Run returned after %v", elapsed)
			}
			if !errors.Is(res.Err, context.DeadlineExceeded) {
				t.Errorf("error = %v, want one wrapping context.DeadlineExceeded", res.Err)
			}
			if res.Output != tt.wantBody {
				t.Errorf("output = %q, want %q", res.Output, tt.wantBody)
			}
			t.Logf("error: %v", res.Err)
		})
	}
}

func TestHTTPCancelWrapsTheCause(t *testing.T) {
	t.Parallel()
	srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan tasks.Result, 1)
	go func() { done <- tasks.HTTP{URL: srv.URL}.Run(ctx, testEnv) }()
	<-seen // the request reached the handler
	shutdown := errors.New("replica shutting down")
	cancel(shutdown)
	if res := <-done; !errors.Is(res.Err, shutdown) {
		t.Errorf("error = %v, want one wrapping the cause", res.Err)
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	res := tasks.HTTP{URL: url}.Run(context.Background(), testEnv)
	if res.Err == nil {
		t.Fatal("Run succeeded against a closed port")
	}
	t.Logf("error: %v", res.Err)
}

// The client a replica's http jobs share keeps the connection between
// runs, so a job that runs every second does not connect every second;
// a task without it (Client nil) connects once per run and leaves no
// connection open. Both send each run's own headers.
func TestHTTPSharedClientReusesTheConnectionBetweenRuns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	conns := map[net.Conn]http.ConnState{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get(tasks.HeaderRunSeq))
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		conns[c] = s
	}
	srv.Start()
	t.Cleanup(srv.Close)
	counts := func() (opened, open int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range conns {
			if s != http.StateClosed && s != http.StateHijacked {
				open++
			}
		}
		return len(conns), open
	}

	client := tasks.NewHTTPClient()
	shared := tasks.HTTP{Method: "GET", URL: srv.URL, Client: client}
	for seq := int64(1); seq <= 5; seq++ {
		res := shared.Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: seq})
		if res.Err != nil || res.Output != strconv.FormatInt(seq, 10) {
			t.Fatalf("run %d: %q, %v; want its own seq back", seq, res.Output, res.Err)
		}
	}
	if opened, _ := counts(); opened != 1 {
		t.Fatalf("5 runs through the shared client opened %d connections; want 1", opened)
	}
	client.CloseIdleConnections()
	eventually(t, "the idle connection to close", func() bool { _, open := counts(); return open == 0 })

	own := tasks.HTTP{Method: "GET", URL: srv.URL}
	for seq := int64(6); seq <= 7; seq++ {
		if res := own.Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: seq}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	eventually(t, "the runs without the shared client to leave no connection open", func() bool {
		opened, open := counts()
		return opened == 3 && open == 0
	})
}

// eventually polls cond every 10 ms until it holds, failing after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline, not synchronisation
	}
}

// A run whose request reached the server on a kept-alive connection that
// the server then closes without an answer (a worker killed mid-request, a
// restart) fails, as it did on a connection of its own, and is not sent a
// second time. Before, net/http resent a GET (the default method) on a new
// connection, so the server received the run twice.
func TestHTTPSharedClientNeverSendsARunTwice(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", `{"query": "a GET with a body"}`} {
		t.Run(strconv.Quote(body), func(t *testing.T) { testHTTPSharedClientNeverSendsARunTwice(t, body) })
	}
}

func testHTTPSharedClientNeverSendsARunTwice(t *testing.T, reqBody string) {
	var mu sync.Mutex
	got := map[string]int{} // run seq -> requests received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq := r.Header.Get(tasks.HeaderRunSeq)
		mu.Lock()
		if reqBody == "" && (r.ContentLength != 0 || len(r.TransferEncoding) > 0 || r.Header.Get("Content-Length") != "") {
			got["with a body"]++ // a GET without a body goes out without one
		}
		got[seq]++
		first := got[seq] == 1
		mu.Unlock()
		if seq == "2" && first {
			// Received, then the connection drops without a response.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		io.WriteString(w, seq)
	}))
	t.Cleanup(srv.Close)

	client := tasks.NewHTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	job := tasks.HTTP{Method: "GET", URL: srv.URL, Body: reqBody, Client: client}
	if res := job.Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: 1}); res.Err != nil {
		t.Fatal(res.Err)
	}
	res := job.Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: 2})
	mu.Lock()
	n := got["2"]
	mu.Unlock()
	if n != 1 {
		t.Fatalf("run 2 reached the server %d times (result %q, %v); want once", n, res.Output, res.Err)
	}
	if res.Err == nil {
		t.Fatalf("run 2 succeeded (%q) although its connection closed without a response", res.Output)
	}
	t.Logf("run 2: %v", res.Err)
	if n := got["with a body"]; n != 0 {
		t.Errorf("%d GET runs arrived with a body or Content-Length; want none", n)
	}
	// The next run goes through (on a new connection).
	if res := job.Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: 3}); res.Err != nil || res.Output != "3" {
		t.Fatalf("run 3: %q, %v", res.Output, res.Err)
	}
}

// Over HTTP/2 too, a bodiless run arrives without a body and succeeds
// through the shared client.
func TestHTTPSharedClientSendsABodilessRunOverHTTP2(t *testing.T) {
	t.Parallel()
	type seen struct {
		proto  int
		length int64
		body   string
	}
	got := make(chan seen, 2)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.ProtoMajor, r.ContentLength, string(b)}
		io.WriteString(w, "ok")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := tasks.NewHTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	job := tasks.HTTP{URL: srv.URL, Client: client}
	for seq := int64(1); seq <= 2; seq++ {
		if res := job.Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: seq}); res.Err != nil || res.Output != "ok" {
			t.Fatalf("run %d: %q, %v", seq, res.Output, res.Err)
		}
		if s := <-got; s.proto != 2 || s.length > 0 || s.body != "" {
			t.Fatalf("run %d arrived as %+v; want HTTP/2 with no body", seq, s)
		}
	}
}

// The empty body that keeps a GET from being sent twice is only a GET's
// (HEAD's, OPTIONS'): a bodiless POST still goes with Content-Length: 0,
// not chunked.
func TestHTTPBodilessPostKeepsContentLengthZero(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("X-Seen-Transfer-Encoding", strings.Join(r.TransferEncoding, ","))
		h.Set("X-Seen-Content-Length", strconv.FormatInt(r.ContentLength, 10))
		got <- h
	}))
	t.Cleanup(srv.Close)
	client := tasks.NewHTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	if res := (tasks.HTTP{Method: "POST", URL: srv.URL, Client: client}).Run(t.Context(), tasks.Env{JobID: "ping", ReplicaID: "web-1", RunSeq: 1}); res.Err != nil {
		t.Fatal(res.Err)
	}
	h := <-got
	if te, cl := h.Get("X-Seen-Transfer-Encoding"), h.Get("X-Seen-Content-Length"); te != "" || cl != "0" {
		t.Fatalf("a bodiless POST arrived with Transfer-Encoding %q, Content-Length %s; want none and 0", te, cl)
	}
}
