package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
)

// Pause with a reason and an end (issue 24, part 6; docs/schedules.md,
// "Pause with a reason and an end"; migration 00014).

// ErrPauseEndPassed: a pause's end (--until, or now plus --for) is not
// after the database's now; nothing was written.
var ErrPauseEndPassed = errors.New("the pause's end is not in the future")

// applyPause sets the pause fields of s as c asks: a resume clears them;
// a pause sets the end (from the database's now for PauseFor), the reason
// (a repeat without one keeps the stored one) and, when anything of the
// pause changes, who paused it.
func applyPause(ctx context.Context, q Querier, s *jobs.Setting, c Change) error {
	if !*c.Pause {
		s.Paused, s.PausedBy, s.PausedReason, s.PausedUntil = false, "", "", time.Time{}
		return nil
	}
	var until time.Time
	if c.PauseFor != 0 || !c.PauseUntil.IsZero() {
		if c.PauseFor != 0 && !c.PauseUntil.IsZero() {
			return errors.New("give a pause's end as a duration or as a time, not both")
		}
		var now time.Time
		if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return fmt.Errorf("read database time: %w", err)
		}
		now = now.UTC()
		until = c.PauseUntil.UTC().Truncate(time.Microsecond)
		if c.PauseFor != 0 {
			until = now.Add(c.PauseFor).Truncate(time.Microsecond)
		}
		if !until.After(now) {
			return fmt.Errorf("%w: it is %s, the database's now is %s", ErrPauseEndPassed, until.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
	}
	reason := jobs.Storable(c.Reason)
	if reason == "" && s.Paused {
		reason = s.PausedReason
	}
	next := *s
	next.Paused, next.PausedReason, next.PausedUntil = true, reason, until
	if !jobs.SamePause(next, *s) {
		next.PausedBy = c.Actor
	}
	*s = next
	return nil
}

// addPauseDetail adds the pause's end, reason and author before and after
// to an audit row's detail.
func addPauseDetail(detail map[string]any, was, now jobs.Setting) {
	detail["paused_until_before"], detail["paused_until_after"] = optTime(was.PausedUntil), optTime(now.PausedUntil)
	detail["paused_by_before"], detail["paused_by_after"] = optString(was.PausedBy), optString(now.PausedBy)
	detail["paused_reason_before"], detail["paused_reason_after"] = optString(was.PausedReason), optString(now.PausedReason)
}

// pauseColumns are s's paused_by, paused_reason and paused_until as
// written (NULL for none).
func pauseColumns(s jobs.Setting) (by, reason, until any) {
	if !s.Paused {
		return nil, nil, nil
	}
	if s.PausedBy != "" {
		by = s.PausedBy
	}
	if s.PausedReason != "" {
		reason = s.PausedReason
	}
	if !s.PausedUntil.IsZero() {
		until = s.PausedUntil
	}
	return by, reason, until
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// EndedPause is a pause EndPauses ended.
type EndedPause struct {
	JobID string
	Until time.Time
}

// EndPauses resumes every job whose pause has an end that has passed, with
// one jobs.resume audit row each (reason "its pause ended", actor the
// replica that noticed: jobs.PauseEndActor), in one statement
// (studio_end_pauses, migration 00014), and signals each job's settings
// change in the same transaction. Any number of replicas may call it at
// once: each ended pause is resumed and audited once.
func EndPauses(ctx context.Context, q Querier, actor string) ([]EndedPause, error) {
	tx, err := q.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("end pauses: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT job_id, paused_until FROM studio_end_pauses($1)`, actor)
	if err != nil {
		return nil, fmt.Errorf("end pauses: %w", err)
	}
	var out []EndedPause
	for rows.Next() {
		var e EndedPause
		var until *time.Time
		if err := rows.Scan(&e.JobID, &until); err != nil {
			rows.Close()
			return nil, fmt.Errorf("end pauses: %w", err)
		}
		if until != nil {
			e.Until = until.UTC()
		}
		out = append(out, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("end pauses: %w", err)
	}
	for _, e := range out {
		if err := bus.Notify(ctx, tx, bus.Signal(bus.KindJobSettings, e.JobID)); err != nil {
			return nil, fmt.Errorf("end pauses: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("end pauses: %w", err)
	}
	return out, nil
}

// EndPauses is EndPauses over the cache's database, returning the ids of
// the jobs it resumed; they are read again at their next Get.
func (c *SettingsCache) EndPauses(ctx context.Context, actor string) ([]string, error) {
	ended, err := EndPauses(ctx, c.q, actor)
	ids := make([]string, 0, len(ended))
	for _, e := range ended {
		c.Invalidate(e.JobID)
		ids = append(ids, e.JobID)
	}
	return ids, err
}

// NextPauseEnd returns the earliest end of a pause among the cached
// settings (ok false: none, or the cache is not loaded yet). It may have
// passed: that pause's resume is not written yet. A setting marked for
// reloading (a job.settings signal: another replica may have written the
// resume) is left out until it is read again.
func (c *SettingsCache) NextPauseEnd() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for id, s := range c.all {
		if c.stale[id] {
			continue
		}
		if s.Paused && !s.PausedUntil.IsZero() && (next.IsZero() || s.PausedUntil.Before(next)) {
			next = s.PausedUntil
		}
	}
	return next, !next.IsZero()
}

// PauseView is a job's pause as the commands show it: who paused it, why
// and until when (Until nil: no end).
type PauseView struct {
	By     string
	Reason string
	Until  *time.Time
}

// PausesAt returns the pause in force at now of each of jobIDs that has
// one (a pause whose end has passed is over, written or not), keyed by
// job id.
func PausesAt(ctx context.Context, q Querier, jobIDs []string, now time.Time) (map[string]PauseView, error) {
	out := map[string]PauseView{}
	if len(jobIDs) == 0 {
		return out, nil
	}
	all, err := loadSettings(ctx, q, " WHERE job_id = ANY($1) AND paused", []any{jobIDs})
	if err != nil {
		return nil, err
	}
	for id, s := range all {
		if !s.PausedAt(now) {
			continue
		}
		out[id] = PauseView{By: s.PausedBy, Reason: s.PausedReason, Until: optTime(s.PausedUntil)}
	}
	return out, nil
}

// AddPauses fills the Pause of every view from the settings (a duty's,
// job@cluster, from its job's), as they are at now (database time).
func AddPauses(ctx context.Context, q Querier, views []View, now time.Time) error {
	ids := make([]string, 0, len(views))
	for _, v := range views {
		k, _ := jobs.ParseDutyKey(v.ID)
		ids = append(ids, k.Job)
	}
	pauses, err := PausesAt(ctx, q, ids, now)
	if err != nil {
		return err
	}
	for i := range views {
		k, _ := jobs.ParseDutyKey(views[i].ID)
		if p, ok := pauses[k.Job]; ok {
			views[i].Pause = &p
		}
	}
	return nil
}

// pauseNow fills what jobs why tells of the job's pause now: still paused
// (and until when), resumed, and whether the resume came at the pause's
// end (a pause whose end passed, its resume written or not, or the last
// resume audited as its pause's end).
func pauseNow(ctx context.Context, q Querier, job string, ev *OccurrenceEvidence) error {
	all, err := loadSettings(ctx, q, " WHERE job_id = $1", []any{job})
	if err != nil {
		return err
	}
	s, ok := all[job]
	if !ok {
		return nil // no setting row: neither paused nor resumed
	}
	switch {
	case s.PausedAt(ev.Now):
		ev.StillPaused, ev.PausedUntil = true, optTime(s.PausedUntil)
	case s.Paused:
		ev.Resumed, ev.EndedByItself = true, true
	default:
		ev.Resumed = true
		var ended *bool
		if err := q.QueryRow(ctx, `SELECT (SELECT (detail->>'pause_ended')::boolean FROM studio_audit
WHERE target = $1 AND action = 'jobs.resume' ORDER BY at DESC, seq DESC LIMIT 1)`, job).Scan(&ended); err != nil {
			return fmt.Errorf("read resume of job %q: %w", job, err)
		}
		ev.EndedByItself = ended != nil && *ended
	}
	return nil
}
