package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/replicas"
)

// jobsForgetOptions are the flags, argument and dependencies of jobs forget.
type jobsForgetOptions struct {
	deps
	ID      string
	Replica string
	Reason  string
	Yes     bool
}

func newJobsForgetCmd(a *app, runF func(context.Context, *jobsForgetOptions) error) *cobra.Command {
	o := &jobsForgetOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "forget ID [--replica ID] [--reason R] [--yes]",
		Short: "Remove what replicas that no longer run a job left of it",
		Long: `Remove the status rows (studio_job_status) of a job that replicas which no
longer run it left behind: a replica that stopped, or is gone, with the job
in its configuration. With --replica, only that replica's. A per-cluster
job's duty rows (ID@CLUSTER) go with it.

A live replica keeps only the jobs its configuration declares: at start it
removes its own rows of the others. So while a live replica declares the
job, forget is refused (exit 3): remove the job from that configuration and
restart the replica, or stop it first. No row to remove exits 4.

When no status row of the job is left anywhere, its operator setting
(studio_job_setting: a pause, a schedule override) goes too, so a job added
again later under the same id starts from its configuration. Its run history
(jobs history) stays, and goes as housekeeping keeps it (docs/history.md).
The removal and its audit row (jobs.forget) are one transaction.`,
		Example: `  studioctl jobs forget broken-import --reason "removed from studio.yaml"
  studioctl jobs forget report --replica web-2 --yes`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			if cmd.Flags().Changed("replica") {
				if err := replicas.ValidateID(o.Replica); err != nil {
					return usageErrorf("--replica: %v", err)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsForgetRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Replica, "replica", "", "only the rows this replica left")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	return cmd
}

// jobsForgetRun removes the status rows a job's former replicas left.
func jobsForgetRun(ctx context.Context, o *jobsForgetOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	// Refused, or nothing to remove, before the question is asked.
	live, err := jobstore.LiveDeclarers(ctx, pool, o.ID)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		_, err := jobstore.Forget(ctx, pool, o.ID, o.Replica, o.Actor(), o.Reason)
		return err
	}
	if err := jobstore.Reported(ctx, pool, o.ID); err != nil {
		return err
	}
	what := fmt.Sprintf("forget job %q?", o.ID)
	if o.Replica != "" {
		what = fmt.Sprintf("forget what replica %q left of job %q?", o.Replica, o.ID)
	}
	ok, err := o.IO.confirm(what, o.Yes)
	if err != nil || !ok {
		if err == nil {
			fmt.Fprintln(o.IO.Err, "not forgotten")
		}
		return err
	}
	f, err := jobstore.Forget(ctx, pool, o.ID, o.Replica, o.Actor(), o.Reason)
	if err != nil {
		return err
	}
	var reps []string
	for _, r := range f.Rows {
		if len(reps) == 0 || reps[len(reps)-1] != r.ReplicaID {
			reps = append(reps, r.ReplicaID)
		}
	}
	rows := "1 status row"
	if len(f.Rows) != 1 {
		rows = fmt.Sprintf("%d status rows", len(f.Rows))
	}
	fmt.Fprintf(o.IO.Out, "forgot job %q: %s of %s", o.ID, rows, strings.Join(reps, ", "))
	if f.Settings {
		fmt.Fprint(o.IO.Out, "; its setting too")
	}
	fmt.Fprintln(o.IO.Out)
	return nil
}
