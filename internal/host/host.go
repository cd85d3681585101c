// Package host is the replica process of SPEC §8: it wires the registry,
// the bus, the HTTP probes and (in later issues) the runner and the lease
// loop, and runs the drain sequence.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/runner"
)

// Defaults of SPEC §6 and §8.
const (
	// DefaultDrainDelay is how long a draining replica waits for load
	// balancers to notice its failing readiness (drain.delay).
	DefaultDrainDelay = 5 * time.Second
	// NoDrainDelay as Options.DrainDelay drains without waiting. `run`
	// passes it for drain.delay: 0s, since an unset Options field is 0.
	NoDrainDelay time.Duration = -1
	// BusDownReadiness: readiness fails once the bus has been down longer.
	BusDownReadiness = 10 * time.Second
	// readyzDBTimeout bounds the database check of /readyz.
	readyzDBTimeout = 2 * time.Second
	// stopStateTimeout bounds the final state write when stopping.
	stopStateTimeout = 5 * time.Second
	// httpShutdownTimeout bounds the HTTP server's graceful close.
	httpShutdownTimeout = 2 * time.Second
	// poolMaxConns is the replica's pool size (the heartbeat and the bus
	// have their own connections besides).
	poolMaxConns = 8
)

// heartbeatFresh is how old the last heartbeat may be while the database
// still counts as reachable: one interval plus the heartbeat's deadline.
func heartbeatFresh(every time.Duration) time.Duration {
	if every <= 0 {
		every = replicas.HeartbeatEvery
	}
	return every + every*4/5
}

// ErrInterrupted: a second signal stopped the drain at once.
var ErrInterrupted = errors.New("stopped at once by a second signal")

// Options configure a Host.
type Options struct {
	ConnString string // "" means the PG* environment
	ID         string // replica id; DefaultID when empty
	Listen     string // HTTP address; 127.0.0.1:0 picks a free port
	Version    string
	DrainDelay time.Duration // 0 (unset): DefaultDrainDelay; NoDrainDelay (any negative value): none
	Migrate    bool
	Logger     *slog.Logger

	// Jobs from the configuration; the built-in studio-housekeeping job is
	// added unless NoHousekeeping.
	Jobs           []jobs.Job
	NoHousekeeping bool
	LockTable      locks.Table // zero: ShedLock's default table
	Clock          clock.Clock // the runner's clock (tests skew it); default real
	ShutdownWait   time.Duration

	// Tests may shorten intervals; the defaults stay as SPEC says.
	HeartbeatEvery  time.Duration
	BusPingEvery    time.Duration
	BusPingTimeout  time.Duration
	OnReady         func(addr string) // called once ready, with the HTTP address
	PoolConfigHook  func(*pgxpool.Config)
	DisableHTTPLogs bool
}

func (o Options) clock() clock.Clock {
	if o.Clock == nil {
		return clock.Real{}
	}
	return o.Clock
}

// Host is one replica process.
type Host struct {
	o   Options
	log *slog.Logger

	pool     *pgxpool.Pool
	registry *replicas.Registry
	listener *bus.Listener
	runner   *runner.Runner
	store    *jobs.Store
	httpSrv  *http.Server
	httpLn   net.Listener
	metrics  *prometheus.Registry

	state    atomic.Value // replicas.State
	drainReq chan string  // reasons to drain (a claimed drain request)
	req      *requests    // claims control requests (requests.go)
	lostCh   chan error   // incarnation lost
	handlers []func(bus.Message)
	mu       sync.Mutex
}

// New validates options; Run does the work.
func New(o Options) (*Host, error) {
	if o.ID == "" {
		o.ID = replicas.DefaultID()
	}
	if err := replicas.ValidateID(o.ID); err != nil {
		return nil, fmt.Errorf("replica.id (STUDIO_REPLICA_ID): %w", err)
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.DrainDelay == 0 {
		o.DrainDelay = DefaultDrainDelay
	}
	if o.DrainDelay < 0 {
		o.DrainDelay = 0
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Host{o: o, log: o.Logger.With("replica_id", o.ID), drainReq: make(chan string, 1), lostCh: make(chan error, 1), req: newRequests()}
	h.state.Store(replicas.StateStarting)
	return h, nil
}

// ID is the replica id.
func (h *Host) ID() string { return h.o.ID }

// Addr is the HTTP address once Run has started listening.
func (h *Host) Addr() string {
	if h.httpLn == nil {
		return ""
	}
	return h.httpLn.Addr().String()
}

// Pool is the replica's connection pool (nil before Run has connected).
// Components that plug into the host, and fault tests, use it.
func (h *Host) Pool() *pgxpool.Pool { return h.pool }

// State is the replica's current state.
func (h *Host) State() replicas.State { return h.state.Load().(replicas.State) }

// Run hosts the replica until a signal on sigs (drain, then exit nil), a
// replica.drain signal on the bus for this id (the same), or the loss of
// its id to another process (ErrIncarnationLost). A second signal during the
// drain returns ErrInterrupted at once.
func (h *Host) Run(ctx context.Context, sigs <-chan os.Signal) (err error) {
	// Cleanup runs on every path; it must not depend on ctx.
	defer h.close()
	if err := h.start(ctx); err != nil {
		return err
	}
	h.log.Info("replica ready", "listen", h.Addr(), "version", h.o.Version)
	if h.o.OnReady != nil {
		h.o.OnReady(h.Addr())
	}
	var why string
	select {
	case s := <-sigs:
		why = "signal " + s.String()
	case reason := <-h.drainReq:
		why = reason
	case err := <-h.lostCh:
		return h.abort(err)
	case <-ctx.Done():
		why = "context done"
	}
	return h.drain(ctx, why, sigs)
}

// start checks everything it can before it registers (the schema version,
// the lock table, the HTTP address; the id was checked in New), so that a
// bad start leaves no row. A failure after registering records stopped, so
// the row neither looks live nor blocks a corrected restart with the same id.
func (h *Host) start(ctx context.Context) (err error) {
	pcfg, err := db.ParsePoolConfig(h.o.ConnString)
	if err != nil {
		return err
	}
	pcfg.MaxConns = poolMaxConns
	if h.o.PoolConfigHook != nil {
		h.o.PoolConfigHook(pcfg)
	}
	h.pool, err = db.OpenConfig(ctx, pcfg, h.o.ConnString)
	if err != nil {
		return err
	}
	if h.o.Migrate {
		if _, err := migrate.Up(ctx, h.pool); err != nil {
			return err
		}
	} else if err := migrate.CheckNotNewer(ctx, h.pool); err != nil {
		return err
	}
	table := h.o.LockTable
	if table == (locks.Table{}) {
		table = locks.DefaultTable()
	}
	provider, err := locks.NewProvider(h.pool, table, h.o.ID)
	if err != nil {
		return err
	}
	warnings, err := locks.CheckTable(ctx, h.pool, table, h.o.ID)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		h.log.Warn(w)
	}
	h.httpLn, err = net.Listen("tcp", h.o.Listen)
	if err != nil {
		return fmt.Errorf("replica.listen %q: %w", h.o.Listen, err)
	}
	ccfg, err := db.ParseConnConfig(h.o.ConnString)
	if err != nil {
		return err
	}
	lcfg, err := db.ParseConnConfig(h.o.ConnString)
	if err != nil {
		return err
	}
	h.registry = replicas.NewRegistry(ccfg, h.o.ConnString, replicas.Options{
		ID: h.o.ID, Version: h.o.Version, HTTPAddr: h.Addr(), HeartbeatEvery: h.o.HeartbeatEvery, Logger: h.log,
		OnLost: func(err error) {
			select {
			case h.lostCh <- err:
			default:
			}
		},
	})
	if err := h.registry.Register(ctx); err != nil {
		if db.IsReadOnly(err) {
			return fmt.Errorf("cannot register replica: %w", db.ExplainReadOnly(err))
		}
		return err
	}
	defer func() {
		// The row is this process's unless another took the id over.
		if err != nil && !errors.Is(err, replicas.ErrIncarnationLost) {
			h.log.Error("start failed after registering; recording stopped", "error", err)
			h.writeStopped()
		}
	}()
	if err := h.registry.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	h.listener = bus.NewListener(lcfg, h.o.ConnString, bus.Options{
		Logger: h.log, Handler: h.onMessage, OnResync: h.onResync,
		PingEvery: h.o.BusPingEvery, PingTimeout: h.o.BusPingTimeout,
	})
	if err := h.listener.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	h.metrics = h.newMetrics()
	if err := h.startRunner(ctx, provider); err != nil {
		return err
	}
	h.req.start(h)
	h.httpSrv = &http.Server{Handler: h.routes(), ReadHeaderTimeout: 5 * time.Second}
	go h.httpSrv.Serve(h.httpLn)
	if err := h.registry.SetState(ctx, replicas.StateReady); err != nil {
		return err
	}
	h.state.Store(replicas.StateReady)
	return nil
}

// onMessage is the bus handler: it runs on the listener goroutine and must
// not block. A drain or trigger signal only wakes the request claimer: the
// replica acts on a studio_request row it claims, never on the signal
// alone, since any role that can connect can NOTIFY.
func (h *Host) onMessage(m bus.Message) {
	if m.Type == bus.TypeSignal {
		switch {
		case m.Kind == bus.KindReplicaDrain && m.Key == h.o.ID:
			h.req.wantDrain()
		case m.Kind == bus.KindJobTrigger:
			h.req.wantJob(m.Key)
		case m.Kind == bus.KindJobSettings && h.runner != nil:
			h.runner.SettingsChanged(m.Key)
		}
	}
	h.mu.Lock()
	hs := h.handlers
	h.mu.Unlock()
	for _, f := range hs {
		f(m)
	}
}

// Subscribe adds a bus handler (later: runner, leases, stream hub).
func (h *Host) Subscribe(f func(bus.Message)) {
	h.mu.Lock()
	h.handlers = append(h.handlers, f)
	h.mu.Unlock()
}

func (h *Host) onResync() {
	h.log.Info("bus reconnected; resyncing")
	if h.runner != nil {
		h.runner.ResyncSettings()
	}
	// A drain or trigger whose NOTIFY was lost while the bus was down is
	// still a pending row.
	h.req.wantAll()
}

// startRunner binds the jobs and starts the runner and its store.
// The lock table was checked before registering.
func (h *Host) startRunner(ctx context.Context, provider *locks.Provider) (err error) {
	list := make([]jobs.Job, 0, len(h.o.Jobs)+1)
	if !h.o.NoHousekeeping {
		list = append(list, jobs.Housekeeping(h.pool))
	}
	for _, j := range h.o.Jobs {
		j.Bind(h.pool)
		list = append(list, j)
	}
	h.store = jobs.NewStore(h.pool, h.o.ID, h.log)
	h.runner, err = runner.New(runner.Options{
		ReplicaID: h.o.ID, Jobs: list, Locks: provider, Store: h.store, Settings: jobs.NewSettingsCache(h.pool),
		Clock: h.o.Clock, Logger: h.log, Metrics: h.metrics, ShutdownWait: h.o.ShutdownWait,
	})
	if err != nil {
		return err
	}
	prior, err := h.store.LoadStatus(ctx)
	if err != nil {
		return err
	}
	h.store.Start(context.WithoutCancel(ctx))
	if err := h.runner.Start(ctx, prior); err != nil {
		return err
	}
	h.log.Info("runner started", "jobs", len(list))
	return nil
}

// drain is the sequence of SPEC §8.
func (h *Host) drain(ctx context.Context, why string, sigs <-chan os.Signal) error {
	h.log.Info("draining", "reason", why, "drain_delay", h.o.DrainDelay.String())
	// (1) draining: readiness fails at once; leases are released (later).
	h.state.Store(replicas.StateDraining)
	if err := h.registry.SetState(context.WithoutCancel(ctx), replicas.StateDraining); err != nil {
		if errors.Is(err, replicas.ErrIncarnationLost) {
			return h.abort(err)
		}
		h.log.Warn("could not record state draining", "error", err)
	}
	if h.o.DrainDelay > 0 {
		t := time.NewTimer(h.o.DrainDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case s := <-sigs:
			h.log.Warn("second signal: stopping at once", "signal", s.String())
			h.interruptServices()
			h.writeStopped()
			return ErrInterrupted
		case err := <-h.lostCh:
			return h.abort(err)
		}
	}
	// (2) stream clients get reconnect (later); (3) runner shutdown (later).
	stopped := make(chan struct{})
	go func() { h.stopServices(); close(stopped) }()
	select {
	case <-stopped:
	case s := <-sigs:
		h.log.Warn("second signal: stopping at once", "signal", s.String())
		h.interruptServices()
		h.writeStopped()
		return ErrInterrupted
	}
	// (4) stopped.
	h.writeStopped()
	h.log.Info("stopped")
	return nil
}

func (h *Host) writeStopped() {
	h.state.Store(replicas.StateStopped)
	ctx, cancel := context.WithTimeout(context.Background(), stopStateTimeout)
	defer cancel()
	if err := h.registry.SetState(ctx, replicas.StateStopped); err != nil {
		h.log.Warn("could not record state stopped", "error", err)
	}
}

// abort stops every duty at once after the id was taken over; it writes
// nothing more to the registry, which now belongs to another process.
func (h *Host) abort(err error) error {
	h.log.Error("another process took this replica id; stopping all duties", "error", err)
	h.state.Store(replicas.StateStopped)
	h.interruptServices()
	return err
}

// interruptServices cancels runs in progress at once (recorded interrupted)
// instead of waiting for them.
func (h *Host) interruptServices() {
	if h.runner != nil {
		h.runner.Interrupt()
	}
	h.stopServices()
}

// stopServices stops the components that take part in the drain (the
// runner with its shutdown wait, its store's last flush, the bus; leases
// later), keeping the registry for the final state.
func (h *Host) stopServices() {
	// First stop claiming requests: a stopping runner would drop a claimed
	// trigger, which another replica can still run.
	h.req.stop()
	if h.runner != nil {
		h.runner.Stop()
	}
	if h.store != nil {
		h.store.Stop()
	}
	if h.listener != nil {
		h.listener.Stop()
	}
}

// close releases everything; safe after a partial start.
func (h *Host) close() {
	if h.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		h.httpSrv.Shutdown(ctx)
		cancel()
	} else if h.httpLn != nil {
		h.httpLn.Close()
	}
	h.stopServices()
	if h.registry != nil {
		h.registry.Stop()
	}
	if h.pool != nil {
		h.pool.Close()
	}
}

// Ready reports readiness and, when not ready, why.
func (h *Host) Ready(ctx context.Context) (bool, string) {
	if s := h.State(); s != replicas.StateReady {
		return false, "state " + string(s)
	}
	if d := h.listener.DownFor(); d > BusDownReadiness {
		return false, fmt.Sprintf("bus down for %s", d.Round(time.Second))
	}
	// A pool whose every connection is busy says nothing about the database:
	// then the dedicated heartbeat connection's last success decides.
	if st := h.pool.Stat(); st.IdleConns() == 0 && st.TotalConns() >= st.MaxConns() {
		if age := h.registry.SinceLastHeartbeat(); age > heartbeatFresh(h.o.HeartbeatEvery) {
			return false, fmt.Sprintf("database: pool busy and no heartbeat for %s", age.Round(time.Second))
		}
		return true, "ready (pool busy)"
	}
	ctx, cancel := context.WithTimeout(ctx, readyzDBTimeout)
	defer cancel()
	if err := h.pool.Ping(ctx); err != nil {
		return false, "database: " + db.Scrub(err, h.o.ConnString).Error()
	}
	return true, "ready"
}

func (h *Host) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := h.Ready(r.Context())
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/jobs", h.serveJobs)
	return mux
}

func (h *Host) newMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_replica_heartbeats_total", Help: "Successful heartbeats."},
			func() float64 { return float64(h.registry.Heartbeats()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_replica_heartbeat_failures_total", Help: "Failed heartbeats."},
			func() float64 { return float64(h.registry.HeartbeatFailures()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "studio_replica_heartbeat_max_gap_seconds", Help: "Longest time between two successful heartbeats."},
			func() float64 { return h.registry.MaxGap().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "studio_replica_ready", Help: "1 when the replica state is ready."},
			func() float64 {
				if h.State() == replicas.StateReady {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_bus_reconnects_total", Help: "Bus listener reconnects."},
			func() float64 { return float64(h.listener.Reconnects()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_bus_messages_total", Help: "Bus messages handled."},
			func() float64 { return float64(h.listener.Received()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "studio_bus_down_seconds", Help: "How long the bus has been down (0 when connected)."},
			func() float64 { return h.listener.DownFor().Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_bus_undecodable_total", Help: "Bus payloads skipped because they do not decode."},
			func() float64 { return float64(h.listener.Undecodable()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_requests_claimed_total", Help: "Control requests (studio_request rows) this replica claimed.",
			ConstLabels: prometheus.Labels{"kind": replicas.RequestKindDrain}},
			func() float64 { return float64(h.req.drainsClaimed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_requests_claimed_total", Help: "Control requests (studio_request rows) this replica claimed.",
			ConstLabels: prometheus.Labels{"kind": jobs.RequestKindTrigger}},
			func() float64 { return float64(h.req.triggersClaimed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_signals_without_request_total", Help: "Drain or trigger signals that found no request for this replica to claim.",
			ConstLabels: prometheus.Labels{"kind": replicas.RequestKindDrain}},
			func() float64 { return float64(h.req.drainsEmpty.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_signals_without_request_total", Help: "Drain or trigger signals that found no request for this replica to claim.",
			ConstLabels: prometheus.Labels{"kind": jobs.RequestKindTrigger}},
			func() float64 { return float64(h.req.triggersEmpty.Load()) }),
	)
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}
