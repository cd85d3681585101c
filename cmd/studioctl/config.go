package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/embedded"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

func (a *app) newConfigCmd() *cobra.Command {
	cmd := groupCmd("config", "Show the effective configuration", "")
	cmd.AddCommand(newConfigShowCmd(a, nil))
	return cmd
}

// configShowOptions are the flags and dependencies of config show.
type configShowOptions struct {
	deps
	// Jobs: also print the jobs and clusters of the config file as parsed.
	Jobs bool
	// Config is the loaded configuration; Format the -o value.
	Config func() *config.Config
	Format func() output.Format
	// PGEnv: a PG* variable configures the database (database.url unset).
	PGEnv func() bool
	// Embedded is the embedded database this invocation would use.
	Embedded func() *embedded.Embedded
}

func newConfigShowCmd(a *app, runF func(context.Context, *configShowOptions) error) *cobra.Command {
	o := &configShowOptions{deps: a.deps(), Config: func() *config.Config { return a.cfg }, Format: func() output.Format { return a.format },
		PGEnv: a.pgEnv, Embedded: a.embedded}
	cmd := &cobra.Command{
		Use:   "show [--jobs]",
		Short: "Print the effective configuration, secrets redacted",
		Long: `Print the configuration this invocation would use, after flags, STUDIO_*
environment variables, the config file and defaults, with each default
resolved to the value in use: actor (user@host), embedded.dir (the folder),
database.url (the configured URL, the PG* variables' target, or the embedded
database's URL when it runs), database.sql_url (on the embedded default, its
login studio_sql_job_login unless database.sql_as_replica is true). replica.id without a value is a new random id
at every start, <host>-<6 hex digits>: it is shown as <host>-?????? (...),
not as an id it will not have. Passwords are replaced by xxxxx. Each key's
environment variable is STUDIO_ plus the key in upper case with "." turned
into "_" (database.url: STUDIO_DATABASE_URL).

--jobs adds the jobs and clusters of the config file as run would parse
them: each job's id, scope, schedule, timeout (the default when none is
set), task kind, lock and clusters. A job configuration error is reported
as run reports it (exit 2), and so are sql: jobs without a role of their
own (database.sql_url; docs/jobs-sql.md). Commands, SQL text, URLs and env values are not
printed.

It starts no database and connects to none.`,
		Example: "  studioctl config show\n  studioctl config show --jobs --config studio.yaml\n  STUDIO_REPLICA_ID=web-1 studioctl config show -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return configShowRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Jobs, "jobs", false, "also print the jobs and clusters of the config file as parsed")
	return withFormats(cmd, output.Table, output.YAML, output.JSON)
}

// configShowRun prints the effective configuration (YAML unless -o json).
func configShowRun(ctx context.Context, o *configShowOptions) error {
	c := *o.Config()
	onEmbedded := c.Database.URL == "" && !o.PGEnv()
	e := o.Embedded()
	c.Database.URL = databaseInUse(ctx, c.Database.URL, o.PGEnv(), o.Getenv, e)
	c.Database.ListenURL = db.Redact(c.Database.ListenURL)
	c.Database.SQLURL = sqlJobsInUse(ctx, &c, onEmbedded, e)
	c.Actor = o.Actor()
	c.Embedded.Dir = e.Dir
	if c.Replica.ID == "" {
		c.Replica.ID = replicas.DefaultIDHost() + "-?????? (6 random hex digits, new at every start)"
	}
	shown := configView(c)
	if o.Jobs {
		js, cs, err := parsedJobs(o.Config(), onEmbedded)
		if err != nil {
			return err
		}
		shown["jobs"], shown["clusters"] = js, cs
	}
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

// databaseInUse is the database this invocation would use, password
// redacted: the configured URL, the target of the PG* variables, or the
// embedded database's URL when it runs (a description of it otherwise:
// config show starts nothing).
func databaseInUse(ctx context.Context, url string, pgEnv bool, getenv func(string) string, e *embedded.Embedded) string {
	if url != "" {
		return db.Redact(url)
	}
	if pgEnv {
		var kv []string
		for _, k := range []struct{ env, key string }{{"PGHOST", "host"}, {"PGHOSTADDR", "hostaddr"}, {"PGPORT", "port"},
			{"PGDATABASE", "dbname"}, {"PGUSER", "user"}, {"PGPASSWORD", "password"}, {"PGSERVICE", "service"}} {
			if v := getenv(k.env); v != "" {
				kv = append(kv, k.key+"="+v)
			}
		}
		return db.Redact(strings.Join(kv, " "))
	}
	st, err := e.Status(ctx)
	if err == nil && st.Running && st.URL != "" {
		return db.Redact(st.URL)
	}
	return fmt.Sprintf("(the embedded database in %s, not running: the first command that needs it starts it)", e.Dir)
}

// sqlJobsInUse is the connection sql: jobs would use, password redacted:
// database.sql_url, or on the embedded default (unless
// database.sql_as_replica) its login studio_sql_job_login, a URL when the
// server runs (a description otherwise); "" is the replica's own.
func sqlJobsInUse(ctx context.Context, c *config.Config, onEmbedded bool, e *embedded.Embedded) string {
	if c.Database.SQLURL != "" || !onEmbedded || c.Database.SQLAsReplica {
		return db.Redact(c.Database.SQLURL)
	}
	if st, err := e.Status(ctx); err == nil && st.Running && st.URL != "" {
		// database.url's form: the status URL, without a password.
		if u, err := url.Parse(st.URL); err == nil {
			u.User = url.User(embedded.SQLJobUser)
			return u.String()
		}
	}
	return fmt.Sprintf("(%s on the embedded database, password in %s)", embedded.SQLJobUser, e.SQLPasswordFile())
}

// jobView is one job as config show --jobs prints it.
type jobView struct {
	ID       string  `json:"id" yaml:"id"`
	Scope    string  `json:"scope" yaml:"scope"`
	Schedule string  `json:"schedule" yaml:"schedule"`
	Timeout  string  `json:"timeout" yaml:"timeout"`
	Task     string  `json:"task" yaml:"task"`
	Lock     *string `json:"lock" yaml:"lock"`         // installation jobs: the lock name
	Clusters *string `json:"clusters" yaml:"clusters"` // "owned": once per owned cluster
	Missed   string  `json:"missed" yaml:"missed"`
	// CatchUp: catch_up of a job with missed: catch-up; absent otherwise.
	CatchUp *catchUpView `json:"catch_up,omitempty" yaml:"catch_up,omitempty"`
	Line    int          `json:"line" yaml:"line"`
}

// catchUpView is a job's catch_up: as config show --jobs prints it.
type catchUpView struct {
	Max    int    `json:"max" yaml:"max"`
	Within string `json:"within" yaml:"within"`
}

// parsedJobs parses the jobs and clusters of cfg's file as run does, and
// refuses sql: jobs without a role of their own as run does (sqlJobsRole).
func parsedJobs(cfg *config.Config, onEmbedded bool) ([]jobView, []string, error) {
	views, clusters := []jobView{}, []string{}
	file := cfg.File
	if file == "" {
		return views, clusters, nil
	}
	list, err := jobs.ParseSection(file, cfg.Doc.Section("jobs"))
	if err != nil {
		return nil, nil, &usageError{err: err}
	}
	if err := sqlJobsRole(cfg, list, onEmbedded); err != nil {
		return nil, nil, err
	}
	cs, err := leases.ParseSection(file, cfg.Doc.Section("clusters"), cfg.Leases.MaxConfigClusters)
	if err != nil {
		return nil, nil, &usageError{err: err}
	}
	if cs != nil {
		clusters = cs
	}
	for _, j := range list {
		v := jobView{ID: j.ID, Scope: string(j.Scope), Schedule: j.Schedule.String(), Timeout: j.TimeoutFor(j.Schedule).String(),
			Task: j.Spec.Kind(), Missed: string(j.Missed), Line: j.Line}
		if v.Missed == "" {
			v.Missed = string(jobs.MissedRunOnce) // the default
		}
		if j.Missed == jobs.MissedCatchUp {
			v.CatchUp = &catchUpView{Max: j.CatchUp.Max, Within: jobs.FormatDuration(j.CatchUp.Within)}
		}
		if j.Scope == jobs.ScopeInstallation {
			v.Lock = optionalString(j.LockName())
		}
		if j.PerCluster {
			v.Clusters = optionalString("owned")
		}
		views = append(views, v)
	}
	return views, clusters, nil
}

// configView is the shape config show prints: the file's own key names.
func configView(c config.Config) map[string]any {
	return map[string]any{
		"config_file": c.File,
		"database": map[string]any{"url": c.Database.URL, "listen_url": c.Database.ListenURL, "sql_url": c.Database.SQLURL,
			"sql_as_replica": c.Database.SQLAsReplica, "migrate": c.Database.Migrate,
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
		"runner":   map[string]any{"max_concurrent_runs": c.Runner.MaxConcurrentRuns, "durable_starts": c.Runner.DurableStarts},
		"leases":   map[string]any{"max_config_clusters": c.Leases.MaxConfigClusters},
	}
}
