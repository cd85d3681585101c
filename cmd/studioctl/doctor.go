package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/doctor"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// doctorOptions are the dependencies of doctor.
type doctorOptions struct {
	deps
	// ConnString resolves the database: doctor opens it itself, so the
	// tls check sees the configuration even when the server is down.
	ConnString func(context.Context) (string, error)
	// PoolConfig is an operator command's pool configuration for a URL.
	PoolConfig func(string) (*pgxpool.Config, error)
	// Config is the loaded configuration (its file's jobs give the
	// timeouts; replica.id the id the lock table is checked with).
	Config func() *config.Config
}

func newDoctorCmd(a *app, runF func(context.Context, *doctorOptions) error) *cobra.Command {
	o := &doctorOptions{deps: a.deps(), ConnString: a.connString, PoolConfig: a.cliPoolConfig, Config: func() *config.Config { return a.cfg }}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the database, the schema, the clock, the bus, locks, replicas, leases and jobs",
		Long: `Run every health check and print one line each: ok, warn or fail, a one-line
detail, and a hint saying what to do. It reads only; it changes nothing.

Checks, in order: database, schema, clock, tls, bus, shedlock_table,
stale_locks, unknown_holders, crashed_replicas, starting_replicas, leases,
failing_jobs, stalled_jobs, near_timeout (docs/doctor.md says what each
looks at, its thresholds and why it warns or fails). When the database is
unreachable, database fails and the checks that need it say skip.

It exits 1 when any check fails, 0 otherwise (warnings included). -o json
prints an array of objects with the keys check, status, detail and hint.`,
		Example: `  studioctl doctor
  studioctl doctor -o json | jq -r '.[] | select(.status != "ok") | .check'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return doctorRun(cmd.Context(), o)
		},
	}
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

var doctorColumns = []output.Column{{Header: "CHECK"}, {Header: "STATUS"}, {Header: "DETAIL"}, {Header: "HINT"}}

func doctorTone(s doctor.Status) output.Tone {
	switch s {
	case doctor.OK:
		return output.Good
	case doctor.Warn:
		return output.Warn
	case doctor.Fail:
		return output.Bad
	default:
		return output.Dim
	}
}

// doctorRun runs the checks, prints them, and fails (exit 1) when one does.
func doctorRun(ctx context.Context, o *doctorOptions) error {
	cfg := o.Config()
	opts := doctor.Options{Now: o.Now, NowFixed: o.NowFixed, LockTable: o.LockTable(), ReplicaID: cfg.Replica.ID}
	if opts.ReplicaID == "" {
		opts.ReplicaID = replicas.DefaultID()
	}
	if cfg.File != "" {
		opts.Jobs, opts.JobsErr = jobs.LoadFile(cfg.File)
		opts.JobsSource = filepath.Base(cfg.File)
	}
	cs, err := o.ConnString(ctx)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return err
		}
		opts.OpenErr = err
	} else {
		pcfg, err := o.PoolConfig(cs)
		if err != nil {
			return &usageError{err: err}
		}
		opts.ConnConfig = pcfg.ConnConfig
		if l := cfg.Database.ListenURL; l != "" {
			if opts.ListenConnConfig, err = db.ParseConnConfig(l); err != nil {
				return usageErrorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %v", err)
			}
		}
		pool, err := db.OpenConfig(ctx, pcfg, cs)
		if err != nil {
			opts.OpenErr = err
		} else {
			defer pool.Close()
			opts.Pool = pool
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	results := doctor.Run(ctx, opts)
	rows := make([][]output.Cell, 0, len(results))
	for _, r := range results {
		rows = append(rows, []output.Cell{{Text: r.Check}, {Text: string(r.Status), Tone: doctorTone(r.Status)}, {Text: r.Detail}, {Text: r.Hint}})
	}
	if err := o.Printer().Print(results, doctorColumns, rows); err != nil {
		return err
	}
	if failed := doctor.Failed(results); len(failed) > 0 {
		n := "1 check"
		if len(failed) > 1 {
			n = fmt.Sprintf("%d checks", len(failed))
		}
		return fmt.Errorf("doctor: %s failed: %s", n, strings.Join(failed, ", "))
	}
	return nil
}
