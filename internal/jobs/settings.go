package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
)

// Setting is an operator override (a studio_job_setting row).
type Setting struct {
	JobID     string
	Schedule  string // stored form ("every 30s", "cron ..."), "" for none
	Paused    bool
	UpdatedAt time.Time
	UpdatedBy string
}

// Querier is the part of a pool the stores use.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

const settingsSQL = `SELECT job_id, coalesce(schedule, ''), paused, updated_at, updated_by FROM studio_job_setting`

// SettingsCache holds every operator setting; the runner reads it at every
// fire. The bus invalidates one job (job.settings) or all (on resync).
type SettingsCache struct {
	q Querier

	mu     sync.Mutex
	all    map[string]Setting
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
func (c *SettingsCache) Get(ctx context.Context, job string) (Setting, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		all, err := loadSettings(ctx, c.q, "", nil)
		if err != nil {
			return Setting{}, err
		}
		c.all, c.loaded, c.stale = all, true, map[string]bool{}
	}
	if c.stale[job] {
		one, err := loadSettings(ctx, c.q, " WHERE job_id = $1", []any{job})
		if err != nil {
			return Setting{}, err
		}
		delete(c.all, job)
		if s, ok := one[job]; ok {
			c.all[job] = s
		}
		delete(c.stale, job)
	}
	return c.all[job], nil
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

func loadSettings(ctx context.Context, q Querier, where string, args []any) (map[string]Setting, error) {
	rows, err := q.Query(ctx, settingsSQL+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read job settings: %w", err)
	}
	defer rows.Close()
	out := map[string]Setting{}
	for rows.Next() {
		var s Setting
		if err := rows.Scan(&s.JobID, &s.Schedule, &s.Paused, &s.UpdatedAt, &s.UpdatedBy); err != nil {
			return nil, fmt.Errorf("read job settings: %w", err)
		}
		s.UpdatedAt = s.UpdatedAt.UTC()
		out[s.JobID] = s
	}
	return out, rows.Err()
}

// ErrUnknownJob: no replica has reported a job with that id.
var ErrUnknownJob = errors.New("no such job")

// Known reports whether any replica has reported job (a studio_job_status row).
func Known(ctx context.Context, q Querier, job string) error {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_status WHERE job_id = $1)`, job).Scan(&ok); err != nil {
		return fmt.Errorf("look up job %q: %w", job, err)
	}
	if !ok {
		return fmt.Errorf("job %q: %w (no replica has reported it)", job, ErrUnknownJob)
	}
	return nil
}

// Change is one operator change to a job's settings.
type Change struct {
	Pause    *bool     // set paused
	Schedule *Schedule // set the override; a zero Schedule clears it
	Actor    string
	Reason   string
}

// ApplyChange writes an operator override, its audit row and a job.settings
// bus signal in one transaction, and returns the setting after it.
func ApplyChange(ctx context.Context, q Querier, job string, c Change) (Setting, error) {
	if c.Pause == nil && c.Schedule == nil {
		return Setting{}, fmt.Errorf("change job %q: nothing to change", job)
	}
	if err := Known(ctx, q, job); err != nil {
		return Setting{}, err
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	before, err := loadSettings(ctx, tx, " WHERE job_id = $1 FOR UPDATE", []any{job})
	if err != nil {
		return Setting{}, err
	}
	s := before[job]
	s.JobID = job
	action := ""
	detail := map[string]any{"schedule_before": s.Schedule, "paused_before": s.Paused}
	if c.Pause != nil {
		s.Paused = *c.Pause
		action = map[bool]string{true: "jobs.pause", false: "jobs.resume"}[*c.Pause]
	}
	if c.Schedule != nil {
		s.Schedule = c.Schedule.String()
		action = "jobs.set"
	}
	detail["schedule_after"], detail["paused_after"] = s.Schedule, s.Paused
	var sched any
	if s.Schedule != "" {
		sched = s.Schedule
	}
	err = tx.QueryRow(ctx, `
INSERT INTO studio_job_setting (job_id, schedule, paused, updated_at, updated_by) VALUES ($1, $2, $3, now(), $4)
ON CONFLICT (job_id) DO UPDATE SET schedule = EXCLUDED.schedule, paused = EXCLUDED.paused, updated_at = now(), updated_by = EXCLUDED.updated_by
RETURNING updated_at`, job, sched, s.Paused, c.Actor).Scan(&s.UpdatedAt)
	if err != nil {
		return Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	s.UpdatedBy = c.Actor
	if err := audit.Write(ctx, tx, audit.Entry{Actor: c.Actor, Action: action, Target: job, Reason: c.Reason, Detail: detail}); err != nil {
		return Setting{}, err
	}
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindJobSettings, job)); err != nil {
		return Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Setting{}, fmt.Errorf("change job %q: %w", job, err)
	}
	return s, nil
}

// Trigger asks every replica that hosts job to run it now (a job.trigger
// signal); an installation job still takes its lock.
func Trigger(ctx context.Context, q Querier, job, actor, reason string) error {
	if err := Known(ctx, q, job); err != nil {
		return err
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return fmt.Errorf("trigger job %q: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := audit.Write(ctx, tx, audit.Entry{Actor: actor, Action: "jobs.trigger", Target: job, Reason: reason}); err != nil {
		return err
	}
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindJobTrigger, job)); err != nil {
		return fmt.Errorf("trigger job %q: %w", job, err)
	}
	return tx.Commit(ctx)
}
