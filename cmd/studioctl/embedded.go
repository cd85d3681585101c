package main

import (
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
	cmd.AddCommand(a.newEmbeddedStatusCmd(), a.newEmbeddedStopCmd())
	return cmd
}

func (a *app) newEmbeddedStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say where the embedded database is, whether it runs and how to connect",
		Long: `Say where the embedded database is, whether it runs, and how to connect to
it with psql. The password is never shown: it is in the password file, which
psql reads through PGPASSFILE.`,
		Example: "  studioctl embedded status\n  studioctl embedded status -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.embedded().Status(cmd.Context())
			if err != nil {
				return err
			}
			p := a.printer()
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
			if err == nil && st.Running && (a.format == output.Table || a.format == output.Wide) {
				fmt.Fprintf(a.stderr, "connect with: %s\n", st.Connect)
			}
			return err
		},
	}
}

func (a *app) newEmbeddedStopCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "stop [--force]",
		Short: "Stop the embedded database",
		Long: `Stop the embedded database. While live replicas (a heartbeat less than 15 s
old, state not stopped) use it, stop is refused with exit 3 and names them;
--force stops it anyway.`,
		Example: "  studioctl embedded stop\n  studioctl embedded stop --force",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e := a.embedded()
			err := e.Stop(cmd.Context(), force)
			if errors.Is(err, embedded.ErrNotRunning) {
				fmt.Fprintln(a.stderr, "embedded database is not running")
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "stopped the embedded database in %s\n", e.Dir)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "stop even while live replicas use it")
	return cmd
}
