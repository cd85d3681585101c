package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/output"
)

// jobsOutputOptions are the arguments and dependencies of jobs output.
type jobsOutputOptions struct {
	deps
	// ID is the job; Cluster, when not "", one cluster of a clusters:
	// owned job (JOB@CLUSTER).
	ID, Cluster string
	// Seq is the run; 0 is the job's newest.
	Seq int64
}

func newJobsOutputCmd(a *app, runF func(context.Context, *jobsOutputOptions) error) *cobra.Command {
	o := &jobsOutputOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "output ID[@CLUSTER] [SEQ]",
		Short: "Print the output of a job's run (by default its newest)",
		Long: `Print the stored output of one run of a job: the run SEQ (the SEQ column of
jobs history), or by default the job's newest run, ended or still going. For
a job with clusters: owned, ID@CLUSTER narrows to one cluster's runs.

What is stored is the last 4 KiB of the task's combined stdout and stderr (of
the response body for an http task), with the secrets studioctl knows of
(database passwords) replaced before it was written; it is printed as it was
stored, nothing added, so it can be piped to grep or a file. On a terminal a
header line naming the run goes to stderr, control characters other than
newline and tab are shown escaped (\x1b), and a missing final newline is
added.

Exit 4 when the job is unknown (no replica reported it and it has no run),
when SEQ is not a run of that job (or of that cluster), and when the run
stored no output (its task printed nothing, or it is still going).`,
		Example: `  studioctl jobs output nightly-report
  studioctl jobs output nightly-report 5332
  studioctl jobs output cluster-sync@eu-1
  studioctl jobs output nightly-report | grep -i error`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usageErrorf("%s: missing argument ID (usage: %s)", cmd.CommandPath(), cmd.UseLine())
			case len(args) > 2:
				return usageErrorf("%s: unexpected argument %q (usage: %s)", cmd.CommandPath(), args[2], cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			k, hasCluster := jobs.ParseDutyKey(args[0])
			id, cluster := k.Job, k.Cluster
			if err := jobs.ValidateID(id); err != nil {
				return usageErrorf("job id: %v", err)
			}
			if hasCluster {
				if err := leases.ValidateCluster(cluster); err != nil {
					return usageErrorf("job id %q: %v", args[0], err)
				}
			}
			o.ID, o.Cluster, o.Seq = id, cluster, 0
			if len(args) == 2 {
				seq, err := strconv.ParseInt(args[1], 10, 64)
				if err != nil || seq < 1 {
					return usageErrorf("SEQ: %q is not a run's sequence number (a positive integer, the SEQ column of jobs history)", args[1])
				}
				o.Seq = seq
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsOutputRun(cmd.Context(), o)
		},
	}
	return cmd
}

// jobsOutputRun prints one run's stored output tail.
func jobsOutputRun(ctx context.Context, o *jobsOutputOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	r, err := jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: o.ID, Cluster: o.Cluster, Seq: o.Seq})
	if err != nil {
		return err
	}
	if r.OutputTail == "" {
		return jobstore.NoOutputError(r)
	}
	p := o.Printer()
	if !p.Terminal() {
		_, err := io.WriteString(o.IO.Out, r.OutputTail)
		return err
	}
	fmt.Fprintln(o.IO.Err, output.Safe(runHeader(p, r)))
	_, err = io.WriteString(o.IO.Out, terminalText(r.OutputTail))
	return err
}

// runHeader names a run for the terminal's header line.
func runHeader(p *output.Printer, r jobs.Run) string {
	name := jobs.DutyKey{Job: r.JobID, Cluster: r.Cluster}.String()
	h := fmt.Sprintf("run %d of job %s on %s, started %s: %s", r.Seq, name, r.ReplicaID, p.Time(r.StartedAt), r.Outcome)
	if r.Error != "" {
		h += " (" + strings.Join(strings.Fields(r.Error), " ") + ")"
	}
	return h
}

// terminalText is text for a terminal: every line through output.Safe (a
// job's output must not drive the operator's terminal), tabs kept, and
// a final newline.
func terminalText(text string) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, l := range lines {
		parts := strings.Split(strings.TrimSuffix(l, "\r"), "\t")
		for k, part := range parts {
			parts[k] = output.Safe(part)
		}
		lines[i] = strings.Join(parts, "\t")
	}
	return strings.Join(lines, "\n") + "\n"
}
