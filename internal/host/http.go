package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/startstop"
)

// httpServer is the replica's HTTP server (probes, metrics, /v1), a
// startstop service whose Serve goroutine it owns. It listens when built,
// so the address is known (and a taken one refused) before the replica
// registers; Start serves.
type httpServer struct {
	startstop.Base
	srv      *http.Server
	ln       net.Listener
	log      *slog.Logger
	stopOnce sync.Once
}

// The HTTP server's bounds on a client that sends nothing.
const (
	// httpReadHeaderTimeout bounds the wait for a request's headers.
	httpReadHeaderTimeout = 5 * time.Second
	// httpIdleTimeout closes a kept-alive connection that carries no
	// request for this long (an event stream is a request in progress,
	// and its heartbeats keep it going). Without it an idle connection
	// stayed open for good (issue 21, finding 9).
	httpIdleTimeout = 60 * time.Second
)

func listenHTTP(addr string, h http.Handler, log *slog.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("replica.listen %q: %w", addr, err)
	}
	return &httpServer{ln: ln, log: log, srv: &http.Server{Handler: h,
		ReadHeaderTimeout: httpReadHeaderTimeout, IdleTimeout: httpIdleTimeout}}, nil
}

// Addr is the address it listens on.
func (s *httpServer) Addr() string { return s.ln.Addr().String() }

// Start serves on the listener until Stop.
func (s *httpServer) Start(ctx context.Context) error {
	if _, err := s.StartInit(ctx); err != nil {
		return fmt.Errorf("start http server: %w", err)
	}
	if !s.Go(func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			// Serve ends only at Shutdown or with a broken listener.
			s.log.Error("http server stopped serving", "error", err)
		}
	}) {
		return fmt.Errorf("start http server: %w", startstop.ErrStopped)
	}
	s.MarkStarted()
	return nil
}

// Stop closes the server gracefully (within httpShutdownTimeout) and waits
// for Serve to return; safe twice, concurrently, and without Start.
func (s *httpServer) Stop() {
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		s.srv.Shutdown(ctx)
		s.ln.Close() // never served: Shutdown does not know it
	})
	s.Base.Stop()
}

// warnExposed logs, once per replica, that the HTTP server listening on
// addr (replica.listen as the listener took it) is reachable beyond
// loopback: its page, stream and job output have no authentication
// (issue 21, finding 8; docs/status-page.md). 0.0.0.0 is every interface,
// IPv6 included: Go listens dual-stack and addr reads [::]:PORT.
func (h *Host) warnExposed(addr string) {
	where := replicas.Exposure(addr)
	if where == "" || !h.exposedWarned.CompareAndSwap(false, true) {
		return
	}
	if where == "every interface" {
		where = "every interface, IPv4 and IPv6"
	}
	h.log.Warn("http: replica.listen is not loopback: the status page and the event stream are served without authentication to whoever reaches it",
		"listen", addr, "reachable_on", where,
		"serves", "/ (the status page), /v1/events, /v1/jobs, /v1/jobs/{id}/output, /metrics",
		"shows", "the installation's job names, job errors and output, replica ids, host names and addresses, clusters, locks, audited actions",
		"fix", "keep replica.listen on loopback (127.0.0.1:PORT) behind an SSH tunnel or an authenticating proxy, unless everyone who reaches it may read that (docs/status-page.md)")
}
