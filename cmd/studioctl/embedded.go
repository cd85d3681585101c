package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/embedded"
	"github.com/studioctl/studioctl/internal/output"
)

func (a *app) newEmbeddedCmd() *cobra.Command {
	cmd := groupCmd("embedded", "Manage the embedded default database", `With no database configured, studioctl runs a PostgreSQL of its own from the
binaries on the machine (initdb, pg_ctl), with its data in
$XDG_DATA_HOME/studioctl/embedded (as root: /var/lib/studioctl/embedded, run as
the postgres user), or embedded.dir. Every studioctl on the machine shares it.
It listens on 127.0.0.1 only and asks every connection for a generated
password (SCRAM-SHA-256), kept in the folder's pgpass file (mode 0600).`)
	cmd.AddCommand(newEmbeddedStatusCmd(a, nil), newEmbeddedStopCmd(a, nil))
	return cmd
}

// embeddedOptions are the flags and dependencies of embedded status and stop.
type embeddedOptions struct {
	deps
	Force bool
	// Embedded is the embedded database this invocation would use.
	Embedded func() *embedded.Embedded
	// Format is the -o value (status says how to connect with the table only).
	Format func() output.Format
}

func newEmbeddedStatusCmd(a *app, runF func(context.Context, *embeddedOptions) error) *cobra.Command {
	o := &embeddedOptions{deps: a.deps(), Embedded: a.embedded, Format: func() output.Format { return a.format }}
	return withFormats(&cobra.Command{
		Use:   "status",
		Short: "Say where the embedded database is, whether it runs and how to connect",
		Long: `Say where the embedded database is, whether it runs, and how to connect to
it with psql. The password is never shown: it is in the password file, which
psql reads through PGPASSFILE.`,
		Example: "  studioctl embedded status\n  studioctl embedded status -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return embeddedStatusRun(cmd.Context(), o)
		},
	}, listFormats...)
}

// embeddedStatusRun says where the embedded database is and whether it runs.
func embeddedStatusRun(ctx context.Context, o *embeddedOptions) error {
	st, err := o.Embedded().Status(ctx)
	if err != nil {
		return err
	}
	p := o.Printer()
	state, tone := "stopped", output.Warn
	switch {
	case !st.Initialized:
		state, tone = "not initialized", output.Dim
	case st.Running:
		state, tone = "running", output.Good
	}
	port := ""
	if st.Port != 0 {
		port = fmt.Sprint(st.Port)
	}
	err = p.Print(st, []output.Column{{Header: "STATE"}, {Header: "PORT"}, {Header: "URL"}, {Header: "PASSWORD FILE"}, {Header: "DIR"}, {Header: "BINARIES", Wide: true}},
		[][]output.Cell{{{Text: state, Tone: tone}, {Text: port}, {Text: st.URL}, {Text: st.PasswordFile}, {Text: st.Dir}, {Text: st.BinDir}}})
	if f := o.Format(); err == nil && st.Running && (f == output.Table || f == output.Wide) {
		fmt.Fprintf(o.IO.Err, "connect with: %s\n", st.Connect)
	}
	return err
}

func newEmbeddedStopCmd(a *app, runF func(context.Context, *embeddedOptions) error) *cobra.Command {
	o := &embeddedOptions{deps: a.deps(), Embedded: a.embedded}
	cmd := &cobra.Command{
		Use:   "stop [--force]",
		Short: "Stop the embedded database",
		Long: `Stop the embedded database. While live replicas (a heartbeat less than 15 s
old, state not stopped) use it, stop is refused with exit 3 and names them;
--force stops it anyway.`,
		Example: "  studioctl embedded stop\n  studioctl embedded stop --force",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return embeddedStopRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "stop even while live replicas use it")
	return cmd
}

// embeddedStopRun stops the embedded database unless live replicas use it.
func embeddedStopRun(ctx context.Context, o *embeddedOptions) error {
	e := o.Embedded()
	err := e.Stop(ctx, o.Force)
	if errors.Is(err, embedded.ErrNotRunning) {
		fmt.Fprintln(o.IO.Err, "embedded database is not running")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Err, "stopped the embedded database in %s\n", e.Dir)
	return nil
}
