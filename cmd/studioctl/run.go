package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/sdnotify"
	"github.com/studioctl/studioctl/internal/tasks"
)

// drainSignals drain a replica; a second one stops it at once.
var drainSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// runOptions are what `studioctl run` depends on: the loaded
// configuration, how to reach the database, the logger and the signals, so
// a test builds them itself.
type runOptions struct {
	deps
	// Config is the loaded configuration: the jobs file, replica.*,
	// drain.*, database.migrate.
	Config *config.Config
	// ConnString resolves the database and opens it: the embedded
	// default is started here, not migrated (the host migrates, with
	// database.migrate on).
	ConnString func(context.Context) (cs string, err error)
	// PGEnv: a PG* variable configures the database (database.url unset).
	PGEnv bool
	// EmbeddedSQLURL, after ConnString, is the embedded default's login
	// for sql: jobs (docs/embedded.md), "" on any other database; nil
	// means none.
	EmbeddedSQLURL func() string
	// Logger is the replica's logger (text on a terminal, JSON otherwise).
	Logger *slog.Logger
	// Signals subscribes to the signals that drain (the first) and stop
	// (the second); stop unsubscribes.
	Signals func() (sigs <-chan os.Signal, stop func())
	// Version is recorded in studio_replica.
	Version string
	// Notify tells systemd READY=1 and STOPPING=1 (NOTIFY_SOCKET; nil:
	// nothing is sent).
	Notify *sdnotify.Notifier
}

func newRunCmd(a *app, runF func(context.Context, *runOptions) error) *cobra.Command {
	o := &runOptions{deps: a.deps(), Version: buildVersion()}
	return withoutOutput(&cobra.Command{
		Use:   "run",
		Short: "Host a replica: registry heartbeat, bus, probes, drain",
		Long: `Host one replica against the configured database. It registers in
studio_replica (state starting, then ready), heartbeats every 5 s from its own
connection, listens on the bus (LISTEN studio), and serves /livez, /readyz and
/metrics and /v1/jobs on replica.listen (STUDIO_REPLICA_LISTEN; 127.0.0.1:0 picks a free
port and logs it).

SIGTERM, SIGINT or SIGHUP, or "studioctl replicas drain ID", drains it: state
draining (readiness fails), wait drain.delay (default 5s), stop, state
stopped, exit 0. A second signal stops it at once: the drain delay is cut,
runs in progress are recorded interrupted, state stopped is still written,
and it exits 1 (it did not drain).

It runs the jobs declared under jobs: in the config file (see
"studioctl jobs --help"), and the built-in studio-housekeeping job. A job
configuration error stops it before it registers, naming the file, the job
and the field (exit 2).

sql: jobs run as a role of their own: database.sql_url
(STUDIO_DATABASE_SQL_URL), a login of studio_sql_job (docs/roles.sql); on
the embedded default, the login studio_sql_job_login that studioctl
provisions there. On another database a config with sql: jobs and no
database.sql_url is refused (exit 2), unless database.sql_as_replica: true
(STUDIO_DATABASE_SQL_AS_REPLICA) runs them as the replica's own role, with
a warning at start. See docs/jobs-sql.md.

Before it registers, run checks what it can, each error naming the key
(exit 2): durations (drain.delay needs a unit, 0s to 10m; 0s means no
delay), replica.id ([a-z0-9][a-z0-9._-]*, at most 64 bytes), the schema
version (a database migrated by a newer studioctl is refused), the lock
table and replica.listen. A start that fails after registering records the
replica stopped, so a corrected restart may reuse the id at once. On a
read-only database or a standby it says so, waits for a writable primary
(readiness fails meanwhile) and starts when one answers. A database error
later in the start that may pass (a restart of PostgreSQL, terminated
backends, a promoted standby) is waited out too: it stops what it started
and tries again, for up to 5 minutes. See docs/replica-start.md and
docs/failover.md.

Behind a connection pooler in transaction mode (PgBouncer
pool_mode=transaction), set database.listen_url (STUDIO_DATABASE_LISTEN_URL)
to a direct connection: the bus, the heartbeat and the migrations use it, and
the pool keeps no session state. Without it, run refuses such a pooler
(exit 2). See docs/poolers.md.

A replica whose id belongs to a live replica refuses to start (exit 2),
unless that replica was a process of this machine that has ended (its pid
is gone). If another process takes its id over while it runs, it stops at
once and exits 1.
Under systemd (Type=notify: NOTIFY_SOCKET is set) it sends READY=1 when
/readyz first passes and STOPPING=1 when it drains; without NOTIFY_SOCKET
it sends nothing (deploy/systemd).
A closed stdout or stderr does not stop it (SIGPIPE is handled).
Logs go to stderr: text on a terminal, JSON otherwise; it prints nothing
on stdout, so it takes no -o.`,
		Example: `  studioctl run
  STUDIO_REPLICA_ID=web-1 STUDIO_REPLICA_LISTEN=127.0.0.1:8081 studioctl run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Config = a.cfg
			o.Logger = a.logger()
			o.PGEnv = a.pgEnv()
			a.hostMigrates = true
			o.ConnString = a.connString
			o.EmbeddedSQLURL = func() string { return a.embeddedSQLURL }
			o.Signals = processSignals
			o.Notify = sdnotify.FromEnv(a.getenv)
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return runRun(cmd.Context(), o)
		},
	})
}

// processSignals subscribes to this process's drain signals. The first
// signal drains and the second stops at once, so the host gets its own
// channel and a context that signals do not cancel. SIGHUP (a closed
// terminal, a supervisor's reload) drains like SIGTERM.
func processSignals() (<-chan os.Signal, func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, drainSignals...)
	return sigs, func() { signal.Stop(sigs) }
}

func (a *app) logger() *slog.Logger {
	if a.stderrTTY {
		return slog.New(slog.NewTextHandler(a.stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(a.stderr, nil))
}

// runRun hosts a replica until it has drained or stopped (SPEC §8).
func runRun(ctx context.Context, o *runOptions) error {
	sigs, stop := o.Signals()
	defer stop()
	// A closed stdout or stderr must not kill the replica: without a
	// handler, Go exits on SIGPIPE from a write to fd 1 or 2. Notify (not
	// Ignore, which job processes would inherit) turns it into EPIPE, and
	// slog drops a log line it could not write. It stays on until the
	// process exits, so the last "error:" line cannot kill it either and
	// the exit code stays the documented one.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx = context.WithoutCancel(ctx)
	// Job commands run as this user: hide the database secrets from them
	// (and from every other process of this user) before anything else:
	// /proc/<pid>/environ, mem and ptrace are refused from here on
	// (docs/jobs-processes.md).
	if err := tasks.ProtectSecrets(); err != nil {
		o.Logger.Warn("could not hide the database secrets from job commands", "error", err)
	}
	cfg := o.Config

	// A job configuration error stops run before it registers (exit 2).
	var list []jobs.Job
	var clusters []string
	if cfg.File != "" {
		var err error
		// The file as config.Load read it, once: its sections.
		if list, err = jobs.ParseSection(cfg.File, cfg.Doc.Section("jobs")); err != nil {
			return &usageError{err: err}
		}
		if clusters, err = leases.ParseSection(cfg.File, cfg.Doc.Section("clusters"), cfg.Leases.MaxConfigClusters); err != nil {
			return &usageError{err: err}
		}
	}
	table := o.LockTable()
	if err := table.Validate(); err != nil {
		return &usageError{err: err}
	}
	// The id is checked before the database is reached (an empty id gets
	// a default that passes).
	if id := cfg.Replica.ID; id != "" {
		if err := replicas.ValidateID(id); err != nil {
			return usageErrorf("replica.id (STUDIO_REPLICA_ID): %v", err)
		}
	}
	listen := cfg.Database.ListenURL
	if listen != "" {
		if _, err := db.ParseConnConfig(listen); err != nil {
			return usageErrorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %v", err)
		}
		if cfg.Database.URL == "" && !o.PGEnv {
			return usageErrorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL) is set but database.url is not: the listen URL is a direct " +
				"connection beside a database.url that goes through a pooler (docs/poolers.md)")
		}
	}
	if s := cfg.Database.SQLURL; s != "" {
		if _, err := db.ParseConnConfig(s); err != nil {
			return usageErrorf("database.sql_url (STUDIO_DATABASE_SQL_URL): %v", err)
		}
	}
	// sql: jobs need a role of their own (database.sql_url), the embedded
	// default's, or the explicit opt-out: checked before anything starts.
	if err := sqlJobsRole(cfg, list, cfg.Database.URL == "" && !o.PGEnv); err != nil {
		return err
	}
	cs, err := o.ConnString(ctx)
	if err != nil {
		return err
	}
	// On the embedded default, sql: jobs run as its own login of
	// studio_sql_job unless database.sql_url names another or
	// database.sql_as_replica keeps the replica's role.
	sqlURL := cfg.Database.SQLURL
	if sqlURL == "" && !cfg.Database.SQLAsReplica && o.EmbeddedSQLURL != nil {
		sqlURL = o.EmbeddedSQLURL()
	}
	// The configuration's default is 5s already; an explicit 0 means none.
	drainDelay := cfg.Drain.Delay
	if drainDelay == 0 {
		drainDelay = host.NoDrainDelay
	}
	clk, err := runClock(o.Getenv)
	if err != nil {
		return &usageError{err: err}
	}
	h, err := host.New(host.Options{
		Clock:            clk,
		Jobs:             list,
		Clusters:         clusters,
		LockTable:        table,
		ConnString:       cs,
		ListenConnString: listen,
		SQLConnString:    sqlURL,
		ID:               cfg.Replica.ID,
		Listen:           cfg.Replica.Listen,
		Version:          o.Version,
		DrainDelay:       drainDelay,
		MaxConns:         cfg.Database.MaxConns,
		Migrate:          cfg.Database.Migrate == "on", // the one place run migrates, on any database
		Logger:           o.Logger,

		MetricsPerJob: cfg.Metrics.PerJob, MetricsPerJobLimit: cfg.Metrics.PerJobLimit, // docs/metrics.md
		MaxConcurrentRuns: cfg.Runner.MaxConcurrentRuns, // docs/jobs-processes.md
		DurableStarts:     cfg.Runner.DurableStarts,     // docs/history.md
	})
	if err != nil {
		return &usageError{err: err}
	}
	// The signals are served from here to the end: one that comes while
	// the replica waits for a writable primary (or for the migration
	// lock) ends the preparation (docs/failover.md).
	stopSignals := h.HandleSignals(sigs)
	waitNotify := notifySystemd(ctx, h, o.Notify, o.Logger)
	err = hostReplica(ctx, h)
	stopSignals()
	waitNotify()
	// A live duplicate, a lock table that does not fit and a pooler where a
	// session of its own is needed are the configuration's fault (exit 2);
	// the operator commands keep exit 1 for a missing lock table, as their
	// scripts expect.
	if errors.Is(err, replicas.ErrLiveDuplicate) || errors.Is(err, locks.ErrSchema) ||
		errors.Is(err, db.ErrSharedSessions) || errors.Is(err, host.ErrListenURL) {
		return &usageError{err: err}
	}
	return err
}

// hostReplica prepares the replica (what blocks: a writable primary, the
// migrations, the checks), starts it, and waits for its end: nil after a
// drain, host.ErrInterrupted after a second signal, or why it failed.
func hostReplica(ctx context.Context, h *host.Host) error {
	if err := h.Prepare(ctx); err != nil {
		if errors.Is(err, host.ErrStoppedWhilePreparing) {
			return h.Wait() // a signal while it waited: nothing registered
		}
		return err
	}
	if err := h.Start(ctx); err != nil {
		if errors.Is(err, host.ErrStoppedWhilePreparing) {
			return h.Wait() // a signal while it waited out a database error
		}
		return err
	}
	return h.Wait()
}
