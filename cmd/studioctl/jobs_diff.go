package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// jobsDiffOptions are the argument and dependencies of jobs diff.
type jobsDiffOptions struct {
	deps
	ID string
}

func newJobsDiffCmd(a *app, runF func(context.Context, *jobsDiffOptions) error) *cobra.Command {
	o := &jobsDiffOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "diff ID",
		Short: "Show where the live replicas' definitions of a job differ",
		Long: `Compare the definition of a job that each live replica published when it
started (docs/schedules.md, "Drift between replicas"): its scope, schedule,
zone, timeout, missed policy, lock name, task and the names of its env: and
headers (their values may be secrets and are not published), each with the
defaults applied and secrets scrubbed. jobs list marks such a job
"(drift)", and doctor's config_drift names it.

One row per replica and field that differs: REPLICA, FIELD, VALUE. A job
that one live replica declares and another does not has the field
"defined": present or absent. A per-cluster job is compared by its
definition, whichever replica owns which cluster. A live replica of a
version that publishes no definitions is not compared (stderr names it).
-o json prints an array of objects with the keys replica_id, field and
value: empty when the replicas agree.

Exit 0 whether or not they differ; 4 when no replica has reported the job.`,
		Example: `  studioctl jobs diff nightly-report
  studioctl jobs diff nightly-report -o json`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsDiffRun(cmd.Context(), o)
		},
	}
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

var diffColumns = []output.Column{{Header: "REPLICA"}, {Header: "FIELD"}, {Header: "VALUE"}}

// jobsDiffRun prints where the live replicas' definitions of the job
// differ.
func jobsDiffRun(ctx context.Context, o *jobsDiffOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	defs, known, err := jobstore.ReadJobDefinitions(ctx, pool, o.ID)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("job %q: %w (no replica has reported it)", o.ID, jobstore.ErrUnknownJob)
	}
	diff := defs.Diff()
	if diff == nil {
		diff = []jobstore.Difference{} // -o json: [], not null
	}
	p := o.Printer()
	rows := make([][]output.Cell, 0, len(diff))
	for _, d := range diff {
		tone := output.Plain
		if d.Field == jobs.FieldDefined && d.Value == jobs.DefinedAbsent {
			tone = output.Warn
		}
		rows = append(rows, []output.Cell{{Text: d.ReplicaID}, {Text: d.Field}, {Text: strings.ReplaceAll(d.Value, "\n", " "), Tone: tone}})
	}
	if err := p.Print(diff, diffColumns, rows); err != nil {
		return err
	}
	if len(defs.Unknown) > 0 {
		fmt.Fprintf(o.IO.Err, "not compared: %s (a version that publishes no job definitions)\n", strings.Join(defs.Unknown, ", "))
	}
	if !p.Structured() && len(diff) == 0 {
		fmt.Fprintln(o.IO.Err, agreeNote(o.ID, defs))
	}
	return nil
}

// agreeNote says on stderr why jobs diff printed no row.
func agreeNote(id string, defs jobstore.JobDefinitions) string {
	var ids []string
	for _, r := range defs.Replicas {
		ids = append(ids, r.ReplicaID)
	}
	switch {
	case defs.Builtin:
		return fmt.Sprintf("job %s is built in: its definition comes with the version, not the configuration (not compared)", id)
	case len(ids) == 0:
		return fmt.Sprintf("job %s: no live replica publishes a definition to compare", id)
	case len(ids) == 1:
		return fmt.Sprintf("job %s: only %s publishes a definition; nothing to compare", id, ids[0])
	}
	return fmt.Sprintf("job %s: the live replicas %s agree", id, strings.Join(ids, ", "))
}
