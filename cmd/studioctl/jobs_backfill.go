package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// jobsBackfillOptions are the flags, argument and dependencies of jobs
// backfill.
type jobsBackfillOptions struct {
	deps
	ID       string
	From, To time.Time
	DryRun   bool
	Max      int
	Reason   string
	Yes      bool
	Again    bool
}

func newJobsBackfillCmd(a *app, runF func(context.Context, *jobsBackfillOptions) error) *cobra.Command {
	o := &jobsBackfillOptions{deps: a.deps()}
	var from, to string
	cmd := &cobra.Command{
		Use:   "backfill ID --from TIME --to TIME [--dry-run] [--max N] [--reason R] [--again] [--yes]",
		Short: "Run the past occurrences of a job in a range, each with its own nominal time",
		Long: `Compute the occurrences of an installation job's schedule (as in force: the
configuration or the operator's override, with its zone) in [--from, --to)
and print them, oldest first. --dry-run stops there and writes nothing.
Otherwise write one request (a studio_request row with its audit row, in
one transaction): the replicas hosting the job run the occurrences one at
a time, oldest first, each under the job's lock and never beside a live
run, each with its own nominal time (STUDIO_SCHEDULED_AT) and occurrence
key. jobs occurrences marks their runs backfill.

A fixed delay's occurrences are the multiples of the delay since the Unix
epoch. An occurrence that already ran (a run with its nominal time in its
slot) or that a backfill asked for and has not ended is left out; --again
runs those too. A backfill runs nothing while the job is paused. An
occurrence not started within 7 days of the request is void.

Times are RFC 3339 (2026-11-30T02:00:00Z). --from must be before --to, and
--to at or before the database's now; at most --max occurrences (default
100, at most 10000). Exit 2 for a bad time, range or --max, and for an
instance job or a per-cluster job (only installation jobs are backfilled,
docs/schedules.md "Backfill"); exit 4 for an unknown job; exit 1 when no
live replica can run it. -o json prints the occurrences that run, as an
array of {"nominal_at"}.`,
		Example: `  studioctl jobs backfill billing --from 2026-11-30T00:00:00Z --to 2026-11-30T04:00:00Z --dry-run
  studioctl jobs backfill billing --from 2026-11-30T00:00:00Z --to 2026-11-30T04:00:00Z --reason "outage 4521" --yes
  studioctl jobs backfill billing --from 2026-11-01T00:00:00Z --to 2026-12-01T00:00:00Z --max 720 --dry-run -o json`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if k, duty := jobs.ParseDutyKey(o.ID); duty {
				return usageErrorf("job id %q: jobs backfill runs installation jobs only; %s@%s is a per-cluster duty (docs/schedules.md, \"Backfill\")", o.ID, k.Job, k.Cluster)
			}
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			var err error
			if o.From, err = parseBackfillTime("--from", from, cmd.Flags().Changed("from")); err != nil {
				return err
			}
			if o.To, err = parseBackfillTime("--to", to, cmd.Flags().Changed("to")); err != nil {
				return err
			}
			if !o.From.Before(o.To) {
				return usageErrorf("--from %s is not before --to %s: the range [from, to) is empty", from, to)
			}
			if o.Max < 1 || o.Max > jobs.BackfillMaxLimit {
				return usageErrorf("--max: must be between 1 and %d, got %d", jobs.BackfillMaxLimit, o.Max)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsBackfillRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the range's start, included (RFC 3339)")
	cmd.Flags().StringVar(&to, "to", "", "the range's end, excluded (RFC 3339), at or before now")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the occurrences and write nothing")
	cmd.Flags().IntVar(&o.Max, "max", jobs.DefaultBackfillMax, "the most occurrences the range may hold")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&o.Again, "again", false, "also run the occurrences that ran or were asked for already")
	return withFormats(cmd, listFormats...)
}

// parseBackfillTime reads --from or --to: an RFC 3339 time, required.
func parseBackfillTime(flag, s string, given bool) (time.Time, error) {
	if !given || s == "" {
		return time.Time{}, usageErrorf("%s: required (an RFC 3339 time such as 2026-11-30T02:00:00Z)", flag)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageErrorf("%s: %q is not an RFC 3339 time (2026-11-30T02:00:00Z)", flag, s)
	}
	return t.UTC(), nil
}

// backfillPlan is what a backfill computed: the schedule, the occurrences
// and, for each, why it is left out ("" when it runs).
type backfillPlan struct {
	sched   jobs.Schedule
	occ     []jobs.BackfillOccurrence
	leftOut []string
}

// runs are the nominal times that run, and the ends of their slots.
func (b backfillPlan) runs(again bool) (at, until []time.Time) {
	for i, o := range b.occ {
		if again || b.leftOut[i] == "" {
			at, until = append(at, o.At), append(until, o.Until)
		}
	}
	return at, until
}

// jobsBackfillRun computes, prints and (without --dry-run) requests a
// backfill.
func jobsBackfillRun(ctx context.Context, o *jobsBackfillOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	plan, err := planBackfill(ctx, pool, o)
	if err != nil {
		return err
	}
	runs, slotUntil := plan.runs(o.Again)
	if !o.DryRun && len(runs) > 0 {
		// As a trigger, before anything is printed or asked: nothing is
		// requested that no replica could run (a draining replica starts
		// no run).
		live, err := jobstore.TriggerableDeclarers(ctx, pool, o.ID)
		if err != nil {
			return err
		}
		if len(live) == 0 {
			return fmt.Errorf("backfill job %q: %w: no live replica that is not draining declares it in its configuration; start one that does, then try again", o.ID, jobstore.ErrNoLiveHost)
		}
	}
	if err := printBackfill(o.Printer(), plan, o.Again); err != nil {
		return err
	}
	left := len(plan.occ) - len(runs)
	switch {
	case len(plan.occ) == 0:
		fmt.Fprintf(o.IO.Err, "no occurrence of job %q (%s) in [%s, %s); nothing to backfill\n", o.ID, plan.sched, fmtRFC(o.From), fmtRFC(o.To))
		return nil
	case o.DryRun:
		fmt.Fprintf(o.IO.Err, "dry run: %d of %d occurrences of job %q would run%s; nothing written\n", len(runs), len(plan.occ), o.ID, leftOutNote(left))
		return nil
	case len(runs) == 0:
		fmt.Fprintf(o.IO.Err, "nothing to backfill: every occurrence of job %q in the range ran or is requested (--again runs them)\n", o.ID)
		return nil
	}
	ok, err := o.IO.confirm(fmt.Sprintf("backfill job %q: run %d occurrences?", o.ID, len(runs)), o.Yes)
	if err != nil || !ok {
		if err == nil {
			fmt.Fprintln(o.IO.Err, "not backfilled")
		}
		return err
	}
	seq, err := jobstore.RequestBackfill(ctx, pool, jobstore.BackfillRequest{Job: o.ID, Actor: o.Actor(), Reason: o.Reason,
		From: o.From, To: o.To, Again: o.Again, NominalAt: runs, SlotUntil: slotUntil})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Err, "backfill of job %q requested: %d occurrences (request %d)%s; studioctl jobs occurrences %s shows their runs\n",
		o.ID, len(runs), seq, leftOutNote(left), o.ID)
	return nil
}

func leftOutNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d left out (ran or requested already; --again runs them)", n)
}

func fmtRFC(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// planBackfill checks the job and the range and computes the occurrences.
func planBackfill(ctx context.Context, pool jobstore.Querier, o *jobsBackfillOptions) (backfillPlan, error) {
	if err := jobstore.Known(ctx, pool, o.ID); err != nil {
		return backfillPlan{}, err
	}
	rows, now, err := jobstore.ReadStatus(ctx, pool, o.ID)
	if err != nil {
		return backfillPlan{}, err
	}
	// The database's now decides what is past, never STUDIO_NOW.
	if o.To.After(now) {
		return backfillPlan{}, usageErrorf("--to %s is after the database's now (%s): a backfill runs past occurrences only; the live schedule runs the rest",
			fmtRFC(o.To), now.Format(time.RFC3339))
	}
	var view *jobstore.View
	for _, v := range jobstore.Merge(rows, now) {
		if k, duty := jobs.ParseDutyKey(v.ID); duty && k.Job == o.ID {
			return backfillPlan{}, usageErrorf("job %q is a per-cluster job: jobs backfill runs installation jobs only (docs/schedules.md, \"Backfill\")", o.ID)
		}
		if v.ID == o.ID {
			view = &v
		}
	}
	if view == nil || view.Schedule == "" {
		return backfillPlan{}, fmt.Errorf("job %q: %w (no replica reports its schedule)", o.ID, jobstore.ErrUnknownJob)
	}
	if view.Scope != jobs.ScopeInstallation {
		return backfillPlan{}, usageErrorf("job %q is an %s job: jobs backfill runs installation jobs only; each replica runs an instance job's occurrences itself (docs/schedules.md, \"Backfill\")", o.ID, view.Scope)
	}
	sched, err := jobs.ParseSchedule(view.Schedule)
	if err != nil {
		return backfillPlan{}, fmt.Errorf("job %q: its schedule in force %q: %w", o.ID, view.Schedule, err)
	}
	occ, err := jobs.BackfillOccurrences(sched, o.From, o.To, o.Max)
	if errors.Is(err, jobs.ErrBackfillTooMany) {
		n := "more than " + fmt.Sprint(jobs.BackfillMaxLimit)
		if all, err := jobs.BackfillOccurrences(sched, o.From, o.To, jobs.BackfillMaxLimit); err == nil {
			n = fmt.Sprint(len(all))
		}
		return backfillPlan{}, usageErrorf("--max: [%s, %s) holds %s occurrences of job %q (%s), more than --max %d: give --max with a larger bound (at most %d) or a shorter range",
			fmtRFC(o.From), fmtRFC(o.To), n, o.ID, sched, o.Max, jobs.BackfillMaxLimit)
	}
	if err != nil {
		return backfillPlan{}, err
	}
	left, err := jobstore.BackfillLeftOut(ctx, pool, o.ID, occ)
	if err != nil {
		return backfillPlan{}, err
	}
	return backfillPlan{sched: sched, occ: occ, leftOut: left}, nil
}

// backfillJSON is one occurrence of jobs backfill -o json: an interface
// (issue 24), the occurrences that run, in order.
type backfillJSON struct {
	NominalAt string `json:"nominal_at" yaml:"nominal_at"`
}

var backfillColumns = []output.Column{{Header: "NOMINAL"}, {Header: "BACKFILL"}, {Header: "LOCAL", Wide: true}}

// printBackfill prints every occurrence with what becomes of it; JSON
// and YAML hold those that run.
func printBackfill(p *output.Printer, b backfillPlan, again bool) error {
	data := make([]backfillJSON, 0, len(b.occ))
	rows := make([][]output.Cell, 0, len(b.occ))
	for i, o := range b.occ {
		text, tone := "run", output.Good
		switch {
		case b.leftOut[i] != "" && again:
			text = "run again (" + b.leftOut[i] + ")"
		case b.leftOut[i] != "":
			text, tone = "left out ("+b.leftOut[i]+")", output.Plain
		}
		if strings.HasPrefix(text, "run") {
			data = append(data, backfillJSON{NominalAt: jobs.FormatNominal(o.At)})
		}
		rows = append(rows, []output.Cell{{Text: jobs.FormatNominal(o.At)}, {Text: text, Tone: tone},
			{Text: o.At.In(b.sched.Location()).Format("2006-01-02 15:04:05 MST")}})
	}
	return p.Print(data, backfillColumns, rows)
}
