package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// jobsWhyOptions are the flags, argument and dependencies of jobs why.
type jobsWhyOptions struct {
	deps
	ID string
	// Scope keeps one scope key when not nil (--scope given, "" included:
	// an installation job's); nil: any.
	Scope *string
	// At is the time asked about; zero: the last occurrence that fell due.
	At time.Time
}

func newJobsWhyCmd(a *app, runF func(context.Context, *jobsWhyOptions) error) *cobra.Command {
	o := &jobsWhyOptions{deps: a.deps()}
	var at, scope string
	cmd := &cobra.Command{
		Use:   "why ID [--at TIME] [--scope KEY]",
		Short: "Say whether a due time of a job ran and, if not, why",
		Long: `Explain one occurrence of a job (docs/occurrences.md): the one nearest to
--at (RFC 3339; a time inside a stretch of missed due times is that
stretch), or by default the last one that fell due. In one or two
sentences it says who ran it, how it ended and how late it started; or who
held the lock and whether that is a known replica; or who paused the job
and when; or, for due times missed, which replicas hosted the job and
their last heartbeats, and which replica died or lost the lock. The last
line is the command to act, as doctor's hints are.

--scope keeps one scope key (an instance job's replica, a duty's
cluster; --scope '' an installation job's). When the occurrence told is
not the one at --at (nothing fell due then), the first sentence says how
far its due time is from --at. -o json prints an object with the keys of
jobs occurrences -o json plus summary (the sentences), hint (the command)
and at_offset_seconds (its due time nearest to --at minus --at, in
seconds: 0 when --at falls on it, null without --at).

Exit 4 when the job is unknown, and when it has no occurrence recorded yet
(runs from before the upgrade to occurrences carry no due time).`,
		Example: `  studioctl jobs why nightly-report
  studioctl jobs why nightly-report --at 2026-11-30T02:00:00Z
  studioctl jobs why cache-warm --scope web-2 -o json`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := validateOccurrenceJob(o.ID); err != nil {
				return err
			}
			o.At, o.Scope = time.Time{}, nil
			if cmd.Flags().Changed("scope") {
				s := scope
				o.Scope = &s
			}
			if cmd.Flags().Changed("at") {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usageErrorf("--at: %q is not an RFC 3339 time (for example 2026-11-30T02:00:00Z)", at)
				}
				o.At = t.UTC()
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobsWhyRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "the time to explain (RFC 3339); default the last due time")
	cmd.Flags().StringVar(&scope, "scope", "", `keep one scope key (a replica id, a cluster; "" for an installation job)`)
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

// whyJSON is jobs why -o json: the occurrence, and what jobs why says.
type whyJSON struct {
	occurrenceJSON `yaml:",inline"`
	Summary        string `json:"summary" yaml:"summary"`
	Hint           string `json:"hint" yaml:"hint"`
	// AtOffsetSeconds is the occurrence's due time nearest to --at minus
	// --at (0: --at falls on it or inside its stretch; nil: no --at).
	AtOffsetSeconds *float64 `json:"at_offset_seconds" yaml:"at_offset_seconds"`
}

// atOffset is the due time of o nearest to at, minus at: 0 when at is
// one of its due times (or inside its stretch).
func atOffset(o jobstore.OccurrenceView, at time.Time) time.Duration {
	switch {
	case at.Before(o.NominalAt):
		return o.NominalAt.Sub(at)
	case at.After(o.Last()):
		return o.Last().Sub(at)
	}
	return 0
}

// offsetText is the sentence that says the occurrence told is not the one
// at at ("" when it is).
func offsetText(d time.Duration, at time.Time) string {
	switch {
	case d > 0:
		return fmt.Sprintf("Nothing fell due at %s; the nearest due time is %s later. ", nominalText(at), output.Duration(d))
	case d < 0:
		return fmt.Sprintf("Nothing fell due at %s; the nearest due time is %s earlier. ", nominalText(at), output.Duration(-d))
	}
	return ""
}

// jobsWhyRun explains one occurrence.
func jobsWhyRun(ctx context.Context, o *jobsWhyOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	occ, ev, err := jobstore.OccurrenceWhy(ctx, pool, o.ID, o.Scope, o.At)
	if err != nil {
		return err
	}
	summary, hint := explainOccurrence(occ, ev)
	var offset *float64
	if !o.At.IsZero() {
		d := atOffset(occ, o.At)
		summary = offsetText(d, o.At) + summary
		secs := d.Seconds()
		offset = &secs
	}
	p := o.Printer()
	if p.Structured() {
		return p.Print(whyJSON{occurrenceJSON: toOccurrenceJSON(occ), Summary: summary, Hint: hint, AtOffsetSeconds: offset}, nil, nil)
	}
	// Always escaped, piped too: the sentences are ours, but they quote
	// what anyone who may write a lock row (locked_by) or pass --actor
	// chose, and a pager or a log viewer renders what a terminal would.
	// json and yaml escape by themselves.
	summary, hint = output.Safe(summary), output.Safe(hint)
	_, err = fmt.Fprintf(o.IO.Out, "%s\nhint: %s\n", summary, hint)
	return err
}

// whenText writes a time in a sentence: RFC 3339, UTC, seconds (the
// nominal times keep their milliseconds, see nominalText).
func whenText(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// nominalText is a nominal time as the occurrence key writes it.
func nominalText(t time.Time) string { return jobs.FormatNominal(t) }

// explainOccurrence tells an occurrence in one or two sentences, with the
// command to act on it.
func explainOccurrence(o jobstore.OccurrenceView, ev jobstore.OccurrenceEvidence) (summary, hint string) {
	name := "Job " + o.JobID
	if o.ScopeKey != "" {
		name += " (scope " + o.ScopeKey + ")"
	}
	due := name + ", due " + nominalText(o.NominalAt)
	if o.Outcome == jobs.OccurrenceSkipped && o.Count > 1 {
		// One row for several due times: an overrun of more than one, or
		// a paused stretch recorded at a start (docs/occurrences.md).
		due = fmt.Sprintf("%s, due %d times from %s to %s", name, o.Count, nominalText(o.NominalAt), nominalText(o.Last()))
	}
	switch {
	case o.Outcome == jobs.OccurrenceRan:
		return explainRan(o, ev, due)
	case o.Outcome == jobs.OccurrenceMissed && o.Reason == jobs.ReasonDown:
		return explainDown(o, ev, name)
	case o.Outcome == jobs.OccurrenceMissed:
		return explainLost(o, ev, due)
	}
	on := ""
	if o.ReplicaID != "" {
		on = " (seen by " + o.ReplicaID + ")"
	}
	switch o.Reason {
	case jobs.ReasonPaused:
		who := "it was paused"
		if o.PausedBy != nil && *o.PausedBy != "" {
			who += " by " + *o.PausedBy
		}
		if p := ev.Pause; p != nil {
			if o.PausedBy == nil || *o.PausedBy == "" || *o.PausedBy == p.Actor {
				who = "it was paused by " + p.Actor
			}
			who += " at " + whenText(p.At)
			if p.Until != nil {
				who += " until " + whenText(*p.Until)
			}
			if p.Reason != "" {
				who += " (reason: " + strconv.Quote(p.Reason) + ")"
			}
		}
		switch {
		case ev.StillPaused && ev.PausedUntil != nil:
			return fmt.Sprintf("%s, was skipped%s: %s. It is still paused, until %s.", due, on, who, whenText(*ev.PausedUntil)),
				"studioctl jobs resume " + o.JobID
		case ev.StillPaused:
			return fmt.Sprintf("%s, was skipped%s: %s. It is still paused.", due, on, who),
				"studioctl jobs resume " + o.JobID
		case ev.EndedByItself:
			return fmt.Sprintf("%s, was skipped%s: %s. Its pause has ended since; it resumed by itself.", due, on, who),
				"studioctl jobs occurrences " + o.JobID
		case ev.Resumed:
			return fmt.Sprintf("%s, was skipped%s: %s. It has been resumed since.", due, on, who),
				"studioctl jobs occurrences " + o.JobID
		}
		// No setting row now (jobs forget removed it): no resume is
		// recorded, and the job is not paused.
		return fmt.Sprintf("%s, was skipped%s: %s. It has no setting now (not paused).", due, on, who),
			"studioctl jobs occurrences " + o.JobID
	case jobs.ReasonHeldElsewhere:
		holder, known := "another holder", "not a known replica (a Java ShedLock node, or another installation sharing the lock table)"
		if o.Holder != nil {
			holder = *o.Holder
		}
		switch {
		case o.HolderKnown != nil && *o.HolderKnown && holder == o.ReplicaID:
			// Its own id, which this process did not hold (docs/occurrences.md).
			known = "the replica that saw it: a lock its previous process held when it died (until lockAtMostFor), " +
				"or its own, kept for the minimum gap after a run that ended just before (a jobs trigger run)"
		case o.HolderKnown != nil && *o.HolderKnown:
			known = "a known replica"
			if r, ok := ev.Replica(holder); ok {
				known += " that " + replicaNow(r)
			}
		}
		return fmt.Sprintf("%s, was skipped%s: its lock was held by %s, %s.", due, on, holder, known),
			"studioctl locks show " + o.JobID
	case jobs.ReasonOverrun:
		return fmt.Sprintf("%s, was skipped%s: the previous run was still going when it fell due.", due, on),
			"studioctl jobs history " + o.JobID
	case jobs.ReasonInvalidSchedule:
		return fmt.Sprintf("%s, was skipped%s: its schedule override does not parse.", due, on),
			"studioctl jobs set " + o.JobID + " --clear"
	case jobs.ReasonDeadline:
		return fmt.Sprintf("%s, was skipped%s: it could not start before its start deadline.", due, on),
			"studioctl jobs history " + o.JobID
	}
	return fmt.Sprintf("%s, was %s (%s)%s.", due, o.Outcome, o.Reason, on), "studioctl jobs occurrences " + o.JobID
}

// lateText is ", started N late" for a sentence.
func lateText(o jobstore.OccurrenceView) string {
	if o.LatenessSeconds == nil {
		return ""
	}
	return ", started " + latenessText(*o.LatenessSeconds) + " late"
}

func explainRan(o jobstore.OccurrenceView, ev jobstore.OccurrenceEvidence, due string) (string, string) {
	seq := int64(0)
	if o.Seq != nil {
		seq = *o.Seq
	}
	how := "ran"
	if o.Triggered {
		how = "was triggered (jobs trigger) and ran"
	}
	if o.Backfill {
		how = "was backfilled (jobs backfill) and ran"
	}
	s := fmt.Sprintf("%s, %s on %s as run %d%s", due, how, o.ReplicaID, seq, lateText(o))
	out := jobs.Outcome(o.RunOutcome)
	switch {
	case out == jobs.OutcomeRunning:
		return s + "; it is still running.", fmt.Sprintf("studioctl jobs status %s", o.JobID)
	case out == jobs.OutcomeSucceeded:
		return s + ", and succeeded" + tookText(o) + ".", fmt.Sprintf("studioctl jobs output %s %d", o.JobID, seq)
	}
	s += ", and ended " + string(out) + tookText(o)
	if ev.Run != nil && ev.Run.Error != "" {
		s += ": " + oneLine(ev.Run.Error)
	}
	return s + ".", fmt.Sprintf("studioctl jobs output %s %d", o.JobID, seq)
}

func tookText(o jobstore.OccurrenceView) string {
	if o.StartedAt == nil || o.FinishedAt == nil {
		return ""
	}
	return " after " + output.Duration(o.FinishedAt.Sub(*o.StartedAt))
}

// whyErrorWidth bounds a run's error quoted in a jobs why sentence, in
// display columns.
const whyErrorWidth = 120

// oneLine is a run's error for a jobs why sentence: on one line, cut to
// whyErrorWidth columns by output.Truncate, which never splits a character.
func oneLine(s string) string {
	return output.Truncate(strings.Join(strings.Fields(s), " "), whyErrorWidth)
}

func explainLost(o jobstore.OccurrenceView, ev jobstore.OccurrenceEvidence, due string) (string, string) {
	seq := int64(0)
	if o.Seq != nil {
		seq = *o.Seq
	}
	s := fmt.Sprintf("%s, was missed: run %d started on %s%s", due, seq, o.ReplicaID, lateParen(o))
	r, known := ev.Replica(o.ReplicaID)
	where := o.ReplicaID + " is no longer registered"
	if known {
		where = o.ReplicaID + " " + replicaNow(r)
	}
	switch jobs.Outcome(o.RunOutcome) {
	case jobs.OutcomeLockLost:
		s += " and lost its lock before it ended"
		if ev.Run != nil && ev.Run.Error != "" {
			s += ": " + oneLine(ev.Run.Error)
		}
		return s + ".", fmt.Sprintf("studioctl jobs output %s %d", o.JobID, seq)
	case jobs.OutcomeInterrupted:
		s += " and was interrupted before it ended: its replica stopped or died; " + where
	default: // still marked running, its replica not live
		s += " and is still marked running, but its replica died before the run ended: " + where
	}
	return s + ".", "studioctl replicas list"
}

// lateParen is " (N late)" for a sentence.
func lateParen(o jobstore.OccurrenceView) string {
	if o.LatenessSeconds == nil {
		return ""
	}
	return " (" + latenessText(*o.LatenessSeconds) + " late)"
}

// replicaNow says where a replica's row stands now.
func replicaNow(r jobstore.ReplicaTrace) string {
	switch {
	case r.Live:
		return "is live (last heartbeat " + whenText(r.HeartbeatAt) + ")"
	case r.State == "stopped" && r.StoppedAt != nil:
		return "stopped at " + whenText(*r.StoppedAt)
	}
	return "is gone (last heartbeat " + whenText(r.HeartbeatAt) + ")"
}

// maxReplicasTold bounds the replicas a missed/down sentence names.
const maxReplicasTold = 4

func explainDown(o jobstore.OccurrenceView, ev jobstore.OccurrenceEvidence, name string) (string, string) {
	first, last := o.NominalAt, o.Last()
	var s string
	if o.Count > 1 {
		s = fmt.Sprintf("%s missed %d due times from %s to %s: no live replica hosted it then.", name, o.Count, nominalText(first), nominalText(last))
	} else {
		s = fmt.Sprintf("%s, due %s, was missed: no live replica hosted it then.", name, nominalText(first))
	}
	var told []string
	for _, r := range ev.Replicas {
		if !r.Hosts && len(ev.Replicas) > maxReplicasTold {
			continue
		}
		told = append(told, r.ID+" "+replicaAround(r, first))
	}
	if more := len(told) - maxReplicasTold; more > 0 {
		told = append(told[:maxReplicasTold], fmt.Sprintf("%d more", more))
	}
	if len(told) == 0 {
		s += " No replica is registered."
	} else {
		s += " Replicas: " + strings.Join(told, "; ") + "."
	}
	return s, "studioctl replicas list"
}

// replicaAround says what a replica's row shows around the time t a job
// fell due: its stop or last heartbeat before t, and its start after it.
func replicaAround(r jobstore.ReplicaTrace, t time.Time) string {
	var parts []string
	switch {
	case r.StartedAt.After(t):
		if r.LastCrashAt != nil && !r.LastCrashAt.After(r.StartedAt) {
			parts = append(parts, "was down (its previous process crashed, last heartbeat "+whenText(*r.LastCrashAt)+")")
		}
		parts = append(parts, "started at "+whenText(r.StartedAt))
	case r.StoppedAt != nil && !r.StoppedAt.After(t):
		parts = append(parts, "stopped at "+whenText(*r.StoppedAt))
	case !r.Live && r.HeartbeatAt.Before(t):
		// Its last sign of life came before the due time, and it is not
		// live now: it was gone then, though within the 15 s after which
		// the registry says so.
		parts = append(parts, "was gone (last heartbeat "+whenText(r.HeartbeatAt)+", before the due time; no stop recorded)")
	case r.LiveAt(t):
		parts = append(parts, "was live (started "+whenText(r.StartedAt)+")")
	default:
		parts = append(parts, "had its last heartbeat at "+whenText(r.HeartbeatAt))
	}
	if r.Live && !r.StartedAt.After(t) {
		parts = append(parts, "live now")
	}
	s := strings.Join(parts, " and ")
	if !r.Hosts {
		s += " (does not host the job)"
	}
	return s
}
