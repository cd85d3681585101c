package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/output"
)

func (a *app) newMigrateCmd() *cobra.Command {
	cmd := groupCmd("migrate", "Apply or inspect the database schema", `studioctl's schema lives in numbered, embedded migrations applied under a
PostgreSQL advisory lock, so processes that start together migrate once.
An existing shedlock table (made by a Java installation) is used as it is.`)
	cmd.AddCommand(
		&cobra.Command{
			Use:     "up",
			Short:   "Apply every pending migration",
			Example: "  studioctl migrate up --database-url postgres://app@db/app",
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				pool, err := a.db(cmd.Context())
				if err != nil {
					return err
				}
				applied, err := migrate.Up(cmd.Context(), pool)
				if err != nil {
					return err
				}
				if len(applied) == 0 {
					fmt.Fprintln(a.stderr, "schema is up to date")
				}
				for _, m := range applied {
					fmt.Fprintf(a.stderr, "applied %05d %s\n", m.Version, m.Name)
				}
				return nil
			},
		},
		&cobra.Command{
			Use:   "status",
			Short: "List migrations and whether each is applied",
			Long: `List the embedded migrations and whether each is applied, then any version
applied in the database that this binary does not know (state "unknown"): a
newer studioctl migrated the database, and "studioctl run" refuses it (exit 2).`,
			Example: "  studioctl migrate status -o json",
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				pool, err := a.db(cmd.Context())
				if err != nil {
					return err
				}
				m, err := migrate.New(pool)
				if err != nil {
					return err
				}
				defer m.Close()
				st, err := m.Status(cmd.Context())
				if err != nil {
					return err
				}
				p := a.printer()
				rows := make([][]output.Cell, 0, len(st))
				for _, s := range st {
					state, tone := "pending", output.Warn
					switch {
					case s.Unknown:
						state, tone = "unknown (newer than this binary)", output.Bad
					case s.Applied:
						state, tone = "applied", output.Good
					}
					rows = append(rows, []output.Cell{{Text: fmt.Sprintf("%05d", s.Version)}, {Text: s.Name}, {Text: state, Tone: tone}, {Text: p.TimePtr(s.AppliedAt)}})
				}
				return p.Print(st, []output.Column{{Header: "VERSION"}, {Header: "NAME"}, {Header: "STATE"}, {Header: "APPLIED AT"}}, rows)
			},
		},
	)
	return cmd
}
