package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/replicas"
)

// drainSignals drain a replica; a second one stops it at once.
var drainSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

func (a *app) newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Host a replica: registry heartbeat, bus, probes, drain",
		Long: `Host one replica against the configured database. It registers in
studio_replica (state starting, then ready), heartbeats every 5 s from its own
connection, listens on the bus (LISTEN studio), and serves /livez, /readyz and
/metrics and /v1/jobs on replica.listen (STUDIO_REPLICA_LISTEN; 127.0.0.1:0 picks a free
port and logs it).

SIGTERM, SIGINT or SIGHUP, or "studioctl replicas drain ID", drains it: state
draining (readiness fails), wait drain.delay (default 5s), stop, state
stopped, exit 0. A second signal stops it at once.

It runs the jobs declared under jobs: in the config file (see
"studioctl jobs --help"), and the built-in studio-housekeeping job. A job
configuration error stops it before it registers, naming the file, the job
and the field (exit 2).

Before it registers, run checks what it can, each error naming the key
(exit 2): durations (drain.delay needs a unit, 0s to 10m; 0s means no
delay), replica.id ([a-z0-9][a-z0-9._-]*, at most 64 bytes), the schema
version (a database migrated by a newer studioctl is refused), the lock
table and replica.listen. A start that fails after registering records the
replica stopped, so a corrected restart may reuse the id at once. On a
read-only database or a standby it says so (exit 1). See
docs/replica-start.md.

A replica whose id belongs to a live replica refuses to start (exit 2). If
another process takes its id over while it runs, it stops at once and exits 1.
A closed stdout or stderr does not stop it (SIGPIPE is handled).
Logs go to stderr: text on a terminal, JSON otherwise.`,
		Example: `  studioctl run
  STUDIO_REPLICA_ID=web-1 STUDIO_REPLICA_LISTEN=127.0.0.1:8081 studioctl run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runReplica(cmd.Context())
		},
	}
}

func (a *app) logger() *slog.Logger {
	if a.stderrTTY {
		return slog.New(slog.NewTextHandler(a.stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(a.stderr, nil))
}

func (a *app) runReplica(ctx context.Context) error {
	// The first signal drains and the second stops at once, so the host
	// gets its own channel and a context that signals do not cancel.
	// SIGHUP (a closed terminal, a supervisor's reload) drains like SIGTERM.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, drainSignals...)
	defer signal.Stop(sigs)
	// A closed stdout or stderr must not kill the replica: without a
	// handler, Go exits on SIGPIPE from a write to fd 1 or 2. Notify (not
	// Ignore, which job processes would inherit) turns it into EPIPE, and
	// slog drops a log line it could not write. It stays on until the
	// process exits, so the last "error:" line cannot kill it either and
	// the exit code stays the documented one.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx = context.WithoutCancel(ctx)

	// A job configuration error stops run before it registers (exit 2).
	var list []jobs.Job
	var clusters []string
	if a.cfg.File != "" {
		var err error
		if list, err = jobs.LoadFile(a.cfg.File); err != nil {
			return &usageError{err: err}
		}
		if clusters, err = leases.LoadFile(a.cfg.File); err != nil {
			return &usageError{err: err}
		}
	}
	if err := a.lockTable().Validate(); err != nil {
		return &usageError{err: err}
	}
	// The id is checked before the database is reached (an empty id gets
	// a default that passes).
	if id := a.cfg.Replica.ID; id != "" {
		if err := replicas.ValidateID(id); err != nil {
			return usageErrorf("replica.id (STUDIO_REPLICA_ID): %v", err)
		}
	}
	cs, err := a.connString(ctx)
	if err != nil {
		return err
	}
	// The configuration's default is 5s already; an explicit 0 means none.
	drainDelay := a.cfg.Drain.Delay
	if drainDelay == 0 {
		drainDelay = host.NoDrainDelay
	}
	h, err := host.New(host.Options{
		Jobs:       list,
		Clusters:   clusters,
		LockTable:  a.lockTable(),
		ConnString: cs,
		ID:         a.cfg.Replica.ID,
		Listen:     a.cfg.Replica.Listen,
		Version:    buildVersion(),
		DrainDelay: drainDelay,
		Migrate:    a.cfg.Database.Migrate == "on" && !a.migrated, // the embedded default is migrated already
		Logger:     a.logger(),
	})
	if err != nil {
		return &usageError{err: err}
	}
	if err = h.Start(ctx); err == nil {
		err = serveUntilDone(h, sigs)
	}
	// A live duplicate and a lock table that does not fit are the
	// configuration's fault (exit 2); the operator commands keep exit 1 for
	// a missing lock table, as their scripts expect.
	if errors.Is(err, replicas.ErrLiveDuplicate) || errors.Is(err, locks.ErrSchema) {
		return &usageError{err: err}
	}
	return err
}

// serveUntilDone turns signals into the host's stops until it has ended:
// the first drains, a second stops at once.
func serveUntilDone(h *host.Host, sigs <-chan os.Signal) error {
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
		case <-h.Done():
			return h.Wait()
		}
	}
}
