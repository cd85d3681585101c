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
the postgres user), or embedded.dir. Every studioctl on the machine shares it.`)
	cmd.AddCommand(
		&cobra.Command{
			Use:     "status",
			Short:   "Say where the embedded database is and whether it runs",
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
				return p.Print(st, []output.Column{{Header: "STATE"}, {Header: "PORT"}, {Header: "URL"}, {Header: "DIR"}, {Header: "BINARIES", Wide: true}},
					[][]output.Cell{{{Text: state, Tone: tone}, {Text: port}, {Text: st.URL}, {Text: st.Dir}, {Text: st.BinDir}}})
			},
		},
		&cobra.Command{
			Use:     "stop",
			Short:   "Stop the embedded database",
			Example: "  studioctl embedded stop",
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				e := a.embedded()
				err := e.Stop(cmd.Context())
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
		},
	)
	return cmd
}
