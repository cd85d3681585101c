package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// newJobsPauseEndCmd is jobs pause: a pause with an optional reason and
// an optional end (docs/schedules.md, "Pause with a reason and an end").
func newJobsPauseEndCmd(a *app, runF func(context.Context, *jobChangeOptions) error) *cobra.Command {
	o := &jobChangeOptions{deps: a.deps()}
	var forText, untilText string
	cmd := &cobra.Command{
		Use:   "pause ID [--reason R] [--for D | --until TIME] [--yes]",
		Short: "Pause a job on every replica (its fires do nothing), for good or until an end",
		Long: `Pause a job on every replica: its due times are recorded as skipped/paused
and nothing runs, until jobs resume or the pause's end. --reason says why
(stored with the pause and shown by jobs list and jobs why; optional).
--for DURATION ends the pause that long after now, --until TIME at a time
(RFC 3339, for example 2026-12-06T14:00:00Z); at most one of them. Without
either, the pause has no end, as before. At the end the job resumes by
itself: the due times from the end on run, and the first replica to notice
writes the resume with a jobs.resume audit row ("its pause ended"). A
duration that is not positive, or a time not after the database's now,
exits 2 and changes nothing. Pausing a paused job again sets its new end
(none without --for or --until) and keeps its reason unless --reason gives
one. See docs/schedules.md, "Pause with a reason and an end".`,
		Example: `  studioctl jobs pause nightly-report --reason "incident 4521"
  studioctl jobs pause nightly-report --reason "db maintenance" --for 2h
  studioctl jobs pause nightly-report --reason "freeze" --until 2026-12-24T00:00:00Z`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if err := jobs.ValidateID(o.ID); err != nil {
				return usageErrorf("job id: %v", err)
			}
			pause := true
			c := jobstore.Change{Pause: &pause}
			forSet, untilSet := cmd.Flags().Changed("for"), cmd.Flags().Changed("until")
			switch {
			case forSet && untilSet:
				return usageErrorf("--for and --until both give the pause's end: give one of them")
			case forSet:
				d, err := time.ParseDuration(forText)
				if err != nil {
					return usageErrorf("--for: %q is not a duration (for example 30m, 2h)", forText)
				}
				if d <= 0 {
					return usageErrorf("--for: %s is not positive: the pause must end after now", forText)
				}
				c.PauseFor = d
			case untilSet:
				t, err := time.Parse(time.RFC3339, untilText)
				if err != nil {
					return usageErrorf("--until: %q is not a time in RFC 3339 (for example 2026-12-06T14:00:00Z)", untilText)
				}
				c.PauseUntil = t.UTC()
			}
			o.What, o.Change = "pause", c
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return jobChangeRun(cmd.Context(), o)
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&forText, "for", "", "end the pause this long after now (a duration: 30m, 2h)")
	cmd.Flags().StringVar(&untilText, "until", "", "end the pause at this time (RFC 3339)")
	return cmd
}

// pauseEndFlag names the flag that gave a change's pause end.
func pauseEndFlag(c jobstore.Change) string {
	if c.PauseFor != 0 {
		return "--for"
	}
	return "--until"
}

// describePause is a setting's pause as the change verbs report it:
// "false", "true", or "true until TIME".
func describePause(s jobs.Setting) string {
	if !s.Paused {
		return "false"
	}
	if s.PausedUntil.IsZero() {
		return "true"
	}
	return "true until " + s.PausedUntil.UTC().Format(time.RFC3339)
}

// pauseCell is the PAUSED column of jobs list: who paused the job, when
// the pause ends and why ("alice, ends 2026-12-06T14:00:00Z: incident";
// "" when no setting pauses it).
func pauseCell(p *output.Printer, v jobstore.View) string {
	if v.Pause == nil {
		return ""
	}
	text := v.Pause.By
	if text == "" {
		text = "?"
	}
	if v.Pause.Until != nil {
		text += ", ends " + p.Time(*v.Pause.Until)
	}
	if v.Pause.Reason != "" {
		text += ": " + v.Pause.Reason
	}
	return errorCell(text)
}
