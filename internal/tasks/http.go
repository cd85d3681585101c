package tasks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers every HTTP task sends besides its configured ones.
const (
	HeaderJobID     = "X-Studio-Job-Id"
	HeaderReplicaID = "X-Studio-Replica-Id"
	HeaderRunSeq    = "X-Studio-Run-Seq"
	HeaderCluster   = "X-Studio-Cluster" // only when the run is for a cluster
	// The run's nominal time and occurrence key (Env.ScheduledAt,
	// Env.OccurrenceKey), when it has them.
	HeaderScheduledAt   = "Studio-Scheduled-At"
	HeaderOccurrenceKey = "Studio-Occurrence-Key"
	// HeaderTriggered is "true" for a `jobs trigger` run, else "false".
	HeaderTriggered = "Studio-Triggered"
	// HeaderFencingToken is the run's fencing token (Env.FencingToken);
	// absent when it has none.
	HeaderFencingToken = "Studio-Fencing-Token"
)

// HTTP sends one request.
type HTTP struct {
	Method  string // validated by the config layer; if empty, GET
	URL     string
	Headers map[string]string
	Body    string
	Client  *http.Client // nil: a client with no global timeout (the ctx bounds it)
}

// Kind returns "http".
func (HTTP) Kind() string { return KindHTTP }

// HTTPStatusError is the error of a response that is not 2xx.
type HTTPStatusError struct {
	StatusCode int
	Status     string // "503 Service Unavailable"
}

func (e *HTTPStatusError) Error() string {
	if e.Status == "" {
		return "http " + strconv.Itoa(e.StatusCode)
	}
	return "http " + e.Status
}

// Run sends the request with ctx, so ctx bounds the whole exchange, body
// included. Any 2xx status is a success; another status is an
// *HTTPStatusError ("http 503 Service Unavailable"). The last
// OutputTailBytes of the response body are the output either way.
//
// Besides the configured headers (a configured Host sets the request's
// host), the request carries X-Studio-Job-Id, X-Studio-Replica-Id,
// X-Studio-Run-Seq, for a cluster X-Studio-Cluster, and, when the run has
// a nominal time, Studio-Scheduled-At and Studio-Occurrence-Key; these
// override configured headers of the same name.
func (h HTTP) Run(ctx context.Context, env Env) Result {
	method := h.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if h.Body != "" {
		body = strings.NewReader(h.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.URL, body)
	if err != nil {
		return Result{Err: fmt.Errorf("build http request: %w", err)}
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		// A run is sent once. On a kept-alive connection that fails after
		// the request went out, net/http sends a GET (HEAD, OPTIONS) again
		// on a new connection, and the server may get the run twice; it
		// never resends a request whose body it cannot rewind. So such a
		// request has no GetBody, and one without a body has an empty one,
		// which these methods send as none (a POST, PUT... is never
		// resent and keeps its Content-Length: 0). The price: a run whose
		// kept-alive connection failed before a byte went out (or, over
		// HTTP/2, was refused by a GOAWAY) fails too, instead of being
		// sent on a new one.
		req.GetBody = nil
		if body == nil {
			req.Body = sentOnce{}
		}
	}
	for k, v := range h.Headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	req.Header.Set(HeaderJobID, env.JobID)
	req.Header.Set(HeaderReplicaID, env.ReplicaID)
	req.Header.Set(HeaderRunSeq, env.runSeq())
	if env.Cluster != "" {
		req.Header.Set(HeaderCluster, env.Cluster)
	}
	if at := env.scheduledAt(); at != "" {
		req.Header.Set(HeaderScheduledAt, at)
		req.Header.Set(HeaderOccurrenceKey, env.OccurrenceKey)
	}
	req.Header.Set(HeaderTriggered, env.triggered())
	if tok := env.fencingToken(); tok != "" {
		req.Header.Set(HeaderFencingToken, tok)
	} else {
		req.Header.Del(HeaderFencingToken) // never a configured one: a token is the runner's to give
	}

	client := h.Client
	if client == nil {
		// A transport of our own without keep-alive: no idle connection
		// (nor its goroutines) outlives the run. A replica's jobs share
		// NewHTTPClient's instead.
		tr := newTransport()
		tr.DisableKeepAlives = true
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{Err: withCause(ctx, err)}
	}
	defer resp.Body.Close()
	out := newTailBuffer(OutputTailBytes)
	_, readErr := io.Copy(out, resp.Body)
	res := Result{Output: out.String()}
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		res.Err = &HTTPStatusError{StatusCode: resp.StatusCode, Status: resp.Status}
		if readErr != nil {
			res.Err = withCause(ctx, res.Err)
		}
	case readErr != nil:
		res.Err = withCause(ctx, fmt.Errorf("read http response body: %w", readErr))
	}
	return res
}

// sentOnce is the empty body of a request without one: a body with no
// GetBody makes net/http never resend the request after it was written
// (Request.isReplayable), and an empty one is sent as no body at all.
type sentOnce struct{}

func (sentOnce) Read([]byte) (int, error) { return 0, io.EOF }
func (sentOnce) Close() error             { return nil }

// The connections a replica's http: jobs keep open between runs
// (NewHTTPClient): jobs that call one host often (a thousand jobs on one
// service, or a job every second) send each run on the connection of the
// last, instead of a TCP (and TLS) handshake per run; a job that calls its
// host less often finds the connection closed and connects again, as
// before.
//
// HTTPIdleTimeout is short on purpose. A server closes a connection idle
// longer than its own keep-alive timeout (2 s for gunicorn, 5 s for
// Node.js and Apache, 60-75 s for load balancers and nginx); a request
// sent on it at that moment fails, and Run makes net/http resend none
// that it wrote (sentOnce): a job's run is never sent twice, so such a run
// fails. Closing our side first, after 1 s, leaves that race to servers
// with a keep-alive timeout under a second.
const (
	HTTPIdleTimeout      = time.Second
	HTTPIdleConnsPerHost = 8 // idle connections kept to one host:port
	HTTPIdleConns        = 64
)

// NewHTTPClient returns the client the http: jobs of one replica share:
// net/http's default transport (proxy from the environment, HTTP/2 when
// offered), with keep-alive, at most HTTPIdleConns idle connections
// (HTTPIdleConnsPerHost to one host) closed after HTTPIdleTimeout. No
// global timeout: each run's context bounds its request. The owner calls
// CloseIdleConnections when the jobs have stopped.
func NewHTTPClient() *http.Client {
	tr := newTransport()
	tr.IdleConnTimeout = HTTPIdleTimeout
	tr.MaxIdleConnsPerHost = HTTPIdleConnsPerHost
	tr.MaxIdleConns = HTTPIdleConns
	return &http.Client{Transport: tr}
}

// newTransport returns a transport with net/http's default settings.
func newTransport() *http.Transport {
	if def, ok := http.DefaultTransport.(*http.Transport); ok {
		return def.Clone()
	}
	return &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
}
