// Package host is the replica process of SPEC §8: it wires the registry
// heartbeat, the bus listener, the run store, the runner, the control
// request claimer and the HTTP server (each a startstop service), starts
// them in a checked order and stops them in the drain order. See
// docs/services.md.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/overdue"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/startstop"
	"github.com/studioctl/studioctl/internal/statuspage"
	"github.com/studioctl/studioctl/internal/stream"
	"github.com/studioctl/studioctl/internal/tasks"
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
	// poolMaxConns is the replica's pool size unless Options.MaxConns (the
	// heartbeat, the bus and the lease loop have their own connections
	// besides; docs/connections.md).
	poolMaxConns = 8
	// leasePoolConns is the lease loop's own pool: one statement at a time,
	// and one spare for the signal.
	leasePoolConns = 2
)

// heartbeatFresh is how old the last heartbeat may be while the database
// still counts as reachable: one interval plus the heartbeat's deadline.
func heartbeatFresh(every time.Duration) time.Duration {
	if every <= 0 {
		every = replicas.HeartbeatEvery
	}
	return every + every*4/5
}

// ErrInterrupted: StopNow (a second signal) stopped the replica at once.
var ErrInterrupted = errors.New("stopped at once by a second signal")

// ErrStoppedWhilePreparing is wrapped by Prepare's error when a Drain,
// StopNow or Stop ended it while it waited (for a writable primary, for
// the migration lock, before a retry): the replica never registered, and
// Wait says nil (a drain) or ErrInterrupted. Start's error wraps it too
// when one came while Start waited before a retry (retry.go): the row, if
// a try wrote one, is recorded stopped.
var ErrStoppedWhilePreparing = errors.New("stopped while preparing")

// errStopWhilePreparing: Stop came during a step of Prepare that does not
// wait; Prepare ends when the step does.
var errStopWhilePreparing = fmt.Errorf("stopped: %w", ErrStoppedWhilePreparing)

// ErrNotPrepared is returned by a Start before Prepare has succeeded.
var ErrNotPrepared = errors.New("not prepared: call Prepare first")

// The host's phases: Prepare, then Start, then the end.
const (
	phaseNew = iota
	phasePreparing
	phasePrepared
	phaseStarting
	phaseStarted
	phaseEnded
)

// Options configure a Host.
type Options struct {
	ConnString string // "" means the PG* environment
	// ListenConnString (database.listen_url) is a direct connection for
	// what needs a session of its own: the bus, the heartbeat and the
	// migrations, while the pool goes through ConnString, which may be a
	// pooler in transaction mode (docs/poolers.md). "": ConnString.
	ListenConnString string
	// SQLConnString (database.sql_url) is what sql: jobs connect with, as
	// a role of their own that may not write studioctl's tables
	// (studio_sql_job, docs/jobs-sql.md). "": the replica's own.
	SQLConnString string
	ID            string // replica id; DefaultID when empty
	Listen        string // HTTP address; 127.0.0.1:0 picks a free port
	Version       string
	DrainDelay    time.Duration // 0 (unset): DefaultDrainDelay; NoDrainDelay (any negative value): none
	MaxConns      int           // the pool's size (database.max_conns); 0: poolMaxConns
	Migrate       bool
	Logger        *slog.Logger

	// Jobs from the configuration; the built-in studio-housekeeping job is
	// added unless NoHousekeeping.
	Jobs           []jobs.Job
	NoHousekeeping bool
	LockTable      locks.Table // zero: ShedLock's default table
	// Clusters is the configuration's top-level clusters: list; each one
	// absent from cluster_lease is inserted at start (leases.EnsureClusters).
	Clusters     []string
	Clock        clock.Clock // the runner's clock (tests skew it); default real
	ShutdownWait time.Duration

	// Tests may shorten intervals; the defaults stay as SPEC says.
	HeartbeatEvery time.Duration
	BusPingEvery   time.Duration
	BusPingTimeout time.Duration
	OnReady        func(addr string) // called once ready, with the HTTP address
	PoolConfigHook func(*pgxpool.Config)

	// MetricsPerJob and MetricsPerJobLimit are metrics.per_job and
	// metrics.per_job_limit: the runner's per-job series (docs/metrics.md).
	MetricsPerJob      string
	MetricsPerJobLimit int
	// MaxConcurrentRuns is runner.max_concurrent_runs (0: no cap).
	MaxConcurrentRuns int
	// DurableStarts is runner.durable_starts (runner.Options.DurableStarts).
	DurableStarts bool
	// StartRetryFor is how long a start waits out transient database
	// errors after the wait for a writable primary (retry.go); 0:
	// DefaultStartRetryFor, a negative value: none.
	StartRetryFor time.Duration
}

func (o Options) clock() clock.Clock {
	if o.Clock == nil {
		return clock.Real{}
	}
	return o.Clock
}

// Host is one replica process, and a startstop service. Prepare does what
// blocks (a writable primary, the migrations, the checks) before anything
// is registered; Start registers, starts the services and returns with
// the replica ready. It has two ways out, as River's Client has Stop and
// StopAndCancel: Stop drains (the drain sequence, runs in progress may
// finish within ShutdownWait) and StopAndCancel stops at once (runs in
// progress are interrupted); both wait for the end. Drain and StopNow ask
// for the same without waiting (a signal, a claimed drain request), and
// HandleSignals maps signals onto them. Done and Wait tell when and why it
// ended.
type Host struct {
	startstop.Base // the supervisor goroutine
	o              Options
	log            *slog.Logger

	pool *pgxpool.Pool
	// httpClient is what the http jobs send their requests through.
	httpClient *http.Client
	leasePool  *pgxpool.Pool // the lease loop's own
	provider   *locks.Provider
	registry   *replicas.Registry
	listener   *bus.Listener
	runner     *runner.Runner
	store      *jobstore.Store
	leases     *leases.Service
	stream     *stream.Hub      // GET /v1/events (docs/events.md)
	overdue    *overdue.Sampler // studio_job_overdue_seconds (docs/occurrences-overdue.md)
	http       *httpServer
	metrics    *prometheus.Registry
	req        *requests // claims control requests (requests.go)

	phaseMu sync.Mutex
	phase   int // phaseNew ... phaseEnded

	// The start's tries (retry.go): the pool's configuration from the
	// wait, whether the services of the current try are built, this
	// process's incarnation (the same for every try), when the first
	// transient error came and how many tries followed.
	pcfg       *pgxpool.Config
	built      bool
	incarn     uuid.UUID
	retryBegan time.Time
	retries    int
	// keepRow: the stops are those of a try that is retried, which
	// registers again over its own row instead of recording stopped.
	keepRow bool

	state      atomic.Value // replicas.State
	registered atomic.Bool  // this process wrote its row: stopped is written at the end
	lost       atomic.Bool  // another process took the id: nothing more is written
	readOnly   atomic.Bool  // the database refuses writes now (writable.go)
	runCtx     context.Context
	drainReq   chan string // reasons to drain (Drain, a claimed drain request)
	lostCh     chan error  // incarnation lost
	now        chan struct{}
	nowOnce    sync.Once
	done       chan struct{}
	doneOnce   sync.Once
	err        error // why the host ended; set before done is closed
	lostErr    error
	lostNotice chan struct{} // closed by loseID
	// exposedWarned: the warning that replica.listen is not loopback was
	// logged (once, whichever server listened first).
	exposedWarned atomic.Bool
}

// New validates options; Start does the work.
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
	h := &Host{o: o, log: o.Logger.With("replica_id", o.ID), drainReq: make(chan string, 1), lostCh: make(chan error, 1),
		now: make(chan struct{}), done: make(chan struct{}), lostNotice: make(chan struct{}), req: newRequests(), incarn: uuid.New()}
	if o.StartRetryFor == 0 {
		h.o.StartRetryFor = DefaultStartRetryFor
	}
	h.state.Store(replicas.StateStarting)
	return h, nil
}

// ID is the replica id.
func (h *Host) ID() string { return h.o.ID }

// Addr is the HTTP address once Start is listening.
func (h *Host) Addr() string {
	if h.http == nil {
		return ""
	}
	return h.http.Addr()
}

// Pool is the replica's connection pool (nil before Start has connected).
// Components that plug into the host, and fault tests, use it.
func (h *Host) Pool() *pgxpool.Pool { return h.pool }

// State is the replica's current state.
func (h *Host) State() replicas.State { return h.state.Load().(replicas.State) }

// Prepare is the blocking part of a start (docs/services.md): it waits for
// a writable primary (the writableWait service), checks the sessions,
// opens the pools, migrates (or checks the schema version), checks the
// lock table, adds the configuration's clusters, builds the runner and
// listens on the HTTP address. Nothing is registered yet, so a bad start
// leaves no row. A Drain, StopNow or Stop while it waits ends it with an
// error wrapping ErrStoppedWhilePreparing, and Wait then says nil (a
// drain) or ErrInterrupted. Any other error is final, and Wait says it
// too. `studioctl run` calls Prepare while it serves signals, then Start.
func (h *Host) Prepare(ctx context.Context) error {
	runCtx, err := h.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("prepare replica: %w", err)
	}
	h.phaseMu.Lock()
	h.phase = phasePreparing
	h.runCtx = runCtx
	h.phaseMu.Unlock()
	h.warnSQLRole()
	err = h.prepare(ctx)
	h.phaseMu.Lock()
	if err == nil && runCtx.Err() != nil {
		err = errStopWhilePreparing // Stop came during a step that does not wait
	}
	if err == nil {
		h.phase = phasePrepared
		h.phaseMu.Unlock()
		return nil
	}
	h.phase = phaseEnded
	h.phaseMu.Unlock()
	h.stopAll(h.stops(false))
	h.StartFailed()
	if errors.Is(err, ErrStoppedWhilePreparing) {
		// Nothing registered: a clean end (exit 0 for a drain).
		if isClosed(h.now) {
			h.finish(ErrInterrupted)
		} else {
			h.finish(nil)
		}
		return fmt.Errorf("prepare replica: %w", err)
	}
	h.finish(err)
	return err
}

// Start registers the prepared replica, starts its services and marks it
// ready (docs/services.md); it does not wait for anything but its own
// statements. Any failure runs the same stops as a drain, which record
// stopped, so the row neither looks live nor blocks a corrected restart
// with the same id. On success the replica serves until Drain, StopNow,
// Stop, StopAndCancel, or the loss of its id; Wait says which.
func (h *Host) Start(ctx context.Context) error {
	h.phaseMu.Lock()
	switch h.phase {
	case phaseNew, phasePreparing:
		h.phaseMu.Unlock()
		return fmt.Errorf("start replica: %w", ErrNotPrepared)
	case phaseStarting, phaseStarted:
		h.phaseMu.Unlock()
		return fmt.Errorf("start replica: %w", startstop.ErrStarted)
	case phaseEnded:
		h.phaseMu.Unlock()
		return fmt.Errorf("start replica: %w", startstop.ErrStopped)
	}
	h.phase = phaseStarting
	h.phaseMu.Unlock()
	// A transient database error stops what had started, builds it again
	// and starts again (retry.go).
	err := h.withRetries(ctx, func(ctx context.Context) error {
		if !h.built {
			if err := h.build(ctx); err != nil {
				return err
			}
		}
		return h.start(ctx)
	})
	if err != nil {
		stopped := errors.Is(err, ErrStoppedWhilePreparing)
		if h.registered.Load() && !h.lost.Load() && !stopped {
			h.log.Error("start failed after registering; recording stopped", "error", err)
		}
		h.endPhase()
		h.stopAll(h.stops(false))
		h.StartFailed()
		if stopped {
			// A drain or a stop while it waited out a database error.
			if isClosed(h.now) {
				h.finish(ErrInterrupted)
			} else {
				h.finish(nil)
			}
			return fmt.Errorf("start replica: %w", err)
		}
		h.finish(err)
		return err
	}
	if !h.Go(func() { h.supervise(h.runCtx) }) {
		// Stop came during the start: drain what started.
		h.endPhase()
		h.stopAll(h.stops(true))
		h.finish(nil)
		return fmt.Errorf("start replica: %w", startstop.ErrStopped)
	}
	h.phaseMu.Lock()
	h.phase = phaseStarted
	h.phaseMu.Unlock()
	h.log.Info("replica ready", "listen", h.Addr(), "version", h.o.Version)
	h.MarkStarted()
	if h.o.OnReady != nil {
		h.o.OnReady(h.Addr())
	}
	return nil
}

func (h *Host) endPhase() {
	h.phaseMu.Lock()
	h.phase = phaseEnded
	h.phaseMu.Unlock()
}

// prepare is Prepare's sequence; whatever it started, stops() stops.
// Past the wait for a writable primary, a transient database error makes
// it stop what it started and try again (retry.go).
func (h *Host) prepare(ctx context.Context) error {
	pcfg, err := h.awaitDatabase(ctx)
	if err != nil {
		return err
	}
	h.pcfg = pcfg
	return h.withRetries(ctx, h.build)
}

// build is what Prepare does after the wait, and what a retried start
// does again: the pools, the schema, the checks, the runner and the
// other services, built but not started, and the HTTP address.
func (h *Host) build(ctx context.Context) (err error) {
	if err := h.openDatabase(ctx, h.pcfg); err != nil {
		return err
	}
	// (2) The jobs: bound, and checked by the runner (ids, lock names).
	h.stream = stream.NewHub(stream.HubOptions{DB: h.pool, Logger: h.log})
	h.metrics = h.newMetrics()
	if err := h.newRunner(); err != nil {
		return err
	}
	// The overdue jobs, read on a cadence for /metrics, in the runner's
	// metrics mode (per job or for the replica).
	h.overdue = overdue.NewSampler(overdue.SamplerOptions{DB: h.pool, PerJob: h.runner.PerJobMetrics, Logger: h.log})
	if err := h.metrics.Register(h.overdue); err != nil {
		return err
	}
	// Built before the bus listener starts: its handler wakes the loop.
	h.leases = leases.New(leases.Options{ID: h.o.ID, DB: h.leasePool, Logger: h.log,
		OnAcquire:   h.runner.AddCluster,
		OnLose:      func(cluster string, _ error) { h.runner.RemoveCluster(cluster) },
		AwaitDuties: h.runner.AwaitClusters,
	})
	// (3) The HTTP address, which the row records.
	h.http, err = listenHTTP(h.o.Listen, h.routes(), h.log)
	if err != nil {
		return err
	}
	// A retried start listens on the same address (127.0.0.1:0: the port
	// it picked).
	h.o.Listen = h.http.Addr()
	h.warnExposed(h.http.Addr())
	h.built = true
	return nil
}

// awaitDatabase is Prepare's step (1), first part: the pool's
// configuration, and a writable primary.
func (h *Host) awaitDatabase(ctx context.Context) (*pgxpool.Config, error) {
	pcfg, err := db.ParsePoolConfig(h.o.ConnString)
	if err != nil {
		return nil, err
	}
	// A separate listen URL says the pool may go through a pooler in
	// transaction mode: the pool then keeps no session state.
	if h.pooledByConfig() {
		db.ForPoolerPool(pcfg)
	}
	pcfg.MaxConns = poolMaxConns
	if h.o.MaxConns > 0 {
		pcfg.MaxConns = int32(h.o.MaxConns)
	}
	if h.o.PoolConfigHook != nil {
		h.o.PoolConfigHook(pcfg)
	}
	// Nothing is written until a server accepts writes (writable.go).
	if err := h.awaitWritable(ctx, pcfg); err != nil {
		return nil, err
	}
	return pcfg, nil
}

// openDatabase is Prepare's step (1), second part: the pools, the schema
// version (or the migrations), the lock table and the configuration's
// clusters.
func (h *Host) openDatabase(ctx context.Context, pcfg *pgxpool.Config) (err error) {
	// What needs a session of its own must have one (poolers.go).
	if err := h.checkSessions(ctx, pcfg); err != nil {
		return err
	}
	h.pool, err = db.OpenConfig(ctx, pcfg, h.o.ConnString)
	if err != nil {
		return err
	}
	// The lease loop has a small pool of its own: busy jobs must never make
	// a renewal wait for a connection past its deadline.
	lpcfg := pcfg.Copy()
	lpcfg.MaxConns = leasePoolConns
	if h.leasePool, err = db.OpenConfig(ctx, lpcfg, h.o.ConnString); err != nil {
		return err
	}
	if h.o.Migrate {
		if err := h.migrate(ctx); err != nil {
			return err
		}
	} else if err := migrate.CheckNotNewer(ctx, h.pool); err != nil {
		return err
	}
	table := h.o.LockTable
	if table == (locks.Table{}) {
		table = locks.DefaultTable()
	}
	h.provider, err = locks.NewProvider(h.pool, table, h.o.ID)
	if err != nil {
		return err
	}
	// Fencing tokens (docs/fencing.md) once migration 00017 made their
	// table: a replica started before the migration runs without them
	// rather than failing every lock.
	var fence *string
	if err := h.pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, locks.FenceTable).Scan(&fence); err != nil {
		return err
	}
	if fence != nil {
		h.provider.Fenced()
	} else {
		h.log.Warn("locks: no fencing tokens: the table " + locks.FenceTable + " is missing (run studioctl migrate up)")
	}
	warnings, err := locks.CheckTable(ctx, h.pool, table, h.o.ID)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		h.log.Warn(w)
	}
	// The configuration's clusters, before anything registers.
	if added, err := leases.EnsureClusters(ctx, h.pool, h.o.Clusters); err != nil {
		return err
	} else if len(added) > 0 {
		h.log.Info("clusters added from the configuration", "clusters", added)
	}
	return nil
}

// start is Start's sequence; whatever it started, stops() stops.
func (h *Host) start(ctx context.Context) (err error) {
	ccfg, err := db.ParseConnConfig(h.sessionConnString())
	if err != nil {
		return err
	}
	lcfg, err := db.ParseConnConfig(h.sessionConnString())
	if err != nil {
		return err
	}
	// (4) Register, and heartbeat. From here on a failure records stopped.
	h.registry = replicas.NewRegistry(ccfg, h.sessionConnString(), replicas.Options{
		ID: h.o.ID, Version: h.o.Version, HTTPAddr: h.Addr(), HeartbeatEvery: h.o.HeartbeatEvery, Logger: h.log,
		Incarnation: h.incarn,  // every try of a retried start is one incarnation
		Clock:       h.o.Clock, // its offset from database time sets the runner's timers
		OnBeat:      h.onBeat,
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
	h.registered.Store(true)
	if err := h.registry.Start(ctx); err != nil {
		return err
	}
	// (5) The bus, the run store, the runner, the control requests, HTTP.
	h.listener = bus.NewListener(lcfg, h.sessionConnString(), bus.Options{
		Logger: h.log, Handler: h.onMessage, OnResync: h.onResync,
		PingEvery: h.o.BusPingEvery, PingTimeout: h.o.BusPingTimeout,
	})
	if err := h.listener.Start(ctx); err != nil {
		return err
	}
	if err := h.store.Start(ctx); err != nil {
		return err
	}
	if err := h.runner.Start(ctx); err != nil {
		return err
	}
	h.log.Info("runner started", "jobs", len(h.runner.JobIDs()))
	// The lease loop: its rounds find this replica starting, so it claims
	// nothing until the state is ready (below).
	if err := h.leases.Start(ctx); err != nil {
		return err
	}
	h.req.setDeps(requestDeps{DB: h.pool, ReplicaID: h.o.ID, Incarnation: h.registry.Incarnation, Jobs: h.runner,
		ReadOnly: h.readOnly.Load, Drain: h.Drain, Logger: h.log})
	if err := h.req.Start(ctx); err != nil {
		return err
	}
	if err := h.stream.Start(ctx); err != nil {
		return err
	}
	if err := h.overdue.Start(ctx); err != nil {
		return err
	}
	if err := h.http.Start(ctx); err != nil {
		return err
	}
	// (6) Ready.
	if err := h.registry.SetState(ctx, replicas.StateReady); err != nil {
		if errors.Is(err, replicas.ErrIncarnationLost) {
			h.lost.Store(true)
		}
		return err
	}
	h.state.Store(replicas.StateReady)
	// A round at once: it finds this replica ready, claims its share and
	// signals, so the others release theirs at once.
	h.leases.Rebalance()
	return nil
}

// newRunner binds the jobs and builds the runner and its store; New
// checks the jobs, so a bad job fails before the replica registers.
func (h *Host) newRunner() (err error) {
	list := make([]jobtask.Job, 0, len(h.o.Jobs)+1)
	if !h.o.NoHousekeeping {
		list = append(list, jobstore.Housekeeping(h.pool))
	}
	// sql jobs get sessions of their own, direct when the pool may go
	// through a pooler (poolers.go).
	sqlDB, err := h.sqlJobsDB()
	if err != nil {
		return err
	}
	// http jobs share one client: keep-alive between runs (tasks.NewHTTPClient);
	// its idle connections close when the runner has stopped (drain.go).
	h.httpClient = tasks.NewHTTPClient()
	for _, j := range h.o.Jobs {
		list = append(list, jobtask.Bind(j, sqlDB, h.httpClient))
	}
	h.store = jobstore.NewStore(h.pool, h.o.ID, h.log)
	if h.provider != nil {
		h.store.SetLockTable(h.provider.Table()) // held-elsewhere skips name the lock's holder
	}
	h.runner, err = runner.New(runner.Options{
		ReplicaID: h.o.ID, Jobs: list, Locks: runner.LocksOf(h.provider), Store: h.store, Settings: jobstore.NewSettingsCache(h.pool),
		Clock: h.o.Clock, Logger: h.log, Metrics: h.metrics, ShutdownWait: h.o.ShutdownWait,
		Schedules: jobstore.NewSchedules(h.pool), Offset: h.clockOffset, Backfills: jobstore.NewBackfills(h.pool, h.o.ID),
		PerJobMetrics: h.o.MetricsPerJob, PerJobMetricsLimit: h.o.MetricsPerJobLimit, MaxConcurrentRuns: h.o.MaxConcurrentRuns,
		Secrets:       h.secrets(),    // from the URLs, PGPASSWORD or the passfile
		Members:       h.liveReplicas, // the designated replica of each installation job (docs/schedules.md)
		DurableStarts: h.o.DurableStarts,
	})
	return err
}

// liveReplicas is the live, ready replicas the lease loop read last
// (runner.Members); not current before its first round.
func (h *Host) liveReplicas() ([]string, bool) {
	if h.leases == nil {
		return nil, false
	}
	return h.leases.Live()
}

// onMessage is the bus handler: it runs on the listener goroutine and must
// not block. A drain or trigger signal only wakes the request claimer: the
// replica acts on a studio_request row it claims, never on the signal
// alone, since any role that can connect can NOTIFY.
func (h *Host) onMessage(m bus.Message) {
	if m.Type == bus.TypeFrame && m.Stream == stream.BusStream && h.stream != nil {
		h.stream.Wake() // a transaction wrote events: the hub reads them
		return
	}
	if m.Type != bus.TypeSignal {
		return // seqs are for watching clients (docs/bus.md)
	}
	switch {
	case m.Kind == bus.KindReplicaDrain && m.Key == h.o.ID:
		h.req.wantDrain()
	case m.Kind == bus.KindJobTrigger:
		h.req.wantJob(m.Key)
	case m.Kind == jobstore.KindJobBackfill:
		h.req.wantBackfill() // backfill.go
	case m.Kind == bus.KindJobSettings && h.runner != nil:
		h.runner.SettingsChanged(m.Key)
	case m.Kind == bus.KindLeasesRebalance && h.leases != nil:
		h.leases.Rebalance()
	case m.Kind == jobstore.KindJobSchedule && h.runner != nil:
		if end, started, ok := jobstore.EndOf(m); ok {
			h.runner.ScheduleEnded(m.Key, end, started) // a run ended: the signal carries its end
		} else {
			h.runner.ScheduleChanged(m.Key) // an older sender's: reread the shared schedule
		}
	case m.Kind == jobstore.KindJobStarted && h.runner != nil:
		h.runner.RunStarted(m.Key) // designate.go: a fallback waiting on it is given up
	}
}

// clockOffset is database time minus the replica's clock, as the registry
// last measured it (0 before it registered).
func (h *Host) clockOffset() time.Duration {
	if h.registry == nil {
		return 0
	}
	return h.registry.ClockOffset()
}

func (h *Host) onResync() {
	h.log.Info("bus reconnected; resyncing")
	if h.runner != nil {
		h.runner.ResyncSettings()
	}
	if h.leases != nil {
		h.leases.Rebalance() // a release signal may have been lost
	}
	if h.stream != nil {
		h.stream.Wake() // so may an events frame
	}
	// A drain or trigger whose NOTIFY was lost while the bus was down is
	// still a pending row.
	h.req.wantAll()
}

// Drain asks for the drain sequence (the first signal, a claimed drain
// request). Later calls, and calls once draining, do nothing more.
func (h *Host) Drain(reason string) {
	select {
	case h.drainReq <- reason:
	default:
	}
}

// StopNow stops at once (the second signal): the drain delay is cut, runs
// in progress are interrupted (recorded interrupted), and Wait returns
// ErrInterrupted. stopped is still recorded.
func (h *Host) StopNow() {
	h.nowOnce.Do(func() {
		h.log.Warn("stopping at once")
		close(h.now)
	})
}

// Stop is the soft way out: it drains (docs/services.md) and waits for the
// end. Safe twice, concurrently, before Prepare, between Prepare and
// Start, and while either runs.
func (h *Host) Stop() {
	h.Base.Stop() // cancels the run context: supervise drains, Prepare's waits end
	h.phaseMu.Lock()
	phase := h.phase
	if phase == phaseNew || phase == phasePrepared {
		h.phase = phaseEnded
	}
	h.phaseMu.Unlock()
	switch phase {
	case phaseNew:
		h.finish(nil) // nothing ran
	case phasePrepared:
		h.stopAll(h.stops(false)) // prepared, never registered
		h.finish(nil)
	}
	<-h.done // Prepare, Start or supervise finishes
}

// StopAndCancel is the hard way out: StopNow, then Stop. Runs in progress
// are interrupted (recorded interrupted), the drain delay is cut, and
// Wait says ErrInterrupted.
func (h *Host) StopAndCancel() {
	h.StopNow()
	h.Stop()
}

// HandleSignals turns sigs into the host's ways out until the host has
// ended or stop is called: the first signal drains, a second stops at
// once. stop waits for its goroutine.
func (h *Host) HandleSignals(sigs <-chan os.Signal) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		draining := false
		for {
			select {
			case s := <-sigs:
				if !draining {
					draining = true
					h.Drain("signal " + s.String())
					continue
				}
				h.StopNow()
			case <-h.done:
				return
			case <-quit:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// Done is closed when the replica has ended: drained, stopped at once,
// lost its id, or failed to start.
func (h *Host) Done() <-chan struct{} { return h.done }

// Wait waits for the end and says why: nil after a drain, ErrInterrupted
// after StopNow, an error wrapping replicas.ErrIncarnationLost when
// another process took the id, or the error of a failed Start.
func (h *Host) Wait() error {
	<-h.done
	return h.err
}

func (h *Host) finish(err error) {
	h.doneOnce.Do(func() {
		h.err = err
		close(h.done)
	})
}

// supervise waits, while the replica is ready, for a reason to end, then
// runs the drain sequence.
func (h *Host) supervise(ctx context.Context) {
	var why string
	select {
	case why = <-h.drainReq:
	case <-h.now:
		why = "stop at once"
		h.runner.Interrupt()
	case err := <-h.lostCh:
		h.loseID(err)
	case <-ctx.Done():
		why = "stopped"
	}
	if !h.lost.Load() {
		h.log.Info("draining", "reason", why, "drain_delay", h.o.DrainDelay.String())
	}
	// The stops run on their own goroutine, so that a loss of the id that
	// comes meanwhile still interrupts the runner at once.
	stopped := make(chan struct{})
	go func() { h.stopAll(h.stops(true)); close(stopped) }()
	now := h.now
	if isClosed(now) {
		now = nil // the runner was interrupted above
	}
	for waiting := true; waiting; {
		select {
		case <-stopped:
			waiting = false
		case err := <-h.lostCh:
			h.loseID(err)
		case <-now:
			now = nil
			h.runner.Interrupt() // runs in progress are recorded interrupted
		}
	}
	switch {
	case h.lost.Load():
		h.finish(h.lostErr)
	case isClosed(h.now):
		h.finish(ErrInterrupted)
	default:
		h.log.Info("stopped")
		h.finish(nil)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// loseID stops every duty at once after the id was taken over; nothing
// more is written to the registry, which now belongs to another process.
func (h *Host) loseID(err error) {
	if h.lost.Swap(true) {
		return
	}
	h.lostErr = err
	h.log.Error("another process took this replica id; stopping all duties", "error", err)
	h.state.Store(replicas.StateStopped)
	close(h.lostNotice)
	if h.runner != nil {
		h.runner.Interrupt()
	}
}

// LeasesOwned is how many cluster leases this replica owns and trusts now.
func (h *Host) LeasesOwned() int {
	if h.leases == nil {
		return 0
	}
	return len(h.leases.Owned())
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
		if h.readOnly.Load() {
			return false, "database: " + db.ErrReadOnly.Error() + ": claiming nothing until a writable primary answers (pool busy)"
		}
		if age := h.registry.SinceLastHeartbeat(); age > heartbeatFresh(h.o.HeartbeatEvery) {
			return false, fmt.Sprintf("database: pool busy and no heartbeat for %s", age.Round(time.Second))
		}
		return true, "ready (pool busy)"
	}
	ctx, cancel := context.WithTimeout(ctx, readyzDBTimeout)
	defer cancel()
	// The database must answer and accept writes: a replica on a standby
	// (or a primary turned read-only) claims nothing, so it is not ready.
	ro, err := db.ReadOnly(ctx, h.pool)
	if err != nil {
		if db.IsReadOnly(err) {
			h.setReadOnly(true, db.Scrub(err, h.o.ConnString).Error())
			return false, "database: " + db.Scrub(db.ExplainReadOnly(err), h.o.ConnString).Error()
		}
		return false, "database: " + db.Scrub(err, h.o.ConnString).Error()
	}
	if ro {
		h.setReadOnly(true, db.ErrReadOnly.Error())
		return false, "database: " + db.ErrReadOnly.Error() + ": claiming nothing until a writable primary answers"
	}
	h.setReadOnly(false, "")
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
	mux.Handle("GET /v1/events", h.stream)
	page := statuspage.New(statuspage.Options{DB: h.pool, LockTable: h.o.LockTable, ReplicaID: h.o.ID, Logger: h.log,
		Scrub: func(err error) error { return db.Scrub(err, h.o.ConnString) }})
	mux.Handle("GET /{$}", page) // docs/status-page.md
	mux.Handle("GET "+statuspage.OutputPath, page.Output())
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "studio_stream_clients", Help: "Clients of /v1/events now."},
			func() float64 { return float64(h.stream.Clients()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_stream_clients_dropped_total", Help: "Clients of /v1/events dropped for falling too far behind."},
			func() float64 { return float64(h.stream.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_stream_clients_refused_total", Help: "Clients of /v1/events turned away with 503 because the replica served its most (stream.DefaultMaxClients)."},
			func() float64 { return float64(h.stream.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_stream_reads_total", Help: "Reads of studio_event by the stream hub."},
			func() float64 { return float64(h.stream.Reads()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "studio_leases_owned", Help: "Cluster leases this replica owns and trusts now."},
			func() float64 { return float64(h.LeasesOwned()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_claims_total", Help: "Passes that looked for control requests to claim (at most one per 50ms, however many signals arrive)."},
			func() float64 { return float64(h.req.claims.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_requests_claimed_total", Help: "Control requests (studio_request rows) this replica claimed.",
			ConstLabels: prometheus.Labels{"kind": replicas.RequestKindDrain}},
			func() float64 { return float64(h.req.drainsClaimed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_requests_claimed_total", Help: "Control requests (studio_request rows) this replica claimed.",
			ConstLabels: prometheus.Labels{"kind": jobstore.RequestKindTrigger}},
			func() float64 { return float64(h.req.triggersClaimed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_signals_without_request_total", Help: "Drain or trigger signals that found no request for this replica to claim.",
			ConstLabels: prometheus.Labels{"kind": replicas.RequestKindDrain}},
			func() float64 { return float64(h.req.drainsEmpty.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "studio_control_signals_without_request_total", Help: "Drain or trigger signals that found no request for this replica to claim.",
			ConstLabels: prometheus.Labels{"kind": jobstore.RequestKindTrigger}},
			func() float64 { return float64(h.req.triggersEmpty.Load()) }),
	)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// warnSQLRole says, once at start, when sql: jobs run as the replica's own
// role: without database.sql_url a job's statements may do whatever the
// replica may, write run history and its events included (docs/jobs-sql.md,
// "Which role a job runs as"). Issue 21, finding 3.
func (h *Host) warnSQLRole() {
	if h.o.SQLConnString != "" {
		return
	}
	var ids []string
	for _, j := range h.o.Jobs {
		if j.Spec.Kind() == tasks.KindSQL {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	h.log.Warn("sql jobs run as the replica's own role (database.sql_url is not set): their statements can write run history and events as this replica; set database.sql_url to a login of studio_sql_job (docs/jobs-sql.md)",
		"jobs", ids)
}
