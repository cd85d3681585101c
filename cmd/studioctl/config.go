package main

import (
	"context"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/output"
)

func (a *app) newConfigCmd() *cobra.Command {
	cmd := groupCmd("config", "Show the effective configuration", "")
	cmd.AddCommand(newConfigShowCmd(a, nil))
	return cmd
}

// configShowOptions are the dependencies of config show.
type configShowOptions struct {
	deps
	// Config is the loaded configuration; Format the -o value.
	Config func() *config.Config
	Format func() output.Format
}

func newConfigShowCmd(a *app, runF func(context.Context, *configShowOptions) error) *cobra.Command {
	o := &configShowOptions{deps: a.deps(), Config: func() *config.Config { return a.cfg }, Format: func() output.Format { return a.format }}
	return withFormats(&cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration, secrets redacted",
		Long: `Print the configuration this invocation would use, after flags, STUDIO_*
environment variables, the config file and defaults. Passwords are replaced
by xxxxx. Each key's environment variable is STUDIO_ plus the key in upper
case with "." turned into "_" (database.url: STUDIO_DATABASE_URL).`,
		Example: "  studioctl config show\n  STUDIO_REPLICA_ID=web-1 studioctl config show -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return configShowRun(cmd.Context(), o)
		},
	}, output.Table, output.YAML, output.JSON)
}

// configShowRun prints the effective configuration (YAML unless -o json).
func configShowRun(_ context.Context, o *configShowOptions) error {
	c := *o.Config()
	c.Database.URL = db.Redact(c.Database.URL)
	c.Database.ListenURL = db.Redact(c.Database.ListenURL)
	shown := configView(c)
	if o.Format() == output.JSON {
		return o.Printer().Print(shown, nil, nil)
	}
	enc := yaml.NewEncoder(o.IO.Out)
	enc.SetIndent(2)
	if err := enc.Encode(shown); err != nil {
		return err
	}
	return enc.Close()
}

// configView is the shape config show prints: the file's own key names.
func configView(c config.Config) map[string]any {
	return map[string]any{
		"config_file": c.File,
		"database": map[string]any{"url": c.Database.URL, "listen_url": c.Database.ListenURL, "migrate": c.Database.Migrate,
			"max_conns": c.Database.MaxConns},
		"output":   c.Output,
		"no_color": c.NoColor,
		"actor":    c.Actor,
		"replica":  map[string]any{"id": c.Replica.ID, "listen": c.Replica.Listen},
		"drain":    map[string]any{"delay": c.Drain.Delay.String()},
		"locks": map[string]any{"table": c.Locks.Table, "columns": map[string]any{
			"name": c.Locks.Columns.Name, "lock_until": c.Locks.Columns.LockUntil,
			"locked_at": c.Locks.Columns.LockedAt, "locked_by": c.Locks.Columns.LockedBy,
		}},
		"embedded": map[string]any{"dir": c.Embedded.Dir},
		"metrics":  map[string]any{"per_job": c.Metrics.PerJob, "per_job_limit": c.Metrics.PerJobLimit},
	}
}
