package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// jobsOccurrencesOptions are the flags, argument and dependencies of jobs
// occurrences.
type jobsOccurrencesOptions struct {
	deps
	watchFlags
	ID    string
	Query jobstore.OccurrenceQuery
}

func newJobsOccurrencesCmd(a *app, runF func(context.Context, *jobsOccurrencesOptions) error) *cobra.Command {
	o := &jobsOccurrencesOptions{deps: a.deps()}
	var since, scope string
	cmd := &cobra.Command{
		Use:   "occurrences ID [--since DURATION|TIME] [--scope KEY] [--limit N] [--watch]",
		Short: "List the times a job fell due and what became of each, newest first",
		Long: `List a job's occurrences, newest first by nominal time: every time it fell
due, and whether it ran, was skipped or was missed, and why
(docs/occurrences.md).

  ran       a run started for it: REPLICA and SEQ name the run, LATENESS is
            its start minus the nominal time (a jobs trigger run has the
            trigger's time as its nominal time);
  skipped   paused, held-elsewhere (the lock was held by another holder),
            overrun (the previous run still going), invalid-schedule, or
            deadline;
  missed    down (no live replica hosted the job: one row for the whole
            stretch, COUNT due times until LAST) or lost (the run started
            and its replica died or lost the lock before it ended).

The scope key is "" for an installation job, the replica id for an
instance job and the cluster for a per-cluster duty; --scope keeps one.
--since keeps what fell due at or after a time (RFC 3339) or within a
duration back from now (30m, 24h); a stretch counts by its last due time.
-o wide adds SCOPE and DETAIL (holder, who paused, the stretch, the run's
own outcome); studioctl jobs why ID explains one occurrence.

Exit 4 when the job is unknown (no replica reported it and nothing of it
is recorded). A known job without occurrences prints an empty list.`,
		Example: `  studioctl jobs occurrences nightly-report
  studioctl jobs occurrences nightly-report --since 24h
  studioctl jobs occurrences cache-warm --scope web-2 -o wide
  studioctl jobs occurrences nightly-report --since 2026-11-30T00:00:00Z -o json`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := validateOccurrenceJob(o.ID); err != nil {
				return err
			}
			if o.Query.Limit < 1 || o.Query.Limit > historyMaxLimit {
				return usageErrorf("--limit: must be between 1 and %d, got %d", historyMaxLimit, o.Query.Limit)
			}
			o.Query.Job, o.Query.Since, o.Query.SinceAgo, o.Query.Scope = o.ID, time.Time{}, 0, nil
			if cmd.Flags().Changed("since") {
				if err := parseSince(since, &o.Query); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("scope") {
				s := scope
				o.Query.Scope = &s
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsOccurrencesRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "keep what fell due since this time (RFC 3339) or within this duration back (24h)")
	cmd.Flags().StringVar(&scope, "scope", "", `keep one scope key (a replica id, a cluster; "" for an installation job)`)
	cmd.Flags().IntVar(&o.Query.Limit, "limit", historyDefaultLimit, "how many occurrences to show")
	o.watchFlags.add(cmd)
	return withFormats(cmd, listFormats...)
}

// parseSince reads --since: a duration back from database now, or a time.
func parseSince(s string, q *jobstore.OccurrenceQuery) error {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return usageErrorf("--since: the duration must be positive, got %s", s)
		}
		q.SinceAgo = d
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return usageErrorf("--since: %q is neither a duration (30m, 24h) nor an RFC 3339 time (2026-11-30T02:00:00Z)", s)
	}
	q.Since = t.UTC()
	return nil
}

// jobsOccurrencesRun prints a job's occurrences, once or with --watch on
// every change.
func jobsOccurrencesRun(ctx context.Context, o *jobsOccurrencesOptions) error {
	return watchList(ctx, o.deps, o.watchFlags, "occurrences of job "+o.ID, func(ctx context.Context) (listView, error) {
		pool, err := o.DB(ctx)
		if err != nil {
			return listView{}, err
		}
		occ, err := jobstore.ListOccurrences(ctx, pool, o.Query)
		if err != nil {
			return listView{}, err
		}
		if len(occ) == 0 {
			if err := jobstore.KnownOccurrences(ctx, pool, o.ID); err != nil {
				return listView{}, err
			}
		}
		return listView{print: func(p *output.Printer) error { return printOccurrences(p, occ) }, key: occ}, nil
	})
}

// occurrenceJSON is the stable JSON/YAML shape of an occurrence (jobs
// occurrences; jobs why adds summary and hint). The keys are an interface
// (issue 22, docs/occurrences.md).
type occurrenceJSON struct {
	JobID           string   `json:"job_id" yaml:"job_id"`
	ScopeKey        string   `json:"scope_key" yaml:"scope_key"`
	NominalAt       string   `json:"nominal_at" yaml:"nominal_at"`
	Outcome         string   `json:"outcome" yaml:"outcome"`
	Reason          *string  `json:"reason" yaml:"reason"`
	ReplicaID       *string  `json:"replica_id" yaml:"replica_id"`
	Seq             *int64   `json:"seq" yaml:"seq"`
	LatenessSeconds *float64 `json:"lateness_seconds" yaml:"lateness_seconds"`
	Holder          *string  `json:"holder" yaml:"holder"`
	PausedBy        *string  `json:"paused_by" yaml:"paused_by"`
	Count           int      `json:"count" yaml:"count"`
	LastNominalAt   *string  `json:"last_nominal_at" yaml:"last_nominal_at"`
	Triggered       bool     `json:"triggered" yaml:"triggered"`
	// Backfill: a run of a jobs backfill occurrence (docs/schedules.md).
	Backfill bool `json:"backfill" yaml:"backfill"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toOccurrenceJSON(o jobstore.OccurrenceView) occurrenceJSON {
	j := occurrenceJSON{
		JobID: o.JobID, ScopeKey: o.ScopeKey, NominalAt: jobs.FormatNominal(o.NominalAt), Outcome: o.Outcome,
		Reason: strPtr(o.Reason), ReplicaID: strPtr(o.ReplicaID), Seq: o.Seq, Holder: o.Holder, PausedBy: o.PausedBy,
		Count: o.Count, Triggered: o.Triggered, Backfill: o.Backfill,
	}
	if o.LatenessSeconds != nil {
		// Milliseconds, as the nominal time: a run's start has microseconds.
		l := float64(int64(*o.LatenessSeconds*1000+0.5)) / 1000
		j.LatenessSeconds = &l
	}
	if o.LastNominalAt != nil {
		s := jobs.FormatNominal(*o.LastNominalAt)
		j.LastNominalAt = &s
	}
	return j
}

var occurrenceColumns = []output.Column{
	{Header: "NOMINAL"}, {Header: "OUTCOME"}, {Header: "REASON"}, {Header: "REPLICA"}, {Header: "LATENESS"}, {Header: "SEQ"},
	{Header: "SCOPE", Wide: true}, {Header: "DETAIL", Wide: true},
}

func occurrenceTone(o jobstore.OccurrenceView) output.Tone {
	switch o.Outcome {
	case jobs.OccurrenceRan:
		return outcomeTone(jobs.Outcome(o.RunOutcome))
	case jobs.OccurrenceSkipped:
		return output.Warn
	case jobs.OccurrenceMissed:
		return output.Bad
	}
	return output.Plain
}

// nominalCell is a nominal time for a table: relative on a terminal,
// otherwise as the occurrence key writes it (milliseconds).
func nominalCell(p *output.Printer, t time.Time) string {
	if p.Terminal() {
		return p.Time(t)
	}
	return jobs.FormatNominal(t)
}

// latenessText is a lateness for a table and a sentence: 2.5s, 850ms.
func latenessText(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second)).Round(time.Millisecond)
	if d >= time.Second && d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	}
	return output.Duration(d)
}

// occurrenceDetail is the DETAIL of -o wide: what the row's kind records.
func occurrenceDetail(p *output.Printer, o jobstore.OccurrenceView) string {
	switch {
	case o.Holder != nil:
		known := "not a known replica"
		if o.HolderKnown != nil && *o.HolderKnown {
			known = "a known replica"
		}
		return "held by " + *o.Holder + " (" + known + ")"
	case o.PausedBy != nil:
		return "paused by " + *o.PausedBy
	case o.LastNominalAt != nil:
		return strconv.Itoa(o.Count) + " due times until " + nominalCell(p, *o.LastNominalAt)
	case o.Seq != nil:
		d := "run " + o.RunOutcome
		if o.Triggered {
			d += ", triggered"
		}
		if o.Backfill {
			d += ", backfill"
		}
		return d
	}
	return ""
}

func printOccurrences(p *output.Printer, occ []jobstore.OccurrenceView) error {
	data := make([]occurrenceJSON, 0, len(occ))
	rows := make([][]output.Cell, 0, len(occ))
	for _, o := range occ {
		data = append(data, toOccurrenceJSON(o))
		late, seq := "", ""
		if o.LatenessSeconds != nil {
			late = latenessText(*o.LatenessSeconds)
		}
		if o.Seq != nil {
			seq = strconv.FormatInt(*o.Seq, 10)
		}
		reason := o.Reason
		if o.Backfill && reason == "" {
			reason = "backfill" // a ran row has no reason of its own (docs/schedules.md, "Backfill")
		}
		rows = append(rows, []output.Cell{
			{Text: nominalCell(p, o.NominalAt)}, {Text: o.Outcome, Tone: occurrenceTone(o)}, {Text: reason}, {Text: o.ReplicaID},
			{Text: late}, {Text: seq}, {Text: o.ScopeKey}, {Text: occurrenceDetail(p, o)},
		})
	}
	return p.Print(data, occurrenceColumns, rows)
}

// occurrenceCells are the occurrence columns of jobs list and jobs status:
// the last occurrence's outcome (and reason), the skips and misses of the
// last 24 h, and (wide) the last occurrence's nominal time. A view whose
// summary was not read (a replica's own row in jobs status ID) has none.
func occurrenceCells(p *output.Printer, s *jobstore.OccurrenceSummary) (last, skips, misses, at output.Cell) {
	if s == nil {
		return
	}
	skips = output.Cell{Text: strconv.FormatInt(s.Skipped24h, 10)}
	misses = output.Cell{Text: strconv.FormatInt(s.Missed24h, 10)}
	if s.Skipped24h > 0 {
		skips.Tone = output.Warn
	}
	if s.Missed24h > 0 {
		misses.Tone = output.Bad
	}
	if l := s.Last; l != nil {
		text := l.Outcome
		if l.Reason != "" {
			text += "/" + l.Reason
		}
		tone := output.Good
		switch l.Outcome {
		case jobs.OccurrenceSkipped:
			tone = output.Warn
		case jobs.OccurrenceMissed:
			tone = output.Bad
		}
		last = output.Cell{Text: text, Tone: tone}
		at = output.Cell{Text: nominalCell(p, l.NominalAt)}
	}
	return
}

// validateOccurrenceJob checks the ID of jobs occurrences and jobs why: a
// job id; a duty's ID@CLUSTER is its job's id with --scope CLUSTER.
func validateOccurrenceJob(id string) error {
	if k, duty := jobs.ParseDutyKey(id); duty {
		job, cluster := k.Job, k.Cluster
		// The hint is a command part a user can paste: only what reads as
		// a job id and a cluster is offered, the cluster shell-quoted.
		if err := jobs.ValidateID(job); err != nil {
			return usageErrorf("job id %q: occurrences are keyed by the job's id (a duty's JOB@CLUSTER is JOB --scope CLUSTER); the part before '@' is no job id: %v", id, err)
		}
		if cluster == "" {
			return usageErrorf("job id %q: occurrences are keyed by the job's id; give %s (a duty's cluster goes in --scope)", id, job)
		}
		return usageErrorf("job id %q: occurrences are keyed by the job's id; give %s --scope %s", id, job, shellQuote(cluster))
	}
	if err := jobs.ValidateID(id); err != nil {
		return usageErrorf("job id: %v", err)
	}
	return nil
}

// shellQuote writes s as one shell word: as it is when it holds only
// characters no shell reads specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c == '/' || c == '.' || c == '-' || c == '_' || c == ':' || c == '@' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	}) < 0 && s[0] != '-' {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
