package tasks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Headers every HTTP task sends besides its configured ones.
const (
	HeaderJobID     = "X-Studio-Job-Id"
	HeaderReplicaID = "X-Studio-Replica-Id"
	HeaderRunSeq    = "X-Studio-Run-Seq"
	HeaderCluster   = "X-Studio-Cluster" // only when the run is for a cluster
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
// X-Studio-Run-Seq and, for a cluster, X-Studio-Cluster; these override
// configured headers of the same name.
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

	client := h.Client
	if client == nil {
		// A transport of our own without keep-alive: runs are far apart,
		// and no idle connection (nor its goroutines) outlives the run.
		tr := newTransport()
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

// newTransport returns a transport with net/http's default settings and
// keep-alive off.
func newTransport() *http.Transport {
	var tr *http.Transport
	if def, ok := http.DefaultTransport.(*http.Transport); ok {
		tr = def.Clone()
	} else {
		tr = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	}
	tr.DisableKeepAlives = true
	return tr
}
