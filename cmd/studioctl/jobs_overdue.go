package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/overdue"
)

// errOverdue: jobs overdue found at least one (exit 1, the page).
var errOverdue = errors.New("jobs overdue")

// jobsOverdueOptions are the flags and dependencies of jobs overdue.
type jobsOverdueOptions struct {
	deps
	Grace time.Duration
}

func newJobsOverdueCmd(a *app, runF func(context.Context, *jobsOverdueOptions) error) *cobra.Command {
	o := &jobsOverdueOptions{deps: a.deps()}
	var grace string
	cmd := &cobra.Command{
		Use:   "overdue [--grace DURATION]",
		Short: "List the jobs past their due time with no run started; exit 1 when there is one",
		Long: `List each job whose next due time plus the grace has passed with no run
started, as the database computes it from its tables alone
(studio_overdue_jobs, docs/occurrences-overdue.md): it needs no live replica,
so a cron entry or a monitor on another machine can page on it when every
replica is dead (a dead man's switch).

A job is listed once per scope key: "" for an installation job, the replica
id for an instance job, the cluster for a per-cluster duty. A paused job is
not overdue. A job stays watched after every replica stopped, cleanly or not,
until no replica that declares it has been up for 7 days.

Columns: JOB, SCOPE KEY, DUE (the due time that passed) and OVERDUE (how long
ago that was, the grace included). -o json prints an array of objects with
the keys job_id, scope_key, due_at and overdue_seconds.

It exits 1 when a job is overdue, 0 when none is; 2 for a bad --grace; 1
too when the database cannot be read (a page either way).`,
		Example: `  studioctl jobs overdue
  studioctl jobs overdue --grace 5m -o json
  */5 * * * * studioctl jobs overdue --grace 10m || page-oncall "studioctl: jobs overdue"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := time.ParseDuration(grace)
			if err != nil || d < 0 {
				return usageErrorf("--grace: %q is not a duration of 0 or more (for example 30s, 5m, 1h)", grace)
			}
			o.Grace = d
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsOverdueRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&grace, "grace", overdue.DefaultGrace.String(), "how long past its due time a job may be before it counts")
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

var overdueColumns = []output.Column{{Header: "JOB"}, {Header: "SCOPE KEY"}, {Header: "DUE"}, {Header: "OVERDUE"}}

// jobsOverdueRun prints the overdue jobs and fails (exit 1) when there is
// one.
func jobsOverdueRun(ctx context.Context, o *jobsOverdueOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	js, err := overdue.List(ctx, pool, o.Grace)
	if err != nil {
		return err
	}
	for i := range js {
		if o.NowFixed {
			// A fixed display clock (STUDIO_NOW): how long ago is counted
			// from it, so output is stable; overdue or not is the
			// database's.
			js[i].OverdueSeconds = o.Now().Sub(js[i].DueAt).Seconds()
		}
		js[i].OverdueSeconds = math.Round(js[i].OverdueSeconds*1000) / 1000
	}
	p := o.Printer()
	rows := make([][]output.Cell, 0, len(js))
	for _, j := range js {
		rows = append(rows, []output.Cell{{Text: j.JobID}, {Text: j.ScopeKey}, {Text: p.Time(j.DueAt)},
			{Text: output.Duration(time.Duration(j.OverdueSeconds * float64(time.Second))), Tone: output.Bad}})
	}
	if err := p.Print(js, overdueColumns, rows); err != nil {
		return err
	}
	if len(js) > 0 {
		n := "1 job is"
		if len(js) > 1 {
			n = fmt.Sprintf("%d jobs are", len(js))
		}
		return fmt.Errorf("%w: %s overdue (grace %s)", errOverdue, n, o.Grace)
	}
	return nil
}
