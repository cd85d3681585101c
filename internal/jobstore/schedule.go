package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
)

// KindJobSchedule is the bus signal (key: the job id) sent when a run of
// an installation job ends: every replica rereads the job's row of
// studio_job_schedule and moves its timer to the new due time.
const KindJobSchedule = "job.schedule"

// Schedules is the installation-wide schedule of installation jobs
// (studio_job_schedule, migrations/00004): the end of each job's last run
// anywhere, in database time. The runner's timers follow it
// (docs/schedules.md).
type Schedules struct{ q Querier }

// NewSchedules returns the schedule table on q.
func NewSchedules(q Querier) *Schedules { return &Schedules{q: q} }

// Load returns the end of the last run anywhere of each of jobIDs (a job
// that never ran has no entry) and the database's now() of the same
// statement.
func (s *Schedules) Load(ctx context.Context, jobIDs []string) (map[string]time.Time, time.Time, error) {
	var now time.Time
	if err := s.q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("read job schedules: %w", err)
	}
	rows, err := s.q.Query(ctx, `SELECT job_id, last_ended_at FROM studio_job_schedule WHERE job_id = ANY($1)`, jobIDs)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read job schedules: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var end time.Time
		if err := rows.Scan(&id, &end); err != nil {
			return nil, time.Time{}, fmt.Errorf("read job schedules: %w", err)
		}
		out[id] = end
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("read job schedules: %w", err)
	}
	return out, now, nil
}

const recordEndSQL = `
INSERT INTO studio_job_schedule AS s (job_id, last_ended_at, last_started_at, last_replica_id, last_seq, updated_at)
VALUES ($1, now(), $2, $3, $4, now())
ON CONFLICT (job_id) DO UPDATE SET last_ended_at = greatest(s.last_ended_at, now()),
  last_started_at = EXCLUDED.last_started_at, last_replica_id = EXCLUDED.last_replica_id,
  last_seq = EXCLUDED.last_seq, updated_at = now()
RETURNING last_ended_at`

// RecordEnd records that run seq of job, started at started by replica,
// ended now in database time, and signals every replica on the bus in the
// same transaction. It returns the end recorded.
func (s *Schedules) RecordEnd(ctx context.Context, job, replica string, seq int64, started time.Time) (time.Time, error) {
	tx, err := s.q.Begin(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("record the end of job %q: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var end time.Time
	if err := tx.QueryRow(ctx, recordEndSQL, job, started, replica, seq).Scan(&end); err != nil {
		return time.Time{}, fmt.Errorf("record the end of job %q: %w", job, err)
	}
	if err := bus.Notify(ctx, tx, bus.Signal(KindJobSchedule, job)); err != nil {
		return time.Time{}, fmt.Errorf("announce the end of job %q: %w", job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return time.Time{}, fmt.Errorf("record the end of job %q: %w", job, err)
	}
	return end, nil
}
