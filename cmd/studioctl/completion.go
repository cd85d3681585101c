package main

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/natsort"
)

// completionTimeout bounds the completion of one word, connection
// included: a shell waits for it.
const completionTimeout = 2 * time.Second

// completionKind is what a positional argument names.
type completionKind int

const (
	completeNothing completionKind = iota
	completeJobs
	completeReplicas
	completeLocks
	completeClusters
	// completeDuties: the per-cluster duties (JOB@CLUSTER) of jobs, for
	// the verbs that take one (jobs status, jobs output).
	completeDuties
)

// argKind reads what cmd's first positional argument names from its usage
// line (jobs ... ID, replicas ... ID, locks ... NAME, leases ... CLUSTER),
// and whether every further argument names the same (CLUSTER...).
func argKind(cmd *cobra.Command) (completionKind, bool) {
	fields := strings.Fields(cmd.Use)
	if len(fields) < 2 || cmd.Parent() == nil {
		return completeNothing, false
	}
	arg := strings.Trim(fields[1], "[]")
	if k := strings.IndexByte(arg, '['); k >= 0 {
		arg = arg[:k] // ID[@CLUSTER]
	}
	many := strings.HasSuffix(arg, "...")
	arg = strings.TrimSuffix(arg, "...")
	switch noun := cmd.Parent().Name(); {
	case noun == "jobs" && (arg == "ID" || arg == "JOB"):
		return completeJobs, many
	case noun == "replicas" && arg == "ID":
		return completeReplicas, many
	case noun == "locks" && arg == "NAME":
		return completeLocks, many
	case noun == "leases" && arg == "CLUSTER":
		return completeClusters, many
	}
	return completeNothing, false
}

// addCompletions completes, under root, the -o values each command allows
// and the job ids, replica ids, lock names and cluster names its
// arguments name, read from the database.
func (a *app) addCompletions(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("output", func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		var names []string
		for _, f := range commandFormats(cmd) {
			names = append(names, string(f))
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.LocalFlags().Lookup("replica") != nil {
			// jobs forget --replica ID
			_ = c.RegisterFlagCompletionFunc("replica", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if err := a.load(cmd); err != nil {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return withPrefix(a.completeNames(cmd.Context(), completeReplicas), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
			})
		}
		kind, many := argKind(c)
		duties := kind == completeJobs && strings.Contains(c.Use, "@CLUSTER")
		if kind == completeNothing || c.ValidArgsFunction != nil {
			return
		}
		c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 && !many {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			// The flags of the line being completed are parsed by now:
			// read the configuration again with its --config,
			// --database-url and so on.
			if err := a.load(cmd); err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			k := kind
			if _, duty := jobs.ParseDutyKey(toComplete); duties && duty {
				k = completeDuties
			}
			return withPrefix(a.completeNames(cmd.Context(), k), toComplete, args), cobra.ShellCompDirectiveNoFileComp
		}
	}
	walk(root)
}

// withPrefix returns the names that start with prefix and are not in
// taken, in natural order.
func withPrefix(names []string, prefix string, taken []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) && !slices.Contains(taken, n) {
			out = append(out, n)
		}
	}
	natsort.Strings(out)
	return out
}

// completeNames reads the names of kind, or none on any error: completion
// is silent, bounded by completionTimeout, and never starts the embedded
// database or migrates one (it reads a running one only).
func (a *app) completeNames(ctx context.Context, kind completionKind) []string {
	if a.cfg == nil {
		return nil // the configuration did not load
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	cs, ok := a.completionConnString(ctx)
	if !ok {
		return nil
	}
	cfg, err := db.ParseConnConfig(cs)
	if err != nil {
		return nil
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec // a pooler in transaction mode too
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var names []string
	switch kind {
	case completeLocks:
		admin, err := locks.NewAdmin(conn, a.lockTable())
		if err != nil {
			return nil
		}
		infos, err := admin.List(ctx)
		if err != nil {
			return nil
		}
		for _, in := range infos {
			names = append(names, in.Name)
		}
		return names
	case completeJobs:
		// A per-cluster job's status rows are its duties' (JOB@CLUSTER);
		// the verbs take the job's id.
		names, err = queryNames(ctx, conn, `SELECT DISTINCT split_part(job_id, '@', 1) FROM studio_job_status ORDER BY 1`)
	case completeDuties:
		names, err = queryNames(ctx, conn, `SELECT DISTINCT job_id FROM studio_job_status WHERE strpos(job_id, '@') > 0 ORDER BY 1`)
	case completeReplicas:
		names, err = queryNames(ctx, conn, `SELECT id FROM studio_replica ORDER BY 1`)
	case completeClusters:
		names, err = queryNames(ctx, conn, `SELECT cluster FROM cluster_lease ORDER BY 1`)
	}
	if err != nil {
		return nil
	}
	return names
}

func queryNames(ctx context.Context, conn *pgx.Conn, sql string) ([]string, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// completionConnString is the database completion reads: the configured
// URL, the PG* variables, or the embedded database only when it already
// runs (its password read from its pgpass file, as psql would).
func (a *app) completionConnString(ctx context.Context) (string, bool) {
	if u := a.cfg.Database.URL; u != "" {
		return u, true
	}
	if a.pgEnv() {
		return "", true
	}
	e := a.embedded()
	st, err := e.Status(ctx)
	if err != nil || !st.Running || st.URL == "" {
		return "", false
	}
	u, err := url.Parse(st.URL)
	if err != nil {
		return "", false
	}
	q := u.Query()
	q.Set("passfile", e.PasswordFile())
	u.RawQuery = q.Encode()
	return u.String(), true
}
