package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/output"
)

const (
	// historyDefaultLimit and historyMaxLimit bound jobs history --limit.
	historyDefaultLimit = 20
	historyMaxLimit     = 10000
	// statusRecentRuns is how many runs jobs status ID shows.
	statusRecentRuns = 5
)

func (a *app) newJobsCmd() *cobra.Command {
	cmd := groupCmd("jobs", "See why a job stalled; pause, resume, reschedule or trigger it", `Jobs run inside replicas (studioctl run). Each replica reports its jobs in
studio_job_status and their runs in studio_job_run; these commands read them
merged across live replicas, and change studio_job_setting, the operator
overrides that every replica reads at each fire (without a restart).

Health: ok; failing (the last run failed, timed out, lost its lock or was
interrupted); stalled (no completion, run or skip, within three intervals,
and no run in progress within its timeout); invalid-schedule (an override
the parser rejects); paused; retired (no live replica declares the job: its
last state as the stopped or gone replicas left it; jobs forget removes it).

Jobs are declared in the config file:

  jobs:
    - id: nightly-report        # [a-z0-9][a-z0-9-]*, at most 64 bytes
      scope: installation       # required: installation (one replica per tick) | instance (every replica)
      every: 30s                # fixed delay from the END of a run ... or
      # cron: "0 2 * * *"       # ... a cron expression, always UTC
      timeout: 10m              # optional; default max(5m, 3 intervals), 1h for cron
      # jitter: 5m              # optional: a fixed offset in [0, 5m) per job that delays each due time (docs/schedules.md)
      # deadline: 2m            # optional: an occurrence that cannot start within 2m of its time is skipped (skipped/deadline)
      # lock: nightlyReport     # optional, installation only: the ShedLock lock name (<= 64 characters); default the id
      run:
        command: ["./bin/report", "--day", "yesterday"]
        # sql: "DELETE FROM sessions WHERE expires_at < now()"
        # http: {method: POST, url: "http://127.0.0.1:9000/tasks/report", headers: {}, body: ""}`)
	cmd.AddCommand(newJobsListCmd(a, nil), newJobsStatusCmd(a, nil), newJobsHistoryCmd(a, nil),
		newJobsPauseCmd(a, true, nil), newJobsPauseCmd(a, false, nil), newJobsSetCmd(a, nil), newJobsTriggerCmd(a, nil))
	cmd.AddCommand(newJobsForgetCmd(a, nil))
	cmd.AddCommand(newJobsOutputCmd(a, nil))
	cmd.AddCommand(newJobsOccurrencesCmd(a, nil), newJobsWhyCmd(a, nil), newJobsOverdueCmd(a, nil))
	cmd.AddCommand(newJobsBackfillCmd(a, nil)) // jobs_backfill.go
	cmd.AddCommand(newJobsDiffCmd(a, nil))
	return cmd
}

var jobColumns = []output.Column{
	{Header: "ID"}, {Header: "SCOPE"}, {Header: "SCHEDULE"}, {Header: "JITTER", Wide: true}, {Header: "DEADLINE", Wide: true}, {Header: "HEALTH"}, {Header: "LAST RUN"}, {Header: "OUTCOME"},
	{Header: "WHERE"}, {Header: "NEXT FIRE"}, {Header: "RUNS"}, {Header: "FAILURES"},
	{Header: "LAST DUE"}, {Header: "SKIP 24H"}, {Header: "MISS 24H"}, {Header: "PAUSED"}, {Header: "LAST DUE AT", Wide: true},
	{Header: "TIMEOUTS", Wide: true}, {Header: "LOCK LOST", Wide: true}, {Header: "OVERRUNS", Wide: true}, {Header: "SKIPPED", Wide: true},
	{Header: "ERROR", Wide: true},
}

func healthTone(h jobs.Health) output.Tone {
	switch h {
	case jobs.HealthOK:
		return output.Good
	case jobs.HealthPaused, jobs.HealthRetired:
		return output.Dim
	case jobs.HealthStalled:
		return output.Warn
	default:
		return output.Bad
	}
}

// healthCell is the HEALTH column: the health, and " (drift)" when the
// live replicas' definitions of the job disagree (jobs diff shows how).
func healthCell(v jobstore.View) output.Cell {
	if v.Drift {
		return output.Cell{Text: string(v.Health) + " (drift)", Tone: output.Warn}
	}
	return output.Cell{Text: string(v.Health), Tone: healthTone(v.Health)}
}

func outcomeTone(o jobs.Outcome) output.Tone {
	switch {
	case o == jobs.OutcomeSucceeded:
		return output.Good
	case o == jobs.OutcomeRunning:
		return output.Warn
	case o.Failing():
		return output.Bad
	}
	return output.Plain
}

func jobRow(p *output.Printer, v jobstore.View) []output.Cell {
	errText := v.LastError
	if v.InvalidSchedule != "" {
		errText = v.InvalidSchedule
	}
	lastDue, skips, misses, lastDueAt := occurrenceCells(p, v.Occurrences)
	sched, jitter, deadline := jobs.SplitOptions(v.Schedule)
	return []output.Cell{
		{Text: v.ID}, {Text: string(v.Scope)}, {Text: sched}, {Text: durationCell(jitter)}, {Text: durationCell(deadline)}, healthCell(v),
		{Text: p.TimePtr(v.LastStartedAt)}, {Text: string(v.LastOutcome), Tone: outcomeTone(v.LastOutcome)}, {Text: v.LastReplica},
		{Text: p.TimePtr(v.NextFireAt)}, {Text: strconv.FormatInt(v.Runs, 10)}, {Text: strconv.FormatInt(v.Failures, 10)},
		lastDue, skips, misses, {Text: pauseCell(p, v)}, lastDueAt,
		{Text: strconv.FormatInt(v.Timeouts, 10)}, {Text: strconv.FormatInt(v.LockLost, 10)}, {Text: strconv.FormatInt(v.Overruns, 10)},
		{Text: strconv.FormatInt(v.SkippedElsewhere, 10)}, {Text: errorCell(errText)},
	}
}

// durationCell is a configured duration as the config file writes it
// (5m, 1m30s); "" when not set.
func durationCell(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return jobs.FormatDuration(d)
}

// errorCellWidth bounds the ERROR column of the tables, in display columns.
const errorCellWidth = 80

// errorCell is an error on one line, cut to errorCellWidth columns by
// output.Truncate, which never splits a character.
func errorCell(s string) string {
	return output.Truncate(strings.ReplaceAll(s, "\n", " "), errorCellWidth)
}

func printJobViews(p *output.Printer, views []jobstore.View) error {
	data := make([]jobstore.ViewJSON, 0, len(views))
	rows := make([][]output.Cell, 0, len(views))
	for _, v := range views {
		data = append(data, v.JSON())
		rows = append(rows, jobRow(p, v))
	}
	return p.Print(data, jobColumns, rows)
}

// jobViews reads the status rows (one job's with an id) and merges them.
func jobViews(ctx context.Context, d deps, id string) ([]jobstore.View, []jobstore.ReplicaStatus, time.Time, error) {
	pool, err := d.DB(ctx)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	rows, now, err := jobstore.ReadStatus(ctx, pool, id)
	if err != nil {
		return nil, nil, now, err
	}
	if id != "" && len(rows) == 0 {
		return nil, nil, now, fmt.Errorf("job %q: %w (no replica has reported it)", id, jobstore.ErrUnknownJob)
	}
	views := jobstore.Merge(rows, now)
	if err := jobstore.AddOccurrenceSummaries(ctx, pool, views); err != nil {
		return nil, nil, now, err
	}
	if err := jobstore.AddDrift(ctx, pool, views); err != nil {
		return nil, nil, now, err
	}
	if err := jobstore.AddPauses(ctx, pool, views, now); err != nil {
		return nil, nil, now, err
	}
	return views, rows, now, nil
}

// jobsStatusOptions are the argument and dependencies of jobs list and jobs
// status (list is status without an id).
type jobsStatusOptions struct {
	deps
	watchFlags
	ID string
}

func newJobsListCmd(a *app, runF func(context.Context, *jobsStatusOptions) error) *cobra.Command {
	o := &jobsStatusOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "list [--watch]",
		Short: "List every job merged across live replicas",
		Example: `  studioctl jobs list
  studioctl jobs list --watch
  studioctl jobs list -o wide
  studioctl jobs list -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsStatusRun(cmd.Context(), o)
		},
	}
	o.watchFlags.add(cmd)
	return withFormats(cmd, listFormats...)
}

func newJobsStatusCmd(a *app, runF func(context.Context, *jobsStatusOptions) error) *cobra.Command {
	o := &jobsStatusOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "status [ID | ID@CLUSTER] [--watch]",
		Short: "Show jobs; with an ID, one row per replica and the last runs",
		Long: `Show every job merged across live replicas, like jobs list. With an ID: the
merged job, one row per replica that reports it, and its last runs. A job
with clusters: owned has one duty per cluster (keyed ID@CLUSTER): its ID
shows every duty, ID@CLUSTER one duty and its runs for that cluster.`,
		Example: `  studioctl jobs status
  studioctl jobs status nightly-report
  studioctl jobs status compact@kafka-eu-1
  studioctl jobs status nightly-report --watch
  studioctl jobs status nightly-report -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s: unexpected argument %q (usage: %s)", cmd.CommandPath(), args[1], cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = ""
			if len(args) == 1 {
				o.ID = args[0]
				if err := validateJobOrDuty(o.ID); err != nil {
					return err
				}
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsStatusRun(cmd.Context(), o)
		},
	}
	o.watchFlags.add(cmd)
	return withFormats(cmd, listFormats...)
}

// validateJobOrDuty checks a job id, or a per-cluster duty's
// ID@CLUSTER (jobs.DutyKey).
func validateJobOrDuty(id string) error {
	k, duty := jobs.ParseDutyKey(id)
	job, cluster := k.Job, k.Cluster
	if err := jobs.ValidateID(job); err != nil {
		return usageErrorf("job id: %v", err)
	}
	if duty {
		if err := leases.ValidateCluster(cluster); err != nil {
			return usageErrorf("cluster of %q: %v", id, err)
		}
	}
	return nil
}

// jobsStatusRun prints every job, or one job in detail; once or, with
// --watch, on every change.
func jobsStatusRun(ctx context.Context, o *jobsStatusOptions) error {
	title := "jobs"
	if o.ID != "" {
		title = "job " + o.ID
	}
	structured := o.Printer().Structured()
	return watchList(ctx, o.deps, o.watchFlags, title, func(ctx context.Context) (listView, error) {
		views, rows, now, err := jobViews(ctx, o.deps, o.ID)
		if err != nil {
			return listView{}, err
		}
		if o.ID == "" || structured {
			return listView{print: func(p *output.Printer) error { return printJobViews(p, views) }, key: views}, nil
		}
		pool, err := o.DB(ctx)
		if err != nil {
			return listView{}, err
		}
		// A duty's runs are its job's, for its cluster (history rows keep
		// the job's own id).
		k, _ := jobs.ParseDutyKey(o.ID)
		runs, err := jobstore.RecentRuns(ctx, pool, k.Job, k.Cluster, statusRecentRuns)
		if err != nil {
			return listView{}, err
		}
		return listView{
			print: func(p *output.Printer) error { return printJobDetail(o.deps, p, views, rows, now, runs) },
			key:   jobDetailKey(views, rows, runs),
		}, nil
	})
}

// jobDetailKey is what jobs status ID shows minus the times its status rows
// are written at (every flush of the replica).
func jobDetailKey(v []jobstore.View, rows []jobstore.ReplicaStatus, runs []jobs.Run) any {
	rs := make([]jobstore.ReplicaStatus, 0, len(rows))
	for _, r := range rows {
		r.UpdatedAt, r.Since = time.Time{}, time.Time{}
		rs = append(rs, r)
	}
	return struct {
		View []jobstore.View
		Rows []jobstore.ReplicaStatus
		Runs []jobs.Run
	}{v, rs, runs}
}

// printJobDetail is jobs status ID as a table: the merged job (of a
// per-cluster job, each duty), one row per replica, and the last runs.
func printJobDetail(d deps, p *output.Printer, views []jobstore.View, rows []jobstore.ReplicaStatus, now time.Time, runs []jobs.Run) error {
	merged := make([][]output.Cell, 0, len(views))
	for _, v := range views {
		merged = append(merged, jobRow(p, v))
	}
	if err := p.Print(nil, jobColumns, merged); err != nil {
		return err
	}
	fmt.Fprintln(d.IO.Out)
	per := make([][]output.Cell, 0, len(rows))
	for _, r := range rows {
		single := jobstore.Merge([]jobstore.ReplicaStatus{{Status: r.Status, Live: true}}, now)[0]
		if single.Health == jobs.HealthStalled && r.Scope == jobs.ScopeInstallation && !stalledJob(views, r.JobID) {
			// One replica runs each due time (the designated one,
			// docs/schedules.md), so a replica that has not run the
			// job lately is not stalled while it completes elsewhere:
			// the merged row above judges the job.
			single.Health = jobs.HealthOK
		}
		replica := r.ReplicaID
		if !r.Live {
			replica += " (gone)"
		}
		if len(views) > 1 {
			replica += " " + r.JobID // which duty
		}
		cells := jobRow(p, single)
		cells[0] = output.Cell{Text: replica}
		per = append(per, cells)
	}
	cols := append([]output.Column{{Header: "REPLICA"}}, jobColumns[1:]...)
	if err := p.Print(nil, cols, per); err != nil {
		return err
	}
	fmt.Fprintln(d.IO.Out)
	return printRuns(p, runs)
}

// stalledJob reports whether the merged view of job id is stalled.
func stalledJob(views []jobstore.View, id string) bool {
	for _, v := range views {
		if v.ID == id {
			return v.Health == jobs.HealthStalled
		}
	}
	return false
}

// runJSON is the stable JSON/YAML shape of a run.
type runJSON struct {
	Seq             int64      `json:"seq" yaml:"seq"`
	JobID           string     `json:"job_id" yaml:"job_id"`
	ReplicaID       string     `json:"replica_id" yaml:"replica_id"`
	Cluster         *string    `json:"cluster" yaml:"cluster"`
	StartedAt       time.Time  `json:"started_at" yaml:"started_at"`
	FinishedAt      *time.Time `json:"finished_at" yaml:"finished_at"`
	DurationSeconds *float64   `json:"duration_seconds" yaml:"duration_seconds"`
	Outcome         string     `json:"outcome" yaml:"outcome"`
	Error           *string    `json:"error" yaml:"error"`
	// OutputTail is the whole stored tail of the task's output (scrubbed
	// of secrets when stored), null when it printed nothing.
	OutputTail *string `json:"output_tail" yaml:"output_tail"`
}

var runColumns = []output.Column{
	{Header: "SEQ"}, {Header: "REPLICA"}, {Header: "CLUSTER"}, {Header: "STARTED"}, {Header: "DURATION"},
	{Header: "OUTCOME"}, {Header: "ERROR"}, {Header: "OUTPUT", Wide: true},
}

// outputCellWidth bounds the OUTPUT column of -o wide, in display columns:
// the last line of the output, cut; jobs output JOB SEQ prints all of it.
const outputCellWidth = 60

// outputCell is a one-line glimpse of a run's output: its last non-blank
// line, cut to outputCellWidth.
func outputCell(tail string) string {
	lines := strings.Split(strings.TrimRight(tail, " \t\r\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	last = output.Truncate(last, outputCellWidth)
	if len(lines) > 1 && last != "" {
		last = "... " + last
	}
	return last
}

func printRuns(p *output.Printer, runs []jobs.Run) error {
	data := make([]runJSON, 0, len(runs))
	rows := make([][]output.Cell, 0, len(runs))
	for _, r := range runs {
		j := runJSON{Seq: r.Seq, JobID: r.JobID, ReplicaID: r.ReplicaID, StartedAt: r.StartedAt.UTC(), FinishedAt: r.FinishedAt, Outcome: string(r.Outcome)}
		if r.Cluster != "" {
			j.Cluster = &r.Cluster
		}
		if r.Error != "" {
			j.Error = &r.Error
		}
		if r.OutputTail != "" {
			j.OutputTail = &r.OutputTail
		}
		dur := ""
		if r.FinishedAt != nil {
			d := r.FinishedAt.Sub(r.StartedAt).Seconds()
			j.DurationSeconds = &d
			dur = output.Duration(r.FinishedAt.Sub(r.StartedAt))
		}
		data = append(data, j)
		errText := r.Error
		if !p.Structured() {
			errText = errorCell(errText)
		}
		rows = append(rows, []output.Cell{
			{Text: strconv.FormatInt(r.Seq, 10)}, {Text: r.ReplicaID}, {Text: r.Cluster}, {Text: p.Time(r.StartedAt)}, {Text: dur},
			{Text: string(r.Outcome), Tone: outcomeTone(r.Outcome)}, {Text: errText}, {Text: outputCell(r.OutputTail)},
		})
	}
	return p.Print(data, runColumns, rows)
}

// jobsHistoryOptions are the flags, argument and dependencies of jobs history.
type jobsHistoryOptions struct {
	deps
	ID    string
	Limit int
}

func newJobsHistoryCmd(a *app, runF func(context.Context, *jobsHistoryOptions) error) *cobra.Command {
	o := &jobsHistoryOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "history ID [--limit N]",
		Short: "List a job's runs, newest first",
		Long: `List a job's runs, newest first (by start time), from every replica and, for a
job with clusters: owned, every cluster.

What is kept (docs/history.md): housekeeping keeps each job's newest 100 runs,
whatever their outcome; beyond those, its runs that failed, timed out, lost
their lock or were interrupted in the last 7 days (the newest 100 of them);
and every run still going. Nothing finished is kept past 90 days, so the runs
of a job removed from the config go in the end. Older runs are counted in the
status counters (jobs status), not listed here.

-o wide adds OUTPUT, the last line of each run's output; -o json and -o yaml
hold the whole stored tail in output_tail. studioctl jobs output ID [SEQ]
prints one run's tail as it was stored.`,
		Example: `  studioctl jobs history nightly-report
  studioctl jobs history nightly-report -o wide
  studioctl jobs history nightly-report --limit 100 -o json`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			if o.Limit < 1 || o.Limit > historyMaxLimit {
				return usageErrorf("--limit: must be between 1 and %d, got %d", historyMaxLimit, o.Limit)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsHistoryRun(cmd.Context(), o)
		},
	}
	cmd.Flags().IntVar(&o.Limit, "limit", historyDefaultLimit, "how many runs to show")
	return withFormats(cmd, listFormats...)
}

// jobsHistoryRun prints a job's last runs, newest first.
func jobsHistoryRun(ctx context.Context, o *jobsHistoryOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	runs, err := jobstore.History(ctx, pool, o.ID, o.Limit)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		if err := jobstore.Known(ctx, pool, o.ID); err != nil {
			return err
		}
	}
	return printRuns(o.Printer(), runs)
}

// jobChangeOptions are the flags, argument and dependencies of the verbs
// that change a job's settings or trigger it.
type jobChangeOptions struct {
	deps
	ID     string
	Reason string
	Yes    bool
	// What is the verb the question names; Change is what it does.
	What   string
	Change jobstore.Change
}

func (o *jobChangeOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
}

// jobChangeRun confirms, applies and reports one settings change.
func jobChangeRun(ctx context.Context, o *jobChangeOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	if err := jobstore.Known(ctx, pool, o.ID); err != nil {
		return err
	}
	ok, err := o.IO.confirm(fmt.Sprintf("%s job %q?", o.What, o.ID), o.Yes)
	if err != nil || !ok {
		if err == nil {
			fmt.Fprintln(o.IO.Err, "nothing changed")
		}
		return err
	}
	c := o.Change
	c.Actor, c.Reason = o.Actor(), o.Reason
	s, err := jobstore.ApplyChange(ctx, pool, o.ID, c)
	unchanged := errors.Is(err, jobstore.ErrUnchanged)
	if err != nil && !unchanged && !errors.Is(err, jobstore.ErrPauseEndPassed) {
		return err
	}
	if errors.Is(err, jobstore.ErrPauseEndPassed) {
		return usageErrorf("%s: %v; nothing changed", pauseEndFlag(c), err)
	}
	sched := describeOverride(s.Schedule)
	paused := describePause(s)
	if unchanged {
		// A repeat is not an error, and not audited: nothing changed (the
		// replicas are still signalled to read the row again).
		fmt.Fprintf(o.IO.Out, "job %q: already paused=%s, schedule %s; nothing changed\n", o.ID, paused, sched)
	} else {
		fmt.Fprintf(o.IO.Out, "job %q: paused=%s, schedule %s (every replica applies it at its next fire)\n", o.ID, paused, sched)
	}
	return warnNoLiveHost(ctx, o.deps, o.ID)
}

// describeOverride is a stored override as `jobs set` reports it: the
// schedule ("as configured" without one), then ", tz ZONE" when the zone is
// overridden.
func describeOverride(text string) string {
	o, err := jobs.ParseOverride(text)
	if err != nil {
		return text
	}
	sched := "as configured"
	if !o.Schedule.IsZero() {
		sched = o.Schedule.String()
	}
	if o.Zone != nil {
		sched += ", tz " + o.Zone.String()
	}
	return sched
}

// warnNoLiveHost warns on stderr when no live replica declares job: a
// setting is stored, but nothing applies it until a replica with the job
// starts.
func warnNoLiveHost(ctx context.Context, d deps, job string) error {
	pool, err := d.DB(ctx)
	if err != nil {
		return err
	}
	live, err := jobstore.LiveDeclarers(ctx, pool, job)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		fmt.Fprintf(d.IO.Err, "warning: no live replica declares job %q: the setting is stored and applies when a replica with the job in its configuration starts\n", job)
	}
	return nil
}

func newJobsPauseCmd(a *app, pause bool, runF func(context.Context, *jobChangeOptions) error) *cobra.Command {
	if pause {
		return newJobsPauseEndCmd(a, runF)
	}
	o := &jobChangeOptions{deps: a.deps()}
	verb := "resume"
	cmd := &cobra.Command{
		Use:     verb + " ID [--reason R] [--yes]",
		Short:   "Resume a paused job",
		Example: fmt.Sprintf("  studioctl jobs %s nightly-report --reason \"incident 4521\"", verb),
		Args:    exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			o.What, o.Change = verb, jobstore.Change{Pause: &pause}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobChangeRun(cmd.Context(), o)
		},
	}
	o.flags(cmd)
	return cmd
}

func newJobsSetCmd(a *app, runF func(context.Context, *jobChangeOptions) error) *cobra.Command {
	o := &jobChangeOptions{deps: a.deps()}
	var every, cronExpr, tz string
	var clear bool
	cmd := &cobra.Command{
		Use:   "set ID {--every D | --cron EXPR | --tz ZONE | --clear} [--reason R] [--yes]",
		Short: "Override a job's schedule or time zone on every replica, or clear the override",
		Long: `Override a job's schedule in studio_job_setting: every replica reads it at the
job's next fire, without a restart. --tz sets the zone the cron fields are
read in (an IANA name such as Europe/Berlin; UTC by default; a fixed delay
ignores it), alone or with --every or --cron; --tz '' goes back to the
configured zone. --clear goes back to the configured schedule and zone. A
malformed duration, cron expression or zone exits 2 and changes nothing (a
CRON_TZ= prefix is refused: give the zone with --tz). See
docs/schedules.md, "Time zones".`,
		Example: `  studioctl jobs set nightly-report --every 1h
  studioctl jobs set nightly-report --cron "30 3 * * *"
  studioctl jobs set nightly-report --tz Europe/Berlin
  studioctl jobs set nightly-report --tz ''
  studioctl jobs set nightly-report --clear`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			given := 0
			for _, set := range []bool{cmd.Flags().Changed("every"), cmd.Flags().Changed("cron"), clear} {
				if set {
					given++
				}
			}
			zone := cmd.Flags().Changed("tz")
			switch {
			case given > 1 || (given == 0 && !zone):
				return usageErrorf("give exactly one of --every, --cron or --clear, or --tz alone or with --every or --cron")
			case clear && zone:
				return usageErrorf("--clear already goes back to the configured zone; give --tz '' to clear only the zone")
			}
			if zone && tz != "" {
				if _, err := jobs.LoadZone(tz); err != nil {
					return usageErrorf("--tz: %v", err)
				}
			}
			var sched jobs.Schedule
			switch {
			case cmd.Flags().Changed("every"):
				d, err := time.ParseDuration(every)
				if err != nil {
					return usageErrorf("--every: %q is not a duration (for example 30s, 5m, 1h)", every)
				}
				if d < jobs.MinEvery {
					return usageErrorf("--every: %s is shorter than the minimum %s", d, jobs.MinEvery)
				}
				sched = jobs.Schedule{Every: d}
			case cmd.Flags().Changed("cron"):
				s, err := jobs.ParseCron(cronExpr)
				if err != nil {
					return usageErrorf("--cron: %v", err)
				}
				sched = s
			}
			o.What, o.Change = "reschedule", jobstore.Change{}
			if given == 1 {
				o.Change.Schedule = &sched
			}
			switch {
			case zone:
				o.Change.Zone = &tz
			case clear:
				o.Change.Zone = new(string)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobChangeRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&every, "every", "", "fixed delay between the end of a run and the next fire")
	cmd.Flags().StringVar(&cronExpr, "cron", "", "cron expression, read in the job's zone (UTC unless tz: or --tz says otherwise)")
	cmd.Flags().StringVar(&tz, "tz", "", "IANA time zone the cron fields are read in; '' for the configured zone")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the override")
	o.flags(cmd)
	return cmd
}

func newJobsTriggerCmd(a *app, runF func(context.Context, *jobChangeOptions) error) *cobra.Command {
	o := &jobChangeOptions{deps: a.deps(), What: "trigger"}
	cmd := &cobra.Command{
		Use:   "trigger ID [--reason R] [--yes]",
		Short: "Run a job now (an installation job still takes its lock)",
		Long: `Write a trigger request (a studio_request row, with its audit row) and wake
the replicas with a job.trigger signal. An installation job runs once, on the
first live replica hosting it that claims the request, and still takes its
lock; an instance job runs once on every live replica hosting it. A replica
on which the job is running when it claims the request ignores it. A
request nobody claims within 10 minutes is void. No live replica hosting
the job exits 1. See docs/control.md.`,
		Example: `  studioctl jobs trigger nightly-report --reason "rerun after fix"`,
		Args:    exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsTriggerRun(cmd.Context(), o)
		},
	}
	o.flags(cmd)
	return cmd
}

// jobsTriggerRun writes a trigger request for one job.
func jobsTriggerRun(ctx context.Context, o *jobChangeOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	if err := jobstore.Known(ctx, pool, o.ID); err != nil {
		return err
	}
	// A trigger that nothing can run says so, before it asks.
	live, err := jobstore.LiveDeclarers(ctx, pool, o.ID)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		return fmt.Errorf("trigger job %q: %w: no live replica declares it in its configuration; start one that does, then try again", o.ID, jobstore.ErrNoLiveHost)
	}
	// A draining replica starts no run: a request only it could claim would
	// do nothing, and be void in 10 minutes.
	ready, err := jobstore.TriggerableDeclarers(ctx, pool, o.ID)
	if err != nil {
		return err
	}
	if len(ready) == 0 {
		who := "replica " + live[0] + " declares it but is draining"
		if len(live) > 1 {
			who = "replicas " + strings.Join(live, ", ") + " declare it but are draining"
		}
		return fmt.Errorf("trigger job %q: %w: %s (a draining replica starts no run); start one that declares it, then try again", o.ID, jobstore.ErrNoLiveHost, who)
	}
	ok, err := o.IO.confirm(fmt.Sprintf("trigger job %q?", o.ID), o.Yes)
	if err != nil || !ok {
		if err == nil {
			fmt.Fprintln(o.IO.Err, "not triggered")
		}
		return err
	}
	if _, err := jobstore.Trigger(ctx, pool, o.ID, o.Actor(), o.Reason); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Out, "triggered job %q\n", o.ID)
	return nil
}
