package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/demo"
	"github.com/studioctl/studioctl/internal/output"
)

// demoOptions are the flags and dependencies of studioctl demo.
type demoOptions struct {
	deps
	Replicas int
	Duration string
	Faults   bool
	Keep     bool
	// Database resolves the database the demo creates its own in: the
	// connection string (password included) and a description without it.
	Database func(context.Context) (cs, described string, err error)
	// SQLJobURL, after Database, is the embedded default's login for sql:
	// jobs (docs/embedded.md), "" on another database; nil means none.
	SQLJobURL func() string
	// Executable is the binary the replicas run (os.Executable).
	Executable func() (string, error)
	// Environ is the children's base environment.
	Environ func() []string
	// Format is the -o value; StderrTTY and NoColor decide the live view.
	Format    func() output.Format
	StderrTTY bool
	NoColor   func() bool
}

func newDemoCmd(a *app, runF func(context.Context, *demoOptions) error) *cobra.Command {
	o := &demoOptions{deps: a.deps(), Database: a.demoDatabase, SQLJobURL: func() string { return a.embeddedSQLURL },
		Executable: os.Executable, Environ: os.Environ,
		Format: func() output.Format { return a.format }, StderrTTY: a.stderrTTY,
		NoColor: func() bool { return a.cfg.NoColor || a.getenv("NO_COLOR") != "" }}
	cmd := withFormats(&cobra.Command{
		Use:   "demo [--replicas N] [--duration D] [--faults] [--keep]",
		Short: "Run several replicas in a database of their own and show what studioctl is for",
		Long: `Run a demonstration: N real "studioctl run" processes of this binary share
installation jobs through the lock table, run an instance job, a failing and a
timing-out job, and own clusters through leases. It works in a fresh database
of its own (studioctl_demo_<random>) on the embedded default database or the
configured one, applies the schema there and drops it at the end (--keep
keeps it). It never touches another database's tables.

On a terminal a live view of the replicas, jobs, locks and leases redraws on
stderr; piped, stderr gets one line per event.

With --faults it walks through two incidents, narrating each step: it kills
(kill -9) the replica that is running an installation job, waits until the
lock that replica held shows as stale, releases it with "studioctl locks
release" and measures the takeover; then it drains another replica with
"studioctl replicas drain", shows "replicas list", and measures the handover
of its cluster leases.

It ends with a report built from the jobs' own records: executions per
replica, overlapping pairs (must be 0), runs against the ideal for the
schedule, the lock row and, with --faults, the takeover and handover times.
It exits 0 only when no installation job overlapped itself (1 otherwise).
See docs/demo.md.`,
		Example: `  studioctl demo
  studioctl demo --faults
  studioctl demo --replicas 5 --duration 2m
  studioctl demo --faults -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return demoRun(cmd.Context(), o)
		},
	}, output.Table, output.JSON)
	f := cmd.Flags()
	f.IntVar(&o.Replicas, "replicas", demo.DefaultReplicas, fmt.Sprintf("how many replicas to run (1 to %d; --faults needs %d)", demo.MaxReplicas, demo.FaultReplicas))
	f.StringVar(&o.Duration, "duration", demo.DefaultDuration.String(), "how long the replicas run, at least (the faults may take longer)")
	f.BoolVar(&o.Faults, "faults", false, "kill a replica, release its stale lock, drain another")
	f.BoolVar(&o.Keep, "keep", false, "keep the demo database and say how to connect")
	return cmd
}

// demoRun validates the flags, runs the demo and prints its report.
func demoRun(ctx context.Context, o *demoOptions) error {
	d, err := config.ParseDuration(o.Duration)
	if err != nil {
		return usageErrorf("--duration: %v", err)
	}
	opts := demo.Options{Replicas: o.Replicas, Duration: d, Faults: o.Faults, Keep: o.Keep}
	if err := opts.Validate(); err != nil {
		return &usageError{err: err}
	}
	exe, err := o.Executable()
	if err != nil {
		return fmt.Errorf("demo: find this binary: %w", err)
	}
	cs, described, err := o.Database(ctx)
	if err != nil {
		return err
	}
	opts.ConnString, opts.Described, opts.Executable = cs, described, exe
	// On the embedded default the demo's sql: jobs run as its login of
	// studio_sql_job; elsewhere as the replica's role (docs/demo.md).
	if o.SQLJobURL != nil {
		if u := o.SQLJobURL(); u != "" {
			cfg, err := db.ParseConnConfig(u)
			if err != nil {
				return fmt.Errorf("demo: the embedded database's sql jobs login: %w", db.Scrub(err, u))
			}
			opts.SQLJobUser, opts.SQLJobPassword = cfg.User, cfg.Password
		}
	}
	opts.Environ, opts.Stderr, opts.Terminal, opts.NoColor = o.Environ(), o.IO.Err, o.StderrTTY, o.NoColor()
	// A closed terminal (SIGHUP) ends the demo as Ctrl-C does: the replicas
	// are stopped and the database dropped, rather than left to Pdeathsig.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	rep, err := demo.Run(ctx, opts)
	// The report is printed when it is complete: the demo ended, with or
	// without an overlap (not when it was interrupted or could not finish).
	if rep != nil && (err == nil || errors.Is(err, demo.ErrOverlap)) {
		if o.Format() == output.JSON {
			if perr := o.Printer().Print(rep, nil, nil); perr != nil && err == nil {
				err = perr
			}
		} else {
			rep.WriteText(o.IO.Out)
		}
	}
	return err
}

// demoDatabase is the database the demo works on: the configured one, the
// PG* variables', or the embedded default (started if needed, but not
// migrated: the demo migrates only its own database).
func (a *app) demoDatabase(ctx context.Context) (string, string, error) {
	t := a.resolveDatabase()
	switch {
	case t.URL != "":
		return t.URL, db.Redact(t.URL), nil
	case t.PGEnv:
		return "", "the database of the PG* variables", nil
	}
	e := t.Embedded
	url, started, err := e.Ensure(ctx)
	if err != nil {
		return "", "", err
	}
	if started {
		fmt.Fprintf(a.stderr, "started the embedded database in %s\n", e.Dir)
	}
	if a.embeddedSQLURL, err = e.SQLJobURL(); err != nil {
		return "", "", fmt.Errorf("embedded database: the sql jobs' login: %w", err)
	}
	return url, "the embedded database " + db.Redact(url) + " (password in " + e.PasswordFile() + ")", nil
}
