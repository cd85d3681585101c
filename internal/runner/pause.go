package runner

import (
	"context"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// Pause with a reason and an end (issue 24, part 6; docs/schedules.md,
// "Pause with a reason and an end").
//
// A pause whose end has passed is over for this runner at once (pausedNow),
// whether or not a replica has written the resume: every replica may have
// been down at the end. Besides, each runner watches the ends of the pauses
// its settings cache holds (watchPauseEnds) and, at each end, writes the
// resume with its audit row (jobstore.EndPauses: one statement, so of
// several replicas at one end, one writes it). The resume's job.settings
// signal makes every replica read the setting again.

// PauseEnder is what a Settings may also do (jobstore.SettingsCache does):
// write the resume of the pauses whose end passed, and say when the
// earliest end it knows of is (ok false: none).
type PauseEnder interface {
	EndPauses(ctx context.Context, actor string) ([]string, error)
	NextPauseEnd() (time.Time, bool)
}

const (
	// pauseEndPollEvery is how long the pause watch waits at most without
	// a known end: a pause set while the bus was down is seen by then (the
	// settings poll reads it; its end is then watched).
	pauseEndPollEvery = 10 * time.Second
	// pauseEndRetry is the wait after a resume that failed, or that found
	// nothing to resume while the cache still held the ended pause
	// (another replica wrote it; the signal or the next poll reloads it).
	pauseEndRetry = 2 * time.Second
)

// pausedNow is whether s pauses its job now, by the runner's clock
// (database time as last measured); the clock is read only for a pause
// with an end.
func (r *Runner) pausedNow(s jobs.Setting) bool {
	if !s.Paused || s.PausedUntil.IsZero() {
		return s.Paused
	}
	return s.PausedAt(r.now())
}

// pausedBy is who paused the job: the pause's author, else who changed
// the setting last (a setting without one: written before migration 00014).
func pausedBy(s jobs.Setting) string {
	if s.PausedBy != "" {
		return s.PausedBy
	}
	return s.UpdatedBy
}

// pauseEndOf is the end of js's pause (zero: none, or unknown), from the
// settings cache.
func (r *Runner) pauseEndOf(ctx context.Context, js *jobState) time.Time {
	s, err := r.o.Settings.Get(ctx, js.job.ID)
	if err != nil || !s.Paused {
		return time.Time{}
	}
	return s.PausedUntil
}

// pausedLimit is the latest nominal time a paused tick may record as
// skipped/paused: limit, or just before the pause's end when that comes
// first (the due times from the end on are not paused).
func pausedLimit(limit, end time.Time) time.Time {
	if !end.IsZero() && !limit.Before(end) {
		return end.Add(-time.Nanosecond)
	}
	return limit
}

// kickPauses wakes the pause watch (a setting changed: its end may have).
func (r *Runner) kickPauses() {
	select {
	case r.pauseWake <- struct{}{}:
	default:
	}
}

// watchPauseEnds waits for the earliest pause end the settings know of and
// writes the resume of every pause whose end passed. It ends with ctx.
func (r *Runner) watchPauseEnds(ctx context.Context, pe PauseEnder) {
	hold := time.Time{} // no resume before (after a failed or empty one)
	failing := false
	for {
		wait := pauseEndPollEvery
		end, ok := pe.NextPauseEnd()
		if ok {
			at := end
			if hold.After(at) {
				at = hold
			}
			wait = min(wait, max(at.Sub(r.now()), 0))
		}
		// A real timer, as the settings poll's: the runner's clock counts
		// the wait, and its timers are the heap's alone (the fake clock's
		// tests count them; the pause tests run in a synctest bubble).
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.pauseWake:
			t.Stop()
			continue
		case <-t.C:
		}
		end, ok = pe.NextPauseEnd()
		if now := r.now(); !ok || now.Before(end) || now.Before(hold) {
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, settingsTimeout)
		ended, err := pe.EndPauses(ectx, jobs.PauseEndActor(r.o.ReplicaID))
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			// Once per failing streak (a role without EXECUTE on
			// studio_end_pauses, the database down): the pause is over
			// for the runner anyway (pausedNow).
			if !failing {
				r.log.Warn("runner: writing the resume of an ended pause failed; trying again every 10s", "error", err)
				failing = true
			}
			hold = r.now().Add(pauseEndPollEvery)
			continue
		case failing:
			r.log.Info("runner: writing the resume of an ended pause recovered")
			failing = false
		}
		if len(ended) == 0 {
			hold = r.now().Add(pauseEndRetry)
			continue
		}
		for _, id := range ended {
			r.log.Info("runner: a job's pause ended; resumed it", "job_id", id)
			r.SettingsChanged(id)
		}
	}
}
