package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
)

// Backfill requests (migrations/00016_backfill.sql; docs/schedules.md,
// "Backfill").
const (
	// RequestKindBackfill is the studio_request kind of a backfill.
	RequestKindBackfill = "job.backfill"
	// KindJobBackfill is the bus signal (key: the job id) that wakes the
	// replicas hosting a job when a backfill of it was requested.
	KindJobBackfill = "job.backfill"
	// BackfillRequestTTL: an occurrence not started by then is void (its
	// request expires). A backfill runs one occurrence at a time between
	// the live runs, so it may take hours; a week bounds it.
	BackfillRequestTTL = 7 * 24 * time.Hour
)

// Why an occurrence is left out of a backfill (without --again).
const (
	// LeftOutRan: a run of the job has a nominal time in the occurrence's
	// slot (a live run, a trigger's is not counted: its nominal time is
	// the trigger's, not a due time's).
	LeftOutRan = "ran"
	// LeftOutRequested: a pending backfill occurrence of the job has it.
	LeftOutRequested = "requested"
)

// BackfillLeftOut says for each occurrence of job why a backfill leaves it
// out ("" when it runs): it ran, or a backfill asked for it and it has not
// ended yet. One statement.
func BackfillLeftOut(ctx context.Context, q Querier, job string, occ []jobs.BackfillOccurrence) ([]string, error) {
	out := make([]string, len(occ))
	if len(occ) == 0 {
		return out, nil
	}
	at, until := make([]time.Time, len(occ)), make([]time.Time, len(occ))
	for i, o := range occ {
		at[i], until[i] = o.At, o.Until
		if o.Until.IsZero() { // the cron's last time ever
			until[i] = o.At.Add(time.Nanosecond)
		}
	}
	rows, err := q.Query(ctx, `
SELECT t.i,
       EXISTS (SELECT 1 FROM studio_job_run r
               WHERE r.job_id = $1 AND NOT r.triggered AND r.nominal_at >= t.at AND r.nominal_at < t.until),
       EXISTS (SELECT 1 FROM studio_backfill b JOIN studio_request q ON q.seq = b.request_seq
               WHERE b.job_id = $1 AND b.done_at IS NULL AND q.expires_at > now()
                 AND b.nominal_at >= t.at AND b.nominal_at < t.until)
FROM unnest($2::timestamptz[], $3::timestamptz[]) WITH ORDINALITY AS t(at, until, i)`, job, at, until)
	if err != nil {
		return nil, fmt.Errorf("read past runs of job %q: %w", job, err)
	}
	var i int64
	var ran, requested bool
	_, err = pgx.ForEachRow(rows, []any{&i, &ran, &requested}, func() error {
		switch {
		case ran:
			out[i-1] = LeftOutRan
		case requested:
			out[i-1] = LeftOutRequested
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read past runs of job %q: %w", job, err)
	}
	return out, nil
}

// BackfillRequest is what jobs backfill asks for.
type BackfillRequest struct {
	Job, Actor, Reason string
	From, To           time.Time
	Again              bool
	NominalAt          []time.Time // oldest first
	// SlotUntil, when given, holds the end of each occurrence's slot (the
	// schedule's next nominal time; zero for none), as BackfillLeftOut
	// reads it: the claim leaves out an occurrence (without Again) that a
	// run with a nominal time in its slot served meanwhile. Without it the
	// slot is the nominal time alone.
	SlotUntil []time.Time
}

// RequestBackfill writes, in one transaction, the audit row, the request
// (a studio_request row of kind job.backfill that any replica hosting the
// job works on) and one studio_backfill row per nominal time, and wakes
// the replicas with a job.backfill signal on commit. It returns the
// request's seq.
func RequestBackfill(ctx context.Context, q Querier, r BackfillRequest) (int64, error) {
	if len(r.NominalAt) == 0 {
		return 0, fmt.Errorf("backfill job %q: no occurrence to run", r.Job)
	}
	if r.SlotUntil != nil && len(r.SlotUntil) != len(r.NominalAt) {
		return 0, fmt.Errorf("backfill job %q: %d slot ends for %d occurrences", r.Job, len(r.SlotUntil), len(r.NominalAt))
	}
	until := make([]*time.Time, len(r.NominalAt))
	for i := range r.SlotUntil {
		if !r.SlotUntil[i].IsZero() {
			until[i] = &r.SlotUntil[i]
		}
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("backfill job %q: %w", r.Job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	auditSeq, err := audit.Insert(ctx, tx, audit.Entry{Actor: r.Actor, Action: "jobs.backfill", Target: r.Job, Reason: r.Reason,
		Detail: map[string]any{"from": r.From.UTC().Format(time.RFC3339Nano), "to": r.To.UTC().Format(time.RFC3339Nano),
			"occurrences": len(r.NominalAt), "again": r.Again}})
	if err != nil {
		return 0, err
	}
	var seq int64
	if err := tx.QueryRow(ctx, `
INSERT INTO studio_request (kind, target, requested_by, reason, audit_seq, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::float8)) RETURNING seq`,
		RequestKindBackfill, r.Job, r.Actor, r.Reason, auditSeq, BackfillRequestTTL.Seconds()).Scan(&seq); err != nil {
		return 0, fmt.Errorf("backfill job %q: write request: %w", r.Job, err)
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO studio_backfill (request_seq, job_id, nominal_at, slot_until, again)
SELECT $1, $2, t, u, $5 FROM unnest($3::timestamptz[], $4::timestamptz[]) AS x(t, u)`, seq, r.Job, r.NominalAt, until, r.Again); err != nil {
		return 0, fmt.Errorf("backfill job %q: write occurrences: %w", r.Job, err)
	}
	if err := bus.Notify(ctx, tx, bus.Signal(KindJobBackfill, r.Job)); err != nil {
		return 0, fmt.Errorf("backfill job %q: %w", r.Job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("backfill job %q: %w", r.Job, err)
	}
	return seq, nil
}

// pendingBackfillSQL: the occurrences not ended of requests not expired.
const pendingBackfillSQL = `studio_backfill b JOIN studio_request q ON q.seq = b.request_seq
WHERE b.done_at IS NULL AND q.expires_at > now()`

// PendingBackfills returns which of jobIDs have a backfill occurrence
// waiting (not claimed, of a request not expired), leaving out paused
// jobs: a paused job runs no backfill, and the replicas need not ask.
func PendingBackfills(ctx context.Context, q Querier, jobIDs []string) ([]string, error) {
	if len(jobIDs) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT DISTINCT b.job_id FROM `+pendingBackfillSQL+` AND b.claimed_at IS NULL AND b.job_id = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM studio_job_setting s WHERE s.job_id = b.job_id AND s.paused)`, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("read pending backfills: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read pending backfills: %w", err)
	}
	return out, nil
}

// Backfills is a replica's side of the backfill occurrences: claim the
// oldest, give it back, end it (runner.Backfills).
type Backfills struct {
	q       Querier
	replica string
}

// NewBackfills returns replica's side of the backfill occurrences.
func NewBackfills(q Querier, replica string) *Backfills { return &Backfills{q: q, replica: replica} }

// BackfillFlushWait bounds how long a claim waits for the run row of the
// job's last run that ended (studio_job_schedule.last_seq) to be written:
// the run store writes its rows in batches (FlushEvery), so the row of a
// live run that ended just before the claim took the lock may not be in
// studio_job_run yet, and its occurrence would look not run. Past the
// bound the replica that ran it is taken to have died with the row.
const BackfillFlushWait = 30 * time.Second

// claimWaitSQL: the job's last run that ended (its end is written to the
// shared schedule before its unlock, so it is there when the lock is
// held) has no run row yet, and ended within BackfillFlushWait.
const claimWaitSQL = `SELECT EXISTS (SELECT 1 FROM studio_job_schedule s
WHERE s.job_id = $1 AND s.last_seq IS NOT NULL AND s.last_ended_at > now() - make_interval(secs => $2::float8)
  AND NOT EXISTS (SELECT 1 FROM studio_job_run r WHERE r.seq = s.last_seq))`

// claimNextSQL takes the oldest pending occurrence of a job, or ends it as
// left out when it was asked for without --again and ran meanwhile: a
// run of the job that is not a trigger's (a live run, a catch-up's, a
// backfill's) with a nominal time in its slot, or another backfill
// occurrence of it that ran (ended, not abandoned nor left out: its run
// row may not be written yet). Runs start at or after their nominal time
// (a minute's margin for the replicas' clocks), which bounds the scan to
// the job's runs since the occurrence (studio_job_run_job_started).
const claimNextSQL = `
WITH next AS (
  SELECT b.request_seq, b.nominal_at, NOT b.again AND (
      EXISTS (SELECT 1 FROM studio_job_run r
              WHERE r.job_id = $1 AND NOT r.triggered AND r.started_at >= b.nominal_at - interval '1 minute'
                AND r.nominal_at >= b.nominal_at
                AND r.nominal_at < coalesce(b.slot_until, b.nominal_at + interval '1 microsecond'))
   OR EXISTS (SELECT 1 FROM studio_backfill o
              WHERE o.job_id = $1 AND o.done_at IS NOT NULL AND o.outcome NOT IN ('abandoned', 'left_out')
                AND o.nominal_at >= b.nominal_at
                AND o.nominal_at < coalesce(b.slot_until, b.nominal_at + interval '1 microsecond'))) AS left_out
  FROM ` + pendingBackfillSQL + ` AND b.job_id = $1 AND b.claimed_at IS NULL
  ORDER BY b.nominal_at, b.request_seq LIMIT 1
  FOR UPDATE OF b SKIP LOCKED
)
UPDATE studio_backfill b SET claimed_by = $2, claimed_at = now(),
  done_at = CASE WHEN next.left_out THEN now() END,
  outcome = CASE WHEN next.left_out THEN 'left_out' END
FROM next WHERE b.request_seq = next.request_seq AND b.nominal_at = next.nominal_at AND b.claimed_at IS NULL
RETURNING b.request_seq, b.nominal_at, next.left_out`

// closeRequestsSQL marks done the job's backfill requests with nothing
// left to run (their last occurrences abandoned or left out by a claim).
const closeRequestsSQL = `UPDATE studio_request q SET done_at = now(), done_by = $2
WHERE q.kind = 'job.backfill' AND q.target = $1 AND q.done_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM studio_backfill o WHERE o.request_seq = q.seq AND o.done_at IS NULL)`

// Claim takes the oldest pending occurrence of job. The caller holds the
// job's lock, so no other replica claims or runs one meanwhile, nor a live
// run: an occurrence claimed and not ended is one whose run never ended
// (its replica died, or it lost the lock), and is ended as abandoned,
// never run twice. An occurrence asked for without --again that ran since
// the request (claimNextSQL) is ended as left out, and the next is taken.
// While the row of the job's last run is not written yet (a live run
// that ended just before, BackfillFlushWait) it claims nothing: the
// caller asks again. A request left with nothing to run is marked done.
// ok is false when nothing is claimed. One transaction.
func (b *Backfills) Claim(ctx context.Context, job string) (jobs.BackfillClaim, bool, error) {
	fail := func(err error) (jobs.BackfillClaim, bool, error) {
		return jobs.BackfillClaim{}, false, fmt.Errorf("claim a backfill occurrence of job %q: %w", job, err)
	}
	tx, err := b.q.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `UPDATE studio_backfill SET done_at = now(), outcome = 'abandoned'
WHERE job_id = $1 AND done_at IS NULL AND claimed_at IS NOT NULL`, job); err != nil {
		return fail(err)
	}
	var wait bool
	if err := tx.QueryRow(ctx, claimWaitSQL, job, BackfillFlushWait.Seconds()).Scan(&wait); err != nil {
		return fail(err)
	}
	var c jobs.BackfillClaim
	ok := false
	for !wait && !ok {
		var leftOut bool
		err := tx.QueryRow(ctx, claimNextSQL, job, b.replica).Scan(&c.RequestSeq, &c.NominalAt, &leftOut)
		if err == pgx.ErrNoRows {
			break
		}
		if err != nil {
			return fail(err)
		}
		ok = !leftOut
	}
	if _, err := tx.Exec(ctx, closeRequestsSQL, job, b.replica); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	if !ok {
		return jobs.BackfillClaim{}, false, nil
	}
	c.JobID, c.NominalAt = job, c.NominalAt.UTC()
	return c, true, nil
}

// Release gives a claimed occurrence back (its run could not begin).
func (b *Backfills) Release(ctx context.Context, c jobs.BackfillClaim) error {
	_, err := b.q.Exec(ctx, `UPDATE studio_backfill SET claimed_by = NULL, claimed_at = NULL
WHERE request_seq = $1 AND nominal_at = $2 AND done_at IS NULL AND claimed_by = $3`, c.RequestSeq, c.NominalAt, b.replica)
	if err != nil {
		return fmt.Errorf("give back a backfill occurrence of job %q: %w", c.JobID, err)
	}
	return nil
}

// End records the end of a claimed occurrence's run, marks its request
// done when it was the request's last, and says whether another
// occurrence of the job is pending.
func (b *Backfills) End(ctx context.Context, c jobs.BackfillClaim, runSeq int64, outcome jobs.Outcome) (bool, error) {
	// One statement: the end, the request's end when nothing of it is left
	// (the CTE's update is not visible to the NOT EXISTS, so its own row
	// is left out by hand), and what is pending.
	var more bool
	err := b.q.QueryRow(ctx, `
WITH ended AS (
  UPDATE studio_backfill SET done_at = now(), outcome = $4, run_seq = $5
  WHERE request_seq = $1 AND nominal_at = $2 AND done_at IS NULL AND claimed_by = $3
  RETURNING request_seq
), request AS (
  UPDATE studio_request q SET done_at = now(), done_by = $3
  FROM ended
  WHERE q.seq = ended.request_seq AND q.done_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM studio_backfill o WHERE o.request_seq = $1 AND o.done_at IS NULL AND o.nominal_at <> $2)
)
SELECT EXISTS (SELECT 1 FROM `+pendingBackfillSQL+` AND b.job_id = $6 AND b.claimed_at IS NULL)`,
		c.RequestSeq, c.NominalAt, b.replica, string(outcome), runSeq, c.JobID).Scan(&more)
	if err != nil {
		return false, fmt.Errorf("end a backfill occurrence of job %q: %w", c.JobID, err)
	}
	return more, nil
}
