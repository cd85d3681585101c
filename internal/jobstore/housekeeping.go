package jobstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
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
	// RunsKeptFor: no finished run older than this is kept, so the last runs
	// of a job removed from the configuration, which no new run pushes out,
	// go in the end.
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
	// OccurrencesKeptFor and OccurrencesKept bound studio_occurrence (the
	// skips and misses, docs/occurrences.md): kept as long as failed runs
	// (FailuresKeptFor), and never more than the newest OccurrencesKept,
	// so a job paused for a week at every: 1s does not keep 600,000 rows
	// past the bound.
	OccurrencesKeptFor = FailuresKeptFor
	OccurrencesKept    = 1_000_000
)

// How a pass deletes: in statements of its own (each one transaction), so
// no pass holds row locks or a snapshot for long, with a budget per pass
// so a backlog (a first pass after an upgrade) is worked off over several
// passes instead of one that overruns the next.
const (
	// PruneJobsPerStatement: the jobs whose cutoffs one statement reads,
	// and whose surplus the next ones delete.
	PruneJobsPerStatement = 500
	// PruneRowsPerStatement: the runs, and the events, one statement deletes
	// at most.
	PruneRowsPerStatement = 10_000
	// PruneRowsPerPass: the runs, and the events, one pass deletes at most.
	PruneRowsPerPass = 2_000_000
	// pruneScanPerJob: the runs older than a job's newest RunsKeptPerJob that
	// a pass reads to find the failures it keeps (pruneCutoffsSQL).
	pruneScanPerJob = 1000
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
	// OccurrencesKeptFor and OccurrencesKept: zero is the default
	// (OccurrencesKeptFor, OccurrencesKept).
	OccurrencesKeptFor time.Duration
	OccurrencesKept    int64
	JobsPerStatement   int
	RowsPerStatement   int
	RowsPerPass        int64
}

// DefaultRetention is what the built-in housekeeping job keeps.
var DefaultRetention = Retention{
	RunsKeptPerJob: RunsKeptPerJob, FailuresKeptFor: FailuresKeptFor, FailuresKeptPerJob: FailuresKeptPerJob,
	RunsKeptFor: RunsKeptFor, EventsKeptFor: EventRetention, EventsKept: EventKeep,
	OccurrencesKeptFor: OccurrencesKeptFor, OccurrencesKept: OccurrencesKept,
	JobsPerStatement: PruneJobsPerStatement, RowsPerStatement: PruneRowsPerStatement, RowsPerPass: PruneRowsPerPass,
}

// Pass is what one housekeeping pass did.
type Pass struct {
	RunsPruned     int64
	RunStmts       int   // statements of the run history pruning (cutoffs and deletes)
	MaxRunsPerStmt int64 // the most runs one of them deleted
	// AllJobs: the pass went on to the last job; else it stopped at its
	// budget, and the next pass starts after job id ResumeAfter.
	AllJobs              bool
	ResumeAfter          string
	Interrupted          int64
	Dropped              int64
	EventsPruned         int64
	EventStmts           int
	MaxEventsPerStmt     int64
	RunsTook, EventsTook time.Duration
	// OccurrencesPruned: the skips and misses deleted, in OccurrenceStmts
	// statements.
	OccurrencesPruned int64
	OccurrenceStmts   int
	CutoffsTook       time.Duration // of RunsTook, reading the cutoffs
}

// Housekeeping returns the built-in studio-housekeeping job (installation
// scope): prune run history and old control requests, mark runs of gone
// replicas interrupted, drop long-stopped replicas, prune the event stream.
func Housekeeping(q Querier) jobtask.Job {
	return jobtask.Job{Job: jobs.Job{
		ID: jobs.HousekeepingID, Scope: jobs.ScopeInstallation, Schedule: jobs.Schedule{Every: jobs.HousekeepingEvery},
		Builtin: true, Spec: jobs.TaskSpec{}, File: "(built in)",
	}, Task: &housekeeping{q: q}}
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

// pruneCutoffsSQL says, for the next $2 jobs after job id $1 (in job id
// order), which of their runs are surplus: those that started before
// "before" (the start of the job's $3-th newest run, or $6 seconds ago if
// that is later), but for runs still going and failures that started at
// or after "failures_from" (the start of the newest $5-th failure among
// them, or $4 seconds ago if that is later). And whether the job has any.
//
// The jobs come from a skip scan of an index on job_id (one descent a job,
// a recursive CTE), so no list of jobs is needed, and those removed from
// the configuration are seen too. For each job it reads $3 entries of
// studio_job_run_job_started (the index jobs history reads) from the newest,
// then the runs older than those, newest first, up to $7 of them, to find
// the failures kept: in a steady state these are the runs that became
// surplus since the last pass and the failures kept. When the $5-th failure
// is not among the first $7 (a backlog), every failure of the last $4
// seconds stays this pass: the count of failures is then applied by a
// later pass, once the backlog is gone.
const pruneCutoffsSQL = `
WITH RECURSIVE jobs(job_id) AS (
    (SELECT job_id FROM studio_job_run WHERE job_id > $1 ORDER BY job_id LIMIT 1)
  UNION ALL
    SELECT (SELECT r.job_id FROM studio_job_run r WHERE r.job_id > jobs.job_id ORDER BY r.job_id LIMIT 1)
    FROM jobs WHERE jobs.job_id IS NOT NULL),
chunk AS MATERIALIZED (SELECT job_id FROM jobs WHERE job_id IS NOT NULL LIMIT $2),
cut AS MATERIALIZED (
  SELECT j.job_id, b.before, greatest(now() - make_interval(secs => $4), coalesce((
      SELECT f.started_at FROM (
          SELECT r.started_at, r.outcome FROM studio_job_run r
          WHERE r.job_id = j.job_id AND r.started_at < b.before AND r.started_at >= now() - make_interval(secs => $4)
          ORDER BY r.started_at DESC LIMIT $7) f
      WHERE f.outcome NOT IN ('running', 'succeeded')
      ORDER BY f.started_at DESC OFFSET $5 - 1 LIMIT 1), '-infinity')) AS failures_from
  FROM chunk j
  CROSS JOIN LATERAL (
    SELECT greatest(coalesce((SELECT k.started_at FROM studio_job_run k WHERE k.job_id = j.job_id
        ORDER BY k.started_at DESC OFFSET $3 - 1 LIMIT 1), '-infinity'),
      now() - make_interval(secs => $6)) AS before OFFSET 0) b)
SELECT c.job_id, c.before, c.failures_from, EXISTS (
    SELECT 1 FROM studio_job_run r WHERE r.job_id = c.job_id AND r.started_at < c.before AND r.outcome <> 'running'
      AND (r.outcome = 'succeeded' OR r.started_at < c.failures_from))
FROM cut c ORDER BY c.job_id`

// pruneRunsSQL deletes at most $4 surplus runs of the jobs $1 with the
// cutoffs $2 and $3 of pruneCutoffsSQL. The cutoffs stay right for a whole
// pass: runs that start later are newer than them, and the pass deletes
// none of the runs that decide them. The rows are deleted by their ctid,
// found by the same statement (one snapshot): a TID scan, not a second
// descent of the primary key a row, took half the time at 10,000 jobs.
const pruneRunsSQL = `
WITH c AS (SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS c(job_id, before, failures_from)),
s AS (
  SELECT x.ctid FROM c CROSS JOIN LATERAL (
    SELECT r.ctid FROM studio_job_run r
    WHERE r.job_id = c.job_id AND r.started_at < c.before AND r.outcome <> 'running'
      AND (r.outcome = 'succeeded' OR r.started_at < c.failures_from)
    LIMIT $4) x
  LIMIT $4)
DELETE FROM studio_job_run d WHERE d.ctid = ANY (ARRAY(SELECT s.ctid FROM s))`

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
-- a gone replica's published job definitions (migration 00015, definitions.go)
, defs AS (DELETE FROM studio_job_definition d USING gone WHERE d.replica_id = gone.id RETURNING 1)
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
	_, err = q.Exec(ctx, `DELETE FROM studio_job_definition d WHERE d.published_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM studio_replica r WHERE r.id = d.replica_id)`, ForgetStoppedAfter.Seconds())
	if err != nil {
		return p, fmt.Errorf("drop job definitions of forgotten replicas: %w", err)
	}
	// The event stream (studio_event, docs/events.md): a client replays at
	// most 1,000 missed events, so the table needs only the recent ones.
	start = time.Now()
	err = rt.pruneEvents(ctx, q, &p)
	p.EventsTook = time.Since(start)
	if err != nil {
		return p, fmt.Errorf("prune the event stream: %w", err)
	}
	if err := rt.pruneOccurrences(ctx, q, &p); err != nil {
		return p, fmt.Errorf("prune job occurrences: %w", err)
	}
	return p, nil
}

// occurrenceBoundsSQL: the oldest occurrence id, and the newest one that
// goes (all but the newest $1, and those before the first one recorded
// within $2 seconds; ids follow insertion, as the events').
const occurrenceBoundsSQL = `
SELECT min(id), greatest(max(id) - $1,
  coalesce((SELECT id FROM studio_occurrence WHERE recorded_at >= now() - make_interval(secs => $2) ORDER BY id LIMIT 1) - 1, max(id)))
FROM studio_occurrence`

// pruneOccurrences deletes the skips and misses that go, by ranges of ids,
// a statement a range of at most RowsPerStatement, within the pass's
// budget of rows (as pruneEvents).
func (rt Retention) pruneOccurrences(ctx context.Context, q Querier, p *Pass) error {
	keptFor, kept := rt.OccurrencesKeptFor, rt.OccurrencesKept
	if keptFor <= 0 {
		keptFor = OccurrencesKeptFor
	}
	if kept <= 0 {
		kept = OccurrencesKept
	}
	var lo, upper *int64
	if err := q.QueryRow(ctx, occurrenceBoundsSQL, kept, keptFor.Seconds()).Scan(&lo, &upper); err != nil {
		return err
	}
	if lo == nil || upper == nil {
		return nil // none
	}
	for from := *lo; from <= *upper && p.OccurrencesPruned < rt.RowsPerPass; {
		to := min(from+int64(rt.RowsPerStatement), *upper+1, from+rt.RowsPerPass-p.OccurrencesPruned)
		tag, err := q.Exec(ctx, `DELETE FROM studio_occurrence WHERE id >= $1 AND id < $2`, from, to)
		if err != nil {
			return err
		}
		p.OccurrenceStmts++
		p.OccurrencesPruned += tag.RowsAffected()
		from = to
	}
	return nil
}

// pruneRuns goes through the jobs a chunk at a time: the cutoffs of the
// chunk in one statement, then its surplus in statements of at most
// RowsPerStatement runs, until a pass's budget is spent.
func (rt Retention) pruneRuns(ctx context.Context, q Querier, after string, p *Pass) error {
	if rt.RunsKeptPerJob < 1 || rt.FailuresKeptPerJob < 1 || rt.JobsPerStatement < 1 || rt.RowsPerStatement < 1 {
		return fmt.Errorf("retention: runs and failures kept per job, jobs and rows per statement must be at least 1: %+v", rt)
	}
	for {
		var ids, last []string
		var before, failuresFrom []time.Time
		seen := 0
		cs := time.Now()
		err := noJIT(ctx, q, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, pruneCutoffsSQL, after, rt.JobsPerStatement, rt.RunsKeptPerJob,
				rt.FailuresKeptFor.Seconds(), rt.FailuresKeptPerJob, rt.RunsKeptFor.Seconds(), pruneScanPerJob)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				var b, f time.Time
				var surplus bool
				if err := rows.Scan(&id, &b, &f, &surplus); err != nil {
					return err
				}
				seen++
				last = []string{id}
				if surplus {
					ids, before, failuresFrom = append(ids, id), append(before, b), append(failuresFrom, f)
				}
			}
			return rows.Err()
		})
		p.CutoffsTook += time.Since(cs)
		if err != nil {
			return err
		}
		p.RunStmts++
		for len(ids) > 0 {
			if p.RunsPruned >= rt.RowsPerPass {
				p.ResumeAfter = after // this chunk again, next pass
				return nil
			}
			limit := min(int64(rt.RowsPerStatement), rt.RowsPerPass-p.RunsPruned)
			var n int64
			err := noJIT(ctx, q, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, pruneRunsSQL, ids, before, failuresFrom, limit)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				return err
			}
			p.RunStmts++
			p.RunsPruned += n
			p.MaxRunsPerStmt = max(p.MaxRunsPerStmt, n)
			if n < limit {
				break // the chunk has no surplus left
			}
		}
		if seen < rt.JobsPerStatement {
			p.ResumeAfter, p.AllJobs = "", true
			return nil
		}
		after = last[0]
		if p.RunsPruned >= rt.RowsPerPass {
			p.ResumeAfter = after
			return nil
		}
	}
}

// noJIT runs f in a transaction of its own without JIT compilation: the
// planner's estimates of the pruning statements (lateral subqueries over
// thousands of jobs) pass jit_above_cost, and compiling them took longer
// (40 ms) than running them.
func noJIT(ctx context.Context, q Querier, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
			return err
		}
		return f(tx)
	})
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
