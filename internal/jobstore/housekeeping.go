package jobstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/tasks"
)

// What the built-in housekeeping job (jobs.HousekeepingID) keeps of run
// history (studio_job_run) and of the event stream (studio_event). The
// design, and why, is in docs/history.md: history is bounded by a count per
// job, so at a constant number of jobs the table reaches a steady size
// whatever the run rate, and each pass deletes only what became surplus
// since the last one, in short statements.
const (
	// RunsKeptPerJob: the newest runs of each job (by start time, the order
	// jobs history shows) are kept, whatever their outcome. Runs that
	// started at the same instant as the last of them are kept too.
	RunsKeptPerJob = 100
	// FailuresKeptFor and FailuresKeptPerJob: beyond those, a job's runs that
	// failed, timed out, lost their lock or were interrupted are kept while
	// younger than FailuresKeptFor, the newest FailuresKeptPerJob of them.
	FailuresKeptFor    = 7 * 24 * time.Hour
	FailuresKeptPerJob = 100
	// RunsKeptFor: no finished run older than this is kept, so the runs of a
	// job removed from the configuration (which no replica reports or prunes
	// by count any more than it runs) go in the end.
	RunsKeptFor = 90 * 24 * time.Hour
	// HistoryRetention: control requests (studio_request) claimed or expired
	// this long ago are pruned.
	HistoryRetention = 7 * 24 * time.Hour
	// ForgetStoppedAfter: replicas stopped or gone for this long are dropped,
	// with their job status rows.
	ForgetStoppedAfter = 24 * time.Hour
	// EventRetention and EventKeep bound studio_event: events older than
	// EventRetention go, and all but the newest EventKeep.
	EventRetention = 24 * time.Hour
	EventKeep      = 100_000
)

// How a pass deletes: in statements of its own (each one transaction), so
// no pass holds row locks or a snapshot for long, with a budget per pass
// so a backlog (a first pass after an upgrade) is worked off over several
// passes instead of one that overruns the next.
const (
	// PruneJobsPerStatement: the jobs one pruning statement looks at.
	PruneJobsPerStatement = 1000
	// PruneRowsPerStatement: the runs, and the events, one statement deletes
	// at most.
	PruneRowsPerStatement = 10_000
	// PruneRowsPerPass: the runs, and the events, one pass deletes at most.
	PruneRowsPerPass = 2_000_000
)

// Retention is what a housekeeping pass keeps and how it deletes the rest;
// DefaultRetention holds the constants above. Tests and measurements use
// smaller numbers.
type Retention struct {
	RunsKeptPerJob     int
	FailuresKeptFor    time.Duration
	FailuresKeptPerJob int
	RunsKeptFor        time.Duration
	EventsKeptFor      time.Duration
	EventsKept         int64
	JobsPerStatement   int
	RowsPerStatement   int
	RowsPerPass        int64
}

// DefaultRetention is what the built-in housekeeping job keeps.
var DefaultRetention = Retention{
	RunsKeptPerJob: RunsKeptPerJob, FailuresKeptFor: FailuresKeptFor, FailuresKeptPerJob: FailuresKeptPerJob,
	RunsKeptFor: RunsKeptFor, EventsKeptFor: EventRetention, EventsKept: EventKeep,
	JobsPerStatement: PruneJobsPerStatement, RowsPerStatement: PruneRowsPerStatement, RowsPerPass: PruneRowsPerPass,
}

// Pass is what one housekeeping pass did.
type Pass struct {
	RunsPruned     int64
	RunStmts       int   // pruning statements of run history
	MaxRunsPerStmt int64 // the most runs one of them deleted
	// AllJobs: the pass went through every job; else it stopped at its
	// budget, and the next pass starts after job id ResumeAfter.
	AllJobs              bool
	ResumeAfter          string
	Interrupted          int64
	Dropped              int64
	EventsPruned         int64
	EventStmts           int
	MaxEventsPerStmt     int64
	RunsTook, EventsTook time.Duration
}

// Housekeeping returns the built-in studio-housekeeping job (installation
// scope): prune run history and old control requests, mark runs of gone
// replicas interrupted, drop long-stopped replicas, prune the event stream.
func Housekeeping(q Querier) jobs.Job {
	return jobs.Job{
		ID: jobs.HousekeepingID, Scope: jobs.ScopeInstallation, Schedule: jobs.Schedule{Every: jobs.HousekeepingEvery},
		Task: &housekeeping{q: q}, Builtin: true, Spec: jobs.TaskSpec{}, File: "(built in)",
	}
}

type housekeeping struct {
	q      Querier
	mu     sync.Mutex
	resume string // where the last pass stopped at its budget
}

func (*housekeeping) Kind() string { return "builtin" }

func (h *housekeeping) Run(ctx context.Context, env tasks.Env) tasks.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, err := DefaultRetention.Housekeep(ctx, h.q, h.resume)
	h.resume = p.ResumeAfter
	out := fmt.Sprintf("pruned %d runs, marked %d runs interrupted, dropped %d replicas", p.RunsPruned, p.Interrupted, p.Dropped)
	return tasks.Result{Output: out, Err: err}
}

// Housekeep does one housekeeping pass with DefaultRetention and says what
// it changed.
func Housekeep(ctx context.Context, q Querier) (pruned, interrupted, dropped int64, err error) {
	p, err := DefaultRetention.Housekeep(ctx, q, "")
	return p.RunsPruned, p.Interrupted, p.Dropped, err
}

// pruneRunsSQL deletes the surplus runs of the next $2 jobs after job id $1
// (in job id order), at most $7 of them, in one statement, and says how many
// it deleted, how many jobs it looked at and the last of them.
//
// The jobs come from a skip scan of an index on job_id (one descent a job,
// a recursive CTE), so the statement needs no list of jobs: it sees those
// removed from the configuration too. For each job it reads the start of
// its $3-th newest run (an OFFSET on studio_job_run_job_started, the index
// jobs history reads) and then only the runs older than that, or than $6
// seconds: those that became surplus since the last pass, plus the few
// that stay (failures, runs still going). Of those, it keeps runs still
// going and the newest $5 failures younger than $4 seconds.
const pruneRunsSQL = `
WITH RECURSIVE jobs(job_id) AS (
    (SELECT job_id FROM studio_job_run WHERE job_id > $1 ORDER BY job_id LIMIT 1)
  UNION ALL
    SELECT (SELECT r.job_id FROM studio_job_run r WHERE r.job_id > jobs.job_id ORDER BY r.job_id LIMIT 1)
    FROM jobs WHERE jobs.job_id IS NOT NULL),
chunk AS MATERIALIZED (SELECT job_id FROM jobs WHERE job_id IS NOT NULL LIMIT $2),
surplus AS (
  SELECT c.seq FROM chunk j
  CROSS JOIN LATERAL (
    SELECT greatest(coalesce((SELECT k.started_at FROM studio_job_run k WHERE k.job_id = j.job_id
        ORDER BY k.started_at DESC OFFSET $3 - 1 LIMIT 1), '-infinity'),
      now() - make_interval(secs => $6)) AS before) b
  CROSS JOIN LATERAL (
    SELECT r.seq, r.outcome, r.started_at, count(*) FILTER (
        WHERE r.outcome NOT IN ('running', 'succeeded') AND r.started_at >= now() - make_interval(secs => $4))
      OVER (ORDER BY r.started_at DESC, r.seq DESC ROWS UNBOUNDED PRECEDING) AS failures
    FROM studio_job_run r WHERE r.job_id = j.job_id AND r.started_at < b.before) c
  WHERE c.outcome <> 'running'
    AND NOT (c.outcome <> 'succeeded' AND c.started_at >= now() - make_interval(secs => $4) AND c.failures <= $5)
  LIMIT $7),
del AS (DELETE FROM studio_job_run r USING surplus s WHERE r.seq = s.seq RETURNING 1)
SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM chunk), coalesce((SELECT max(job_id) FROM chunk), '')`

// eventBoundsSQL: the oldest event id, and the newest one that goes (all
// but the newest $1, and those before the first event younger than $2
// seconds: ids follow commit order, so the age bound is read from the
// oldest end of the primary key, not from every row).
const eventBoundsSQL = `
SELECT min(id), greatest(max(id) - $1,
  coalesce((SELECT id FROM studio_event WHERE at >= now() - make_interval(secs => $2) ORDER BY id LIMIT 1) - 1, max(id)))
FROM studio_event`

// Housekeep does one housekeeping pass. Pruning of run history starts
// after job id resumeAfter ("" for the first job) and goes on through
// the jobs while the pass's budget lasts.
func (rt Retention) Housekeep(ctx context.Context, q Querier, resumeAfter string) (p Pass, err error) {
	start := time.Now()
	err = rt.pruneRuns(ctx, q, resumeAfter, &p)
	p.RunsTook = time.Since(start)
	if err != nil {
		return p, fmt.Errorf("prune run history: %w", err)
	}
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
		p.Interrupted = int64(len(seqs))
		_, err = tx.Exec(ctx, `SELECT studio_event_runs(array_agg(studio_event_run_data(r) ORDER BY r.seq), '{}')
FROM studio_job_run r WHERE r.seq = ANY($1)`, seqs)
		return err
	})
	if err != nil {
		return p, fmt.Errorf("mark runs of gone replicas interrupted: %w", err)
	}
	err = q.QueryRow(ctx, `
WITH gone AS (
  DELETE FROM studio_replica r
  WHERE coalesce(r.stopped_at, r.heartbeat_at) < now() - make_interval(secs => $1) AND NOT `+liveness.LiveSQL("r")+`
  RETURNING r.id),
status AS (DELETE FROM studio_job_status s USING gone WHERE s.replica_id = gone.id RETURNING 1)
SELECT count(*) FROM gone`, ForgetStoppedAfter.Seconds()).Scan(&p.Dropped)
	if err != nil {
		return p, fmt.Errorf("drop long-stopped replicas: %w", err)
	}
	// Control requests (studio_request) that were claimed or expired long
	// ago: they only explain what happened, as run history does.
	_, err = q.Exec(ctx, `DELETE FROM studio_request WHERE coalesce(done_at, expires_at) < now() - make_interval(secs => $1)`,
		HistoryRetention.Seconds())
	if err != nil {
		return p, fmt.Errorf("prune control requests: %w", err)
	}
	// Status rows of replicas an operator forgot stay behind otherwise.
	_, err = q.Exec(ctx, `DELETE FROM studio_job_status s WHERE s.updated_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM studio_replica r WHERE r.id = s.replica_id)`, ForgetStoppedAfter.Seconds())
	if err != nil {
		return p, fmt.Errorf("drop status of forgotten replicas: %w", err)
	}
	// The event stream (studio_event, docs/events.md): a client replays at
	// most 1,000 missed events, so the table needs only the recent ones.
	start = time.Now()
	err = rt.pruneEvents(ctx, q, &p)
	p.EventsTook = time.Since(start)
	if err != nil {
		return p, fmt.Errorf("prune the event stream: %w", err)
	}
	return p, nil
}

// pruneRuns runs pruneRunsSQL over the jobs, a chunk a statement, the same
// chunk again while a statement deleted as many as it may.
func (rt Retention) pruneRuns(ctx context.Context, q Querier, after string, p *Pass) error {
	for p.RunsPruned < rt.RowsPerPass {
		rows := min(int64(rt.RowsPerStatement), rt.RowsPerPass-p.RunsPruned)
		var n, seen int64
		var last string
		err := q.QueryRow(ctx, pruneRunsSQL, after, rt.JobsPerStatement, rt.RunsKeptPerJob,
			rt.FailuresKeptFor.Seconds(), rt.FailuresKeptPerJob, rt.RunsKeptFor.Seconds(), rows).Scan(&n, &seen, &last)
		if err != nil {
			return err
		}
		p.RunStmts++
		p.RunsPruned += n
		p.MaxRunsPerStmt = max(p.MaxRunsPerStmt, n)
		switch {
		case n >= rows:
			// This chunk may have more: the same again (or, at the
			// budget, from here next pass).
			p.ResumeAfter = after
		case seen < int64(rt.JobsPerStatement):
			p.ResumeAfter, p.AllJobs = "", true
			return nil
		default:
			after, p.ResumeAfter = last, last
		}
	}
	return nil
}

// pruneEvents deletes the events that go by ranges of ids, a statement a
// range.
func (rt Retention) pruneEvents(ctx context.Context, q Querier, p *Pass) error {
	var lo, upper *int64
	if err := q.QueryRow(ctx, eventBoundsSQL, rt.EventsKept, rt.EventsKeptFor.Seconds()).Scan(&lo, &upper); err != nil {
		return err
	}
	if lo == nil || upper == nil {
		return nil // no events
	}
	for from := *lo; from <= *upper && p.EventsPruned < rt.RowsPerPass; {
		to := min(from+int64(rt.RowsPerStatement), *upper+1, from+rt.RowsPerPass-p.EventsPruned)
		tag, err := q.Exec(ctx, `DELETE FROM studio_event WHERE id >= $1 AND id < $2`, from, to)
		if err != nil {
			return err
		}
		p.EventStmts++
		p.EventsPruned += tag.RowsAffected()
		p.MaxEventsPerStmt = max(p.MaxEventsPerStmt, tag.RowsAffected())
		from = to
	}
	return nil
}
