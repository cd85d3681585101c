package host

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/startstop"
)

// A replica claims work only on a database that accepts writes
// (docs/failover.md). At start it waits for one before it registers; once
// ready, a heartbeat or a readiness check that finds the database
// read-only fails readiness and stops the control request claims until a
// primary is back. The lock, lease and run writes fail on their own on
// such a server: it refuses them.

// writableRetry is how often a replica waiting at start asks again
// whether the database accepts writes.
const writableRetry = time.Second

// waitingReason is what /readyz says while the replica waits at start.
const waitingReason = "waiting for a writable primary"

// errStopWhileWaiting: a drain, a stop at once or Stop came while the
// replica waited for a writable primary; it never registered.
var errStopWhileWaiting = fmt.Errorf("stopped while waiting for a writable primary: %w", ErrStoppedWhilePreparing)

// awaitWritable returns once a connection made like the pool's reaches a
// server that accepts writes, or with the error of the first try (a
// database that cannot be reached, a refused login). The waiting is a
// service of its own (writableWait); while it waits, a Drain, StopNow or
// Stop ends it with errStopWhileWaiting. A drain that comes during the
// first try, before any wait, is left for the started replica (it
// registers, then drains), as before.
func (h *Host) awaitWritable(ctx context.Context, pcfg *pgxpool.Config) error {
	w := &writableWait{
		check: func(ctx context.Context) (string, error) { return h.checkWritable(ctx, pcfg) },
		serve: h.serveWaiting,
		scrub: h.scrub,
		log:   h.log,
		db:    db.Describe(pcfg.ConnConfig),
		done:  make(chan error, 1),
		wait:  make(chan struct{}),
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop()
	var (
		waiting  = w.wait
		drainReq <-chan string   // only while it waits
		now      <-chan struct{} // idem
		stop     <-chan struct{} // idem
	)
	for {
		select {
		case err := <-w.done:
			if err == nil && w.addr != "" {
				h.o.Listen = w.addr // the replica keeps the address it waited on
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-waiting:
			waiting, drainReq, now, stop = nil, h.drainReq, h.now, h.runCtx.Done()
		case <-stop:
			return errStopWhileWaiting
		case why := <-drainReq:
			h.log.Info("stopping while waiting for a writable primary", "reason", why)
			return errStopWhileWaiting
		case <-now:
			return errStopWhileWaiting
		}
	}
}

// writableWait is the wait for a writable primary at start, a startstop
// service: its goroutine asks whether the database accepts writes until
// it does, every writableRetry. While the only server reached is
// read-only (a standby, default_transaction_read_only=on, or a multi-host
// URL whose target_session_attrs=read-write refuses every host), it says
// so once, serves /livez (ok) and /readyz (503, the reason) on
// replica.listen; once it waits, any other connection error is waited out
// too (a failover's gap), each new reason logged once. An error before
// any wait is its result, as is nil once a server accepts writes. Stop
// ends the wait and closes the probe server.
type writableWait struct {
	startstop.Base
	check func(context.Context) (why string, err error)
	serve func() (*waitServer, error)
	scrub func(error) error
	log   *slog.Logger
	db    string // the database, described without its password

	done chan error    // the result, once
	wait chan struct{} // closed once it waits (the first try refused writes)
	addr string        // the probe server's address; read after done
}

// Start starts the wait's goroutine.
func (w *writableWait) Start(ctx context.Context) error {
	runCtx, err := w.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start writable wait: %w", err)
	}
	if !w.Go(func() { w.done <- w.loop(runCtx) }) {
		return fmt.Errorf("start writable wait: %w", startstop.ErrStopped)
	}
	w.MarkStarted()
	return nil
}

func (w *writableWait) loop(ctx context.Context) error {
	var (
		srv  *waitServer
		last string
	)
	defer func() {
		if srv != nil {
			srv.stop()
		}
	}()
	began := time.Now()
	for {
		why, err := w.check(ctx)
		if err != nil && srv == nil {
			return err
		}
		if why == "" && err == nil {
			if srv != nil {
				w.log.Info("a writable primary answers; starting", "waited", time.Since(began).Round(time.Millisecond).String())
			}
			return nil
		}
		if err != nil {
			why = w.scrub(err).Error()
		}
		if srv == nil {
			if srv, err = w.serve(); err != nil {
				return err
			}
			w.addr = srv.addr
			close(w.wait)
		}
		srv.reason.Store(waitingReason + ": " + why)
		if why != last {
			w.log.Warn("waiting for a writable primary before registering: the database reached does not accept writes; "+
				"the replica claims nothing and /readyz fails until a primary answers",
				"database", w.db, "reason", why, "retry_every", writableRetry.String(), "listen", srv.addr)
			last = why
		}
		t := time.NewTimer(writableRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errStopWhileWaiting
		}
	}
}

// checkWritable connects once and says why the server refuses writes ("":
// it accepts them). err is any other failure.
func (h *Host) checkWritable(ctx context.Context, pcfg *pgxpool.Config) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, db.ConnectTimeout+readyzDBTimeout)
	defer cancel()
	conn, err := db.Connect(ctx, pcfg.ConnConfig.Copy(), h.o.ConnString)
	if err != nil {
		if db.IsReadOnly(err) {
			return err.Error(), nil // a ConnectError: scrubbed already
		}
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ro, err := db.ReadOnly(ctx, conn)
	if err != nil {
		return "", db.Scrub(err, h.o.ConnString)
	}
	if ro {
		return db.ErrReadOnly.Error(), nil
	}
	return h.checkListenWritable(ctx)
}

// checkListenWritable is checkWritable for database.listen_url, when set:
// the heartbeat registers and beats over it, so a listen URL that reaches
// only a standby (or a read-only default) waits like database.url does,
// instead of failing the start (poolers.go).
func (h *Host) checkListenWritable(ctx context.Context) (string, error) {
	if h.o.ListenConnString == "" || h.o.ListenConnString == h.o.ConnString {
		return "", nil
	}
	lcfg, err := db.ParseConnConfig(h.o.ListenConnString)
	if err != nil {
		return "", fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)
	}
	conn, err := db.Connect(ctx, lcfg, h.o.ListenConnString)
	if err != nil {
		if db.IsReadOnly(err) {
			return "database.listen_url: " + err.Error(), nil
		}
		return "", fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ro, err := db.ReadOnly(ctx, conn)
	if err != nil {
		return "", db.Scrub(err, h.o.ListenConnString)
	}
	if ro {
		return "database.listen_url: " + db.ErrReadOnly.Error(), nil
	}
	return "", nil
}

// waitServer answers the probes while the replica waits at start: /livez
// ok, anything else 503 with the reason.
type waitServer struct {
	srv    *http.Server
	addr   string
	reason atomic.Value // string
	done   chan struct{}
}

func (h *Host) serveWaiting() (*waitServer, error) {
	ln, err := net.Listen("tcp", h.o.Listen)
	if err != nil {
		return nil, fmt.Errorf("replica.listen %q: %w", h.o.Listen, err)
	}
	w := &waitServer{addr: ln.Addr().String(), done: make(chan struct{})}
	h.warnExposed(w.addr)
	w.reason.Store(waitingReason)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.HandleFunc("/", func(rw http.ResponseWriter, _ *http.Request) {
		rw.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(rw, w.reason.Load().(string))
	})
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(w.done)
		w.srv.Serve(ln)
	}()
	return w, nil
}

// stop closes the server (and its listener) and waits for Serve to return.
func (w *waitServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	w.srv.Shutdown(ctx)
	w.srv.Close()
	<-w.done
}

// setReadOnly records whether the database refuses writes, saying so once
// per change. Back to writable, the control requests are read again (a
// signal may have come meanwhile).
func (h *Host) setReadOnly(ro bool, why string) {
	if ro {
		if !h.readOnly.Swap(true) {
			h.log.Warn("the database does not accept writes: claiming nothing (no locks, leases or control requests) "+
				"and /readyz fails until a writable primary answers", "reason", why)
		}
		return
	}
	if h.readOnly.Swap(false) {
		h.log.Info("the database accepts writes again; claiming again")
		h.req.wantAll()
	}
}

// onBeat follows the heartbeat: a read-only refusal marks the database
// read-only, a success marks it writable.
func (h *Host) onBeat(err error) {
	switch {
	case err == nil:
		h.setReadOnly(false, "")
	case db.IsReadOnly(err):
		h.setReadOnly(true, db.Scrub(db.ExplainReadOnly(err), h.o.ConnString).Error())
	}
}
