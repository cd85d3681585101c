package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/tasks"
)

// What the built-in housekeeping job (jobs.HousekeepingID) keeps.
const (
	// HistoryRetention: runs older than this are pruned.
	HistoryRetention = 7 * 24 * time.Hour
	// ForgetStoppedAfter: replicas stopped or gone for this long are dropped,
	// with their job status rows.
	ForgetStoppedAfter = 24 * time.Hour
	// EventRetention and EventKeep bound studio_event: events older than
	// EventRetention go, and all but the newest EventKeep.
	EventRetention = 24 * time.Hour
	EventKeep      = 100_000
)

// Housekeeping returns the built-in studio-housekeeping job (installation
// scope): prune old run history and old control requests, mark runs of gone replicas interrupted,
// drop long-stopped replicas.
func Housekeeping(q Querier) jobs.Job {
	return jobs.Job{
		ID: jobs.HousekeepingID, Scope: jobs.ScopeInstallation, Schedule: jobs.Schedule{Every: jobs.HousekeepingEvery},
		Task: housekeeping{q: q}, Builtin: true, Spec: jobs.TaskSpec{}, File: "(built in)",
	}
}

type housekeeping struct{ q Querier }

func (housekeeping) Kind() string { return "builtin" }

func (h housekeeping) Run(ctx context.Context, env tasks.Env) tasks.Result {
	pruned, interrupted, dropped, err := Housekeep(ctx, h.q)
	out := fmt.Sprintf("pruned %d runs, marked %d runs interrupted, dropped %d replicas", pruned, interrupted, dropped)
	return tasks.Result{Output: out, Err: err}
}

// Housekeep does one housekeeping pass and says what it changed.
func Housekeep(ctx context.Context, q Querier) (pruned, interrupted, dropped int64, err error) {
	tag, err := q.Exec(ctx, `DELETE FROM studio_job_run WHERE started_at < now() - make_interval(secs => $1) AND outcome <> 'running'`,
		HistoryRetention.Seconds())
	if err != nil {
		return 0, 0, 0, fmt.Errorf("prune run history: %w", err)
	}
	pruned = tag.RowsAffected()
	// The rows, then their events (docs/events.md), in one transaction.
	err = pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
UPDATE studio_job_run j SET outcome = 'interrupted', finished_at = now(),
  error = 'replica ' || j.replica_id || ' is gone: the run was interrupted'
WHERE j.outcome = 'running' AND NOT EXISTS (
  SELECT 1 FROM studio_replica r WHERE r.id = j.replica_id AND `+liveness.LiveSQL("r")+`)
RETURNING j.seq`)
		if err != nil {
			return err
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(seqs) == 0 {
			return err
		}
		interrupted = int64(len(seqs))
		_, err = tx.Exec(ctx, `SELECT studio_event_runs(array_agg(studio_event_run_data(r) ORDER BY r.seq), '{}')
FROM studio_job_run r WHERE r.seq = ANY($1)`, seqs)
		return err
	})
	if err != nil {
		return pruned, 0, 0, fmt.Errorf("mark runs of gone replicas interrupted: %w", err)
	}
	err = q.QueryRow(ctx, `
WITH gone AS (
  DELETE FROM studio_replica r
  WHERE coalesce(r.stopped_at, r.heartbeat_at) < now() - make_interval(secs => $1) AND NOT `+liveness.LiveSQL("r")+`
  RETURNING r.id),
status AS (DELETE FROM studio_job_status s USING gone WHERE s.replica_id = gone.id RETURNING 1)
SELECT count(*) FROM gone`, ForgetStoppedAfter.Seconds()).Scan(&dropped)
	if err != nil {
		return pruned, interrupted, 0, fmt.Errorf("drop long-stopped replicas: %w", err)
	}
	// Control requests (studio_request) that were claimed or expired long
	// ago: they only explain what happened, as run history does.
	_, err = q.Exec(ctx, `DELETE FROM studio_request WHERE coalesce(done_at, expires_at) < now() - make_interval(secs => $1)`,
		HistoryRetention.Seconds())
	if err != nil {
		return pruned, interrupted, dropped, fmt.Errorf("prune control requests: %w", err)
	}
	// Status rows of replicas an operator forgot stay behind otherwise.
	_, err = q.Exec(ctx, `DELETE FROM studio_job_status s WHERE s.updated_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM studio_replica r WHERE r.id = s.replica_id)`, ForgetStoppedAfter.Seconds())
	if err != nil {
		return pruned, interrupted, dropped, fmt.Errorf("drop status of forgotten replicas: %w", err)
	}
	// The event stream (studio_event, docs/events.md): a client replays at
	// most 1,000 missed events, so the table needs only the recent ones.
	_, err = q.Exec(ctx, `DELETE FROM studio_event WHERE at < now() - make_interval(secs => $1)
   OR id <= (SELECT max(id) FROM studio_event) - $2`, EventRetention.Seconds(), EventKeep)
	if err != nil {
		return pruned, interrupted, dropped, fmt.Errorf("prune the event stream: %w", err)
	}
	return pruned, interrupted, dropped, nil
}
