package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
)

// Querier is the part of a pool the stores use.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// settingsSQL reads the settings. A pause written before migration 00014,
// or by an older studioctl, has no paused_by: its updated_by says who. An
// infinite end is no end; a '-infinity' one has passed.
const settingsSQL = `SELECT job_id, coalesce(schedule, ''), paused, updated_at, updated_by,
  CASE WHEN paused THEN coalesce(paused_by, updated_by) ELSE '' END, coalesce(paused_reason, ''),
  CASE WHEN isfinite(paused_until) THEN paused_until WHEN paused_until < now() THEN '1970-01-01Z'::timestamptz END
FROM studio_job_setting`

// SettingsCache holds every operator setting; the runner reads it at every
// fire. The bus invalidates one job (job.settings) or all (on resync).
type SettingsCache struct {
	q Querier

	mu     sync.Mutex
	all    map[string]jobs.Setting
	loaded bool
	stale  map[string]bool
}

// NewSettingsCache returns an empty cache over q.
func NewSettingsCache(q Querier) *SettingsCache {
	return &SettingsCache{q: q, stale: map[string]bool{}}
}

// Get returns the setting of job (zero Setting when none). The first call
// loads every setting in one query; later calls query only for a job whose
// entry was invalidated.
func (c *SettingsCache) Get(ctx context.Context, job string) (jobs.Setting, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		all, err := loadSettings(ctx, c.q, "", nil)
		if err != nil {
			return jobs.Setting{}, err
		}
		c.all, c.loaded, c.stale = all, true, map[string]bool{}
	}
	if c.stale[job] {
		one, err := loadSettings(ctx, c.q, " WHERE job_id = $1", []any{job})
		if err != nil {
			return jobs.Setting{}, err
		}
		delete(c.all, job)
		if s, ok := one[job]; ok {
			c.all[job] = s
		}
		delete(c.stale, job)
	}
	return c.all[job], nil
}

// Refresh reads every setting again (the runner's fallback poll: a
// setting changed in SQL without a job.settings signal, or a signal lost)
// and returns the ids of the jobs whose setting differs from the cached
// one: changed, added or removed. A cache not loaded yet is loaded, and
// reports no change (nothing read it before).
func (c *SettingsCache) Refresh(ctx context.Context) ([]string, error) {
	all, err := loadSettings(ctx, c.q, "", nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var changed []string
	if c.loaded {
		// A job without a row has the zero setting.
		for id, s := range all {
			if old := c.all[id]; old.Schedule != s.Schedule || !jobs.SamePause(old, s) {
				changed = append(changed, id)
			}
		}
		for id, old := range c.all {
			if _, ok := all[id]; !ok && (old.Schedule != "" || old.Paused) {
				changed = append(changed, id)
			}
		}
	}
	c.all, c.loaded, c.stale = all, true, map[string]bool{}
	return changed, nil
}

// Invalidate marks one job's setting for reloading.
func (c *SettingsCache) Invalidate(job string) {
	c.mu.Lock()
	c.stale[job] = true
	c.mu.Unlock()
}

// InvalidateAll drops the cache (after a bus reconnect).
func (c *SettingsCache) InvalidateAll() {
	c.mu.Lock()
	c.loaded = false
	c.mu.Unlock()
}

func loadSettings(ctx context.Context, q Querier, where string, args []any) (map[string]jobs.Setting, error) {
	rows, err := q.Query(ctx, settingsSQL+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read job settings: %w", err)
	}
	defer rows.Close()
	out := map[string]jobs.Setting{}
	for rows.Next() {
		var s jobs.Setting
		var until *time.Time
		if err := rows.Scan(&s.JobID, &s.Schedule, &s.Paused, &s.UpdatedAt, &s.UpdatedBy, &s.PausedBy, &s.PausedReason, &until); err != nil {
			return nil, fmt.Errorf("read job settings: %w", err)
		}
		s.UpdatedAt = s.UpdatedAt.UTC()
		if until != nil && s.Paused {
			s.PausedUntil = until.UTC()
		}
		out[s.JobID] = s
	}
	return out, rows.Err()
}

// ErrUnknownJob: no replica has reported a job with that id.
var ErrUnknownJob = errors.New("no such job")

// Known reports whether job is known: a replica reports it now (a
// studio_job_status row), or did (a run in studio_job_run), or an operator
// setting of it is stored. A job removed from every replica's
// configuration has no status row left (docs/control.md), but it is not
// unknown: a trigger of it has no live host (exit 1), and a pause is
// stored for when a replica declares it again.
//
// A clusters: owned job reports one row per cluster, keyed job@cluster
// (jobs.DutyKey): any of them makes the job known.
func Known(ctx context.Context, q Querier, job string) error {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_status WHERE job_id = $1 OR starts_with(job_id, $1 || '@'))
  OR EXISTS (SELECT 1 FROM studio_job_run WHERE job_id = $1)
  OR EXISTS (SELECT 1 FROM studio_job_setting WHERE job_id = $1)`, job).Scan(&ok); err != nil {
		return fmt.Errorf("look up job %q: %w", job, err)
	}
	if !ok {
		return fmt.Errorf("job %q: %w (no replica has reported it)", job, ErrUnknownJob)
	}
	return nil
}

// Reported is Known for status rows only: whether any replica, live or
// not, has a studio_job_status row of job (or of one of its duties). Forget
// removes only such rows.
func Reported(ctx context.Context, q Querier, job string) error {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_status WHERE job_id = $1 OR starts_with(job_id, $1 || '@'))`, job).Scan(&ok); err != nil {
		return fmt.Errorf("look up job %q: %w", job, err)
	}
	if !ok {
		return fmt.Errorf("job %q: %w (no replica has left a status row of it)", job, ErrUnknownJob)
	}
	return nil
}

// Change is one operator change to a job's settings.
type Change struct {
	Pause    *bool          // set paused
	Schedule *jobs.Schedule // set the override; a zero Schedule clears it
	// Zone sets the zone the cron fields are read in (an IANA name); ""
	// clears it, back to the configured zone. It is stored with the
	// schedule override (jobs.Override), so a zone change is audited,
	// signalled and read like a schedule change.
	Zone   *string
	Actor  string
	Reason string
	// PauseFor and PauseUntil give a pause (Pause true) its end: PauseFor
	// after the database's now, or at PauseUntil; at most one of them, and
	// neither means no end (docs/schedules.md, "Pause with a reason and an
	// end"). An end not after now is ErrPauseEndPassed, nothing written.
	PauseFor   time.Duration
	PauseUntil time.Time
}

// ErrUnchanged: the setting already had the values asked for, so nothing
// was written or audited (the job.settings signal is still sent).
var ErrUnchanged = errors.New("already so; nothing changed")

// ApplyChange writes an operator override, its audit row and a job.settings
// bus signal in one transaction, and returns the setting after it.
//
// The values before the change are read under a row lock that is held until
// commit, so concurrent changes of one job apply one after the other, each
// from the values the previous one left, and each audit row's before and
// after are a change that really happened. A change that would leave the
// setting as it is writes nothing and returns the setting with
// ErrUnchanged: of 20 concurrent `jobs pause X`, one pauses and is audited,
// the other 19 change nothing. It still sends the job.settings signal, so
// that a repeated `jobs resume` makes every replica read the row again.
func ApplyChange(ctx context.Context, q Querier, job string, c Change) (jobs.Setting, error) {
	if c.Pause == nil && c.Schedule == nil && c.Zone == nil {
		return jobs.Setting{}, fmt.Errorf("change job %q: nothing to change", job)
	}
	if err := Known(ctx, q, job); err != nil {
		return jobs.Setting{}, err
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// A job without a row yet gets one with the default values (no
	// override, not paused), so that there is a row to lock: SELECT ... FOR
	// UPDATE locks nothing where no row exists, and two first changes would
	// both read "no setting". A concurrent first change waits here for the
	// other's commit; a no-op rolls its row back.
	if _, err := tx.Exec(ctx, `INSERT INTO studio_job_setting (job_id, schedule, paused, updated_by) VALUES ($1, NULL, false, '')
ON CONFLICT (job_id) DO NOTHING`, job); err != nil {
		return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	before, err := loadSettings(ctx, tx, " WHERE job_id = $1 FOR UPDATE", []any{job})
	if err != nil {
		return jobs.Setting{}, err
	}
	s, ok := before[job]
	if !ok {
		return jobs.Setting{}, fmt.Errorf("change job %q: its setting row vanished while it was changed; try again", job)
	}
	was := s
	action := ""
	detail := map[string]any{"schedule_before": s.Schedule, "paused_before": s.Paused}
	if c.Pause != nil {
		if err := applyPause(ctx, tx, &s, c); err != nil {
			return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
		}
		action = map[bool]string{true: "jobs.pause", false: "jobs.resume"}[*c.Pause]
		addPauseDetail(detail, was, s)
	}
	if c.Schedule != nil || c.Zone != nil {
		o, err := jobs.ParseOverride(s.Schedule)
		if err != nil && c.Schedule == nil {
			// Keeping the schedule part needs it readable.
			return jobs.Setting{}, fmt.Errorf("change job %q: the stored override %q is malformed: set --every or --cron with the zone, or --clear: %w", job, s.Schedule, err)
		}
		if c.Schedule != nil {
			o.Schedule = c.Schedule.InZone(nil)
		}
		if c.Zone != nil {
			o.Zone = nil
			if *c.Zone != "" {
				loc, err := jobs.LoadZone(*c.Zone)
				if err != nil {
					return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
				}
				o.Zone = loc
			}
		}
		s.Schedule = o.String()
		action = "jobs.set"
	}
	if s.Schedule == was.Schedule && jobs.SamePause(s, was) {
		if was.UpdatedBy == "" {
			// The row was ours, just inserted: the default values.
			was.UpdatedAt = time.Time{}
		}
		// Nothing to write or audit, but the signal still goes: a setting
		// changed in SQL without one, or a signal lost, is then applied by
		// every replica at once (issue 20), not at its next settings poll.
		if err := tx.Rollback(ctx); err != nil {
			return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
		}
		if err := bus.Notify(ctx, q, bus.Signal(bus.KindJobSettings, job)); err != nil {
			return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
		}
		return was, fmt.Errorf("job %q: %w", job, ErrUnchanged)
	}
	detail["schedule_after"], detail["paused_after"] = s.Schedule, s.Paused
	var sched any
	if s.Schedule != "" {
		sched = s.Schedule
	}
	pausedBy, pausedReason, pausedUntil := pauseColumns(s)
	err = tx.QueryRow(ctx, `
UPDATE studio_job_setting SET schedule = $2, paused = $3, updated_at = now(), updated_by = $4,
  paused_by = $5, paused_reason = $6, paused_until = $7
WHERE job_id = $1
RETURNING updated_at`, job, sched, s.Paused, c.Actor, pausedBy, pausedReason, pausedUntil).Scan(&s.UpdatedAt)
	if err != nil {
		return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	s.UpdatedAt = s.UpdatedAt.UTC()
	s.UpdatedBy = c.Actor
	if err := audit.Write(ctx, tx, audit.Entry{Actor: c.Actor, Action: action, Target: job, Reason: c.Reason, Detail: detail}); err != nil {
		return jobs.Setting{}, err
	}
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindJobSettings, job)); err != nil {
		return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return jobs.Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	return s, nil
}

// Trigger requests (migrations/00003_requests.sql).
const (
	// RequestKindTrigger is the studio_request kind of a trigger.
	RequestKindTrigger = "job.trigger"
	// TriggerRequestTTL: a trigger request not claimed by then is void; a
	// run the operator asked for ten minutes ago would be a surprise.
	TriggerRequestTTL = 10 * time.Minute
)

// ErrNoLiveHost: no live replica hosts the job, so nothing could run it.
var ErrNoLiveHost = errors.New("no live replica hosts the job")

// Trigger asks every live replica that hosts job to run it now. It writes,
// in the same transaction as the audit row, the studio_request rows the
// replicas act on: for an installation job one row that the first hosting
// replica to claim it runs (still taking the lock); for an instance job one
// row per live replica hosting it, addressed to that replica's incarnation,
// so each runs it once. A job.trigger signal, delivered on commit, wakes the
// replicas. It returns how many rows it wrote.
func Trigger(ctx context.Context, q Querier, job, actor, reason string) (int, error) {
	if err := Known(ctx, q, job); err != nil {
		return 0, err
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("trigger job %q: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	auditSeq, err := audit.Insert(ctx, tx, audit.Entry{Actor: actor, Action: "jobs.trigger", Target: job, Reason: reason})
	if err != nil {
		return 0, err
	}
	// A per-cluster job's rows are its duties' (job@cluster): each replica
	// that hosts one gets one request, and runs the duties it owns.
	hosts := `studio_job_status s JOIN studio_replica r ON r.id = s.replica_id
WHERE (s.job_id = $2 OR starts_with(s.job_id, $2 || '@')) AND ` + liveness.LiveSQL("r") + notDrainingSQL
	tag, err := tx.Exec(ctx, `
INSERT INTO studio_request (kind, target, replica_id, incarnation, requested_by, reason, audit_seq, expires_at)
SELECT DISTINCT $1::text, $2::text, r.id, r.incarnation, $3::text, $4::text, $5::bigint, now() + make_interval(secs => $6::float8)
FROM `+hosts+` AND s.scope = 'instance'
UNION ALL
SELECT $1::text, $2::text, NULL, NULL, $3::text, $4::text, $5::bigint, now() + make_interval(secs => $6::float8)
WHERE EXISTS (SELECT 1 FROM `+hosts+` AND s.scope = 'installation')`,
		RequestKindTrigger, job, actor, reason, auditSeq, TriggerRequestTTL.Seconds())
	if err != nil {
		return 0, fmt.Errorf("trigger job %q: write request: %w", job, err)
	}
	n := int(tag.RowsAffected())
	if n == 0 {
		return 0, fmt.Errorf("trigger job %q: %w: start a replica with the job, then try again", job, ErrNoLiveHost)
	}
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindJobTrigger, job)); err != nil {
		return 0, fmt.Errorf("trigger job %q: %w", job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("trigger job %q: %w", job, err)
	}
	return n, nil
}

// TriggerRequest is a trigger request a replica claimed.
type TriggerRequest struct {
	Seq         int64
	JobID       string
	RequestedBy string
	Reason      string
}

// ClaimTriggers marks done, in one conditional UPDATE, every pending trigger
// request of the given jobs that replica (with its incarnation) may take:
// those addressed to it and those of installation jobs addressed to no one.
// Each row is claimed once: of two replicas claiming one installation row,
// the second finds it done. The replica runs a job once for any number of
// its claimed requests.
func ClaimTriggers(ctx context.Context, q Querier, jobIDs []string, replica string, incarnation uuid.UUID) ([]TriggerRequest, error) {
	if len(jobIDs) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `
UPDATE studio_request SET done_at = now(), done_by = $3
WHERE kind = $1 AND target = ANY($2) AND done_at IS NULL AND audit_seq IS NOT NULL AND expires_at > now()
  AND (replica_id IS NULL OR (replica_id = $3 AND incarnation = $4))
RETURNING seq, target, requested_by, reason`, RequestKindTrigger, jobIDs, replica, incarnation)
	if err != nil {
		return nil, fmt.Errorf("claim trigger requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TriggerRequest, error) {
		var t TriggerRequest
		err := r.Scan(&t.Seq, &t.JobID, &t.RequestedBy, &t.Reason)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim trigger requests: %w", err)
	}
	return out, nil
}
