package jobstore

// The read side of occurrences (issue 22, migrations/00010_occurrences.sql):
// what `jobs occurrences`, `jobs why`, `jobs list`/`status`, /v1/jobs and
// the status page show of the times a job fell due. Everything reads the
// studio_occurrences view or, where a query must stay an index probe per
// job, its two tables directly with the view's rules.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
)

// OccurrenceWindow is the window of the skip and miss counts of jobs list,
// jobs status, /v1/jobs and the page (skipped_24h, missed_24h).
const OccurrenceWindow = 24 * time.Hour

// OccurrenceView is one row of studio_occurrences: a time a job fell due
// and what became of it.
type OccurrenceView struct {
	JobID    string
	ScopeKey string
	// NominalAt is the due time (of a missed/down stretch, the first).
	NominalAt time.Time
	Outcome   string // jobs.OccurrenceRan, …Skipped, …Missed
	Reason    string // "" for ran
	// ReplicaID ran it, recorded the skip or miss, or (missed/lost) ran
	// the run that did not end; "" when none is recorded.
	ReplicaID string
	Seq       *int64 // the run (ran, missed/lost)
	// RunOutcome is the run's own outcome (succeeded, failed, running…).
	RunOutcome      string
	StartedAt       *time.Time
	FinishedAt      *time.Time
	LatenessSeconds *float64
	Holder          *string // held-elsewhere: the lock's locked_by
	HolderKnown     *bool   // held-elsewhere: whether the holder is a registered replica
	PausedBy        *string // paused: who paused the job
	Count           int     // missed/down: due times in the stretch; else 1
	LastNominalAt   *time.Time
	Triggered       bool
	// Backfill: a run of a jobs backfill occurrence (migrations/00016).
	Backfill   bool
	RecordedAt time.Time
}

// Last is the last due time the occurrence stands for: LastNominalAt of a
// stretch, else NominalAt.
func (o OccurrenceView) Last() time.Time {
	if o.LastNominalAt != nil {
		return *o.LastNominalAt
	}
	return o.NominalAt
}

// Key is the occurrence key (jobs.OccurrenceKey).
func (o OccurrenceView) Key() string { return jobs.OccurrenceKey(o.JobID, o.ScopeKey, o.NominalAt) }

// occurrenceColumnsSQL are the view's columns, in scanOccurrence's order.
const occurrenceColumnsSQL = `job_id, scope_key, nominal_at, outcome, coalesce(reason, ''), coalesce(replica_id, ''), seq,
  coalesce(run_outcome, ''), started_at, finished_at, lateness_seconds, holder, holder_known, paused_by, count,
  last_nominal_at, triggered, recorded_at, backfill`

func scanOccurrence(row pgx.Row) (OccurrenceView, error) {
	var o OccurrenceView
	err := row.Scan(&o.JobID, &o.ScopeKey, &o.NominalAt, &o.Outcome, &o.Reason, &o.ReplicaID, &o.Seq,
		&o.RunOutcome, &o.StartedAt, &o.FinishedAt, &o.LatenessSeconds, &o.Holder, &o.HolderKnown, &o.PausedBy, &o.Count,
		&o.LastNominalAt, &o.Triggered, &o.RecordedAt, &o.Backfill)
	if err != nil {
		return OccurrenceView{}, err
	}
	o.NominalAt, o.RecordedAt = o.NominalAt.UTC(), o.RecordedAt.UTC()
	o.StartedAt, o.FinishedAt, o.LastNominalAt = utcPtr(o.StartedAt), utcPtr(o.FinishedAt), utcPtr(o.LastNominalAt)
	return o, nil
}

// OccurrenceQuery selects occurrences for ListOccurrences.
type OccurrenceQuery struct {
	Job string
	// Since, when not zero, keeps the occurrences whose last due time is
	// at or after it.
	Since time.Time
	// SinceAgo, when not zero (and Since is), keeps those whose last due
	// time is within it back from database now.
	SinceAgo time.Duration
	// Scope, when not nil, keeps one scope key ("" is an installation
	// job's).
	Scope *string
	// Limit bounds the rows (at least 1).
	Limit int
}

// finiteOccurrenceSQL keeps the occurrences whose due times are finite:
// no replica writes 'infinity' or '-infinity' (a hostile or corrupt row),
// and one such row failed jobs occurrences and jobs why for its job (a
// time.Time cannot hold it; --at's distance cannot subtract it). Such a
// row is left out, as the status reads leave out infinite times.
const finiteOccurrenceSQL = `isfinite(nominal_at) AND (last_nominal_at IS NULL OR isfinite(last_nominal_at))`

// ListOccurrences returns a job's occurrences newest first (by nominal
// time, then scope key and seq). The view's two branches are each read
// through an index on job_id (studio_job_run_job_started, the UNIQUE
// (job_id, scope_key, nominal_at) of studio_occurrence); what a job keeps
// is bounded by the history's retention, so the sort is of one job's rows.
func ListOccurrences(ctx context.Context, q Querier, oq OccurrenceQuery) ([]OccurrenceView, error) {
	var since *time.Time
	var ago *float64
	switch {
	case !oq.Since.IsZero():
		since = &oq.Since
	case oq.SinceAgo > 0:
		s := oq.SinceAgo.Seconds()
		ago = &s
	}
	rows, err := q.Query(ctx, `SELECT `+occurrenceColumnsSQL+` FROM studio_occurrences
WHERE job_id = $1 AND `+finiteOccurrenceSQL+`
  AND ($2::timestamptz IS NULL OR coalesce(last_nominal_at, nominal_at) >= $2)
  AND ($5::double precision IS NULL OR coalesce(last_nominal_at, nominal_at) >= now() - make_interval(secs => $5))
  AND ($3::text IS NULL OR scope_key = $3)
ORDER BY nominal_at DESC, scope_key, seq DESC NULLS LAST LIMIT $4`, oq.Job, since, oq.Scope, oq.Limit, ago)
	if err != nil {
		return nil, fmt.Errorf("read occurrences of job %q: %w", oq.Job, err)
	}
	defer rows.Close()
	var out []OccurrenceView
	for rows.Next() {
		o, err := scanOccurrence(rows)
		if err != nil {
			return nil, fmt.Errorf("read occurrences of job %q: %w", oq.Job, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read occurrences of job %q: %w", oq.Job, err)
	}
	return out, nil
}

// KnownOccurrences is Known, counting a job that has only occurrence rows
// (its status rows forgotten, its runs gone) as known too.
func KnownOccurrences(ctx context.Context, q Querier, job string) error {
	err := Known(ctx, q, job)
	if !errors.Is(err, ErrUnknownJob) {
		return err
	}
	var ok bool
	if qerr := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_occurrence WHERE job_id = $1)`, job).Scan(&ok); qerr != nil {
		return fmt.Errorf("look up job %q: %w", job, qerr)
	}
	if ok {
		return nil
	}
	return err
}

// ErrNoOccurrence: the job is known but has no occurrence recorded (none
// yet, or none in the range asked). It is a not-found error: errors.Is
// matches ErrUnknownRun too, so the CLI exits 4.
var ErrNoOccurrence error = notFoundError("no occurrence recorded")

type notFoundError string

func (e notFoundError) Error() string        { return string(e) }
func (e notFoundError) Is(target error) bool { return target == ErrUnknownRun }

// NearestOccurrence returns the occurrence of job nearest to at (a stretch
// holding at is at distance 0; a tie goes to the later one), or with a
// zero at the last one that fell due (the greatest last due time at or
// before database now). scope nil: any scope key; else that one ("" is an
// installation job's). A job with none is ErrNoOccurrence; an unknown job
// ErrUnknownJob.
func NearestOccurrence(ctx context.Context, q Querier, job string, scope *string, at time.Time) (OccurrenceView, error) {
	var row pgx.Row
	if at.IsZero() {
		row = q.QueryRow(ctx, `SELECT `+occurrenceColumnsSQL+` FROM studio_occurrences
WHERE job_id = $1 AND ($2::text IS NULL OR scope_key = $2) AND nominal_at <= now() AND `+finiteOccurrenceSQL+`
ORDER BY least(coalesce(last_nominal_at, nominal_at), now()) DESC, nominal_at DESC, scope_key, seq DESC NULLS LAST LIMIT 1`, job, scope)
	} else {
		row = q.QueryRow(ctx, `SELECT `+occurrenceColumnsSQL+` FROM studio_occurrences
WHERE job_id = $1 AND ($2::text IS NULL OR scope_key = $2) AND `+finiteOccurrenceSQL+`
ORDER BY CASE WHEN $3::timestamptz BETWEEN nominal_at AND coalesce(last_nominal_at, nominal_at) THEN 0
  ELSE least(abs(extract(epoch FROM nominal_at - $3::timestamptz)),
             abs(extract(epoch FROM coalesce(last_nominal_at, nominal_at) - $3::timestamptz))) END,
  nominal_at DESC, scope_key, seq DESC NULLS LAST LIMIT 1`, job, scope, at)
	}
	o, err := scanOccurrence(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if kerr := KnownOccurrences(ctx, q, job); kerr != nil {
			return OccurrenceView{}, kerr
		}
		if scope != nil {
			return OccurrenceView{}, fmt.Errorf("job %q: %w for scope key %q (jobs occurrences %s lists the scope keys it has)", job, ErrNoOccurrence, *scope, job)
		}
		return OccurrenceView{}, fmt.Errorf("job %q: %w yet (its runs before the upgrade to occurrences carry no due time; the first due time after it is recorded)", job, ErrNoOccurrence)
	case err != nil:
		return OccurrenceView{}, fmt.Errorf("read occurrence of job %q: %w", job, err)
	}
	return o, nil
}

// ReplicaTrace is a replica's registry row as evidence: when it started,
// its last heartbeat, its stop and its last crash, and whether it hosts
// the job (has a status row of it).
type ReplicaTrace struct {
	ID          string
	State       string
	Live        bool
	Hosts       bool
	StartedAt   time.Time
	HeartbeatAt time.Time
	StoppedAt   *time.Time
	LastCrashAt *time.Time
}

// LiveAt says whether the row shows the replica live at t: started by then
// and heartbeating within liveness.GoneAfter of it (of its current
// incarnation; an earlier one is known only by LastCrashAt).
func (r ReplicaTrace) LiveAt(t time.Time) bool {
	if r.StartedAt.After(t) {
		return false
	}
	if r.StoppedAt != nil && !r.StoppedAt.After(t) {
		return false
	}
	return !r.HeartbeatAt.Before(t.Add(-liveness.GoneAfter))
}

// PauseRecord is the audited pause in force at an occurrence.
type PauseRecord struct {
	Actor  string
	At     time.Time
	Reason string
	// Until is the end the pause was given (jobs pause --for/--until;
	// nil: none).
	Until *time.Time
}

// OccurrenceEvidence is what `jobs why` tells besides the occurrence.
type OccurrenceEvidence struct {
	// Now is database time.
	Now time.Time
	// Run is the occurrence's run (ran, missed/lost), with its error.
	Run *jobs.Run
	// Pause is the last jobs.pause audited for the job at or before the
	// due time (paused); StillPaused whether the setting is paused now,
	// Resumed whether a setting row records the job as not paused now (a
	// job without a setting row is neither).
	Pause       *PauseRecord
	StillPaused bool
	Resumed     bool
	// PausedUntil is the end of the pause in force now (StillPaused; nil:
	// none). EndedByItself: the job is no longer paused because its
	// pause's end passed (the resume written at the end, or not yet).
	PausedUntil   *time.Time
	EndedByItself bool
	// Replicas are the registered replicas, those that host the job first
	// (missed/down, missed/lost, held-elsewhere).
	Replicas []ReplicaTrace
}

// Replica returns the trace of replica id, if registered.
func (e OccurrenceEvidence) Replica(id string) (ReplicaTrace, bool) {
	for _, r := range e.Replicas {
		if r.ID == id {
			return r, true
		}
	}
	return ReplicaTrace{}, false
}

// OccurrenceWhy returns the occurrence of job nearest to at (zero: the
// last that fell due; scope "" any scope) and the evidence `jobs why`
// tells: the run, the pause, the replicas.
func OccurrenceWhy(ctx context.Context, q Querier, job string, scope *string, at time.Time) (OccurrenceView, OccurrenceEvidence, error) {
	o, err := NearestOccurrence(ctx, q, job, scope, at)
	if err != nil {
		return OccurrenceView{}, OccurrenceEvidence{}, err
	}
	var ev OccurrenceEvidence
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&ev.Now); err != nil {
		return o, ev, fmt.Errorf("read database time: %w", err)
	}
	ev.Now = ev.Now.UTC()
	if o.Seq != nil {
		r, err := scanRun(q.QueryRow(ctx, `SELECT `+runColumnsSQL+` FROM studio_job_run WHERE seq = $1`, *o.Seq))
		switch {
		case err == nil:
			ev.Run = &r
		case !errors.Is(err, pgx.ErrNoRows):
			return o, ev, fmt.Errorf("read run %d of job %q: %w", *o.Seq, job, err)
		}
	}
	if o.Reason == jobs.ReasonPaused {
		var p PauseRecord
		err := q.QueryRow(ctx, `SELECT actor, at, reason,
  CASE WHEN detail->>'paused_until_after' IS NOT NULL THEN (detail->>'paused_until_after')::timestamptz END
FROM studio_audit
WHERE target = $1 AND action = 'jobs.pause' AND at <= $2 ORDER BY at DESC, seq DESC LIMIT 1`, job, o.NominalAt).Scan(&p.Actor, &p.At, &p.Reason, &p.Until)
		switch {
		case err == nil:
			p.At = p.At.UTC()
			p.Until = utcPtr(p.Until)
			ev.Pause = &p
		case !errors.Is(err, pgx.ErrNoRows):
			return o, ev, fmt.Errorf("read pause of job %q: %w", job, err)
		}
		if err := pauseNow(ctx, q, job, &ev); err != nil {
			return o, ev, err
		}
	}
	rows, err := q.Query(ctx, `SELECT r.id, r.state, `+liveness.LiveSQL("r")+`,
  EXISTS (SELECT 1 FROM studio_job_status s WHERE s.replica_id = r.id AND `+jobRowsSQL("s", 1)+`),
  r.started_at, r.heartbeat_at, r.stopped_at, r.last_crash_at
FROM studio_replica r`, job)
	if err != nil {
		return o, ev, fmt.Errorf("read replicas: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t ReplicaTrace
		if err := rows.Scan(&t.ID, &t.State, &t.Live, &t.Hosts, &t.StartedAt, &t.HeartbeatAt, &t.StoppedAt, &t.LastCrashAt); err != nil {
			return o, ev, fmt.Errorf("read replicas: %w", err)
		}
		t.StartedAt, t.HeartbeatAt = t.StartedAt.UTC(), t.HeartbeatAt.UTC()
		t.StoppedAt, t.LastCrashAt = utcPtr(t.StoppedAt), utcPtr(t.LastCrashAt)
		ev.Replicas = append(ev.Replicas, t)
	}
	if err := rows.Err(); err != nil {
		return o, ev, fmt.Errorf("read replicas: %w", err)
	}
	// Hosts first, then by id in natural order.
	slices.SortStableFunc(ev.Replicas, func(a, b ReplicaTrace) int {
		if a.Hosts != b.Hosts {
			if a.Hosts {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return o, ev, nil
}

// LastOccurrence is a job's newest occurrence, as jobs list shows it.
type LastOccurrence struct {
	Outcome   string
	Reason    string
	NominalAt time.Time
}

// OccurrenceSummary is what jobs list, jobs status, /v1/jobs and the page
// show of a job's occurrences: the newest, and the skips and misses of the
// last OccurrenceWindow (a missed/down stretch counts its count; one that
// ends in the window counts whole; a run lost counts one).
type OccurrenceSummary struct {
	Last       *LastOccurrence
	Skipped24h int64
	Missed24h  int64
}

// lostRunSQL is the view's rule for a run that is missed/lost, on the
// studio_job_run row aliased r: it lost its lock, was interrupted, or is
// marked running while its replica is not live.
var lostRunSQL = `(r.outcome IN ('lock_lost', 'interrupted', 'running') AND (r.outcome <> 'running' OR NOT EXISTS (
  SELECT 1 FROM studio_replica p WHERE p.id = r.replica_id AND ` + liveness.LiveSQL("p") + `)))`

// occurrenceSummarySQL reads the summary of many views in one statement:
// $1 the view ids, $2 their job ids, $3 their scope keys (NULL for an
// instance job: the keys are then the replicas with a status row of it),
// $4 the run filter of a duty (its cluster, else NULL), $5 the window in
// seconds. The skips and misses of the window are read once for every job
// (win: the rows recorded in the window, through the BRIN index on
// recorded_at, grouped by job and scope key, joined to the views by hash);
// the rest is a handful of index probes per view, never a scan: the newest
// run through studio_job_run_job_started (job_id, started_at DESC), the
// newest skip or miss, and a stretch that began before the window and ends
// in it, through the UNIQUE (job_id, scope_key, nominal_at) of
// studio_occurrence, one probe per scope key; the lost runs of the window
// again through (job_id, started_at DESC).
//
// A stretch (missed/down, or a paused or overrun part of the start's
// account) is last due at its last_nominal_at, not at its first due time.
//
// The newest run is looked for among the job's newest 16 runs, read
// newest first without a filter (a filter there makes the planner read
// and sort all of them): a duty whose newest run is not among its job's
// newest 16 (a per-cluster job with many clusters) shows its
// newest skip or miss instead.
var occurrenceSummarySQL = `
WITH vk AS MATERIALIZED (
  SELECT v.id, v.job, v.cluster,
         CASE WHEN v.scope IS NOT NULL THEN ARRAY[v.scope]
           ELSE ARRAY(SELECT DISTINCT s.replica_id FROM studio_job_status s WHERE s.job_id = v.job) END AS keys
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS v(id, job, scope, cluster)),
win AS MATERIALIZED (
  SELECT o.job_id, o.scope_key, sum(o.count) FILTER (WHERE o.outcome = 'skipped') AS skipped,
         sum(o.count) FILTER (WHERE o.outcome = 'missed') AS missed
  FROM studio_occurrence o
  WHERE o.recorded_at > now() - make_interval(secs => $5 + ` + recordedSlackSeconds + `)
    AND o.nominal_at > now() - make_interval(secs => $5) AND o.nominal_at <= now()
  GROUP BY o.job_id, o.scope_key),
w AS (
  SELECT vk.id, sum(win.skipped) AS skipped, sum(win.missed) AS missed
  FROM vk JOIN win ON win.job_id = vk.job AND win.scope_key = ANY(vk.keys)
  GROUP BY vk.id)
SELECT vk.id, last.nominal_at, last.outcome, last.reason,
       coalesce(w.skipped, 0), coalesce(w.missed, 0) + coalesce(b.missed, 0) + coalesce(l.lost, 0)
FROM vk
LEFT JOIN w ON w.id = vk.id
LEFT JOIN LATERAL (
  SELECT x.nominal_at, x.outcome, x.reason FROM (
    (SELECT r.nominal_at, CASE WHEN ` + lostRunSQL + ` THEN 'missed' ELSE 'ran' END AS outcome,
            CASE WHEN ` + lostRunSQL + ` THEN 'lost' END AS reason
     FROM (SELECT r0.* FROM studio_job_run r0 WHERE r0.job_id = vk.job ORDER BY r0.started_at DESC LIMIT 16) r
     WHERE r.nominal_at IS NOT NULL AND isfinite(r.nominal_at) AND r.nominal_at <= now() + ` + lastDueSlackSQL + `
       AND r.cluster IS NOT DISTINCT FROM vk.cluster
     LIMIT 1)
    UNION ALL
    SELECT CASE WHEN isfinite(o.last_nominal_at) AND o.last_nominal_at <= now() + ` + lastDueSlackSQL + `
             THEN o.last_nominal_at ELSE o.nominal_at END, o.outcome, o.reason
    FROM unnest(vk.keys) AS sk(key)
    CROSS JOIN LATERAL (SELECT o.nominal_at, o.last_nominal_at, o.outcome, o.reason FROM studio_occurrence o
      WHERE o.job_id = vk.job AND o.scope_key = sk.key AND isfinite(o.nominal_at) AND o.nominal_at <= now() + ` + lastDueSlackSQL + `
      ORDER BY o.nominal_at DESC LIMIT 1) o
  ) x ORDER BY x.nominal_at DESC LIMIT 1) last ON true
LEFT JOIN LATERAL (
  SELECT sum(o.count) AS missed
  FROM unnest(vk.keys) AS sk(key)
  CROSS JOIN LATERAL (SELECT o.outcome, o.reason, o.count, o.last_nominal_at FROM studio_occurrence o
    WHERE o.job_id = vk.job AND o.scope_key = sk.key AND o.nominal_at <= now() - make_interval(secs => $5)
    ORDER BY o.nominal_at DESC LIMIT 1) o
  WHERE o.outcome = 'missed' AND o.reason = 'down' AND o.last_nominal_at > now() - make_interval(secs => $5)) b ON true
LEFT JOIN LATERAL (
  SELECT count(*) AS lost FROM studio_job_run r
  WHERE r.job_id = vk.job AND r.started_at > now() - make_interval(secs => $5) AND r.nominal_at > now() - make_interval(secs => $5)
    AND r.cluster IS NOT DISTINCT FROM vk.cluster AND ` + lostRunSQL + `) l ON true`

// lastDueSlackSQL bounds the last occurrence of a summary to the due times
// that have come (as jobs why's default), with a minute for a replica
// whose estimate of database time is ahead: a row due far in the future
// (no replica writes one: a hostile or corrupt row, year 9999) was the
// job's LAST DUE for ever.
const lastDueSlackSQL = "interval '1 minute'"

// recordedSlackSeconds widens the recorded_at bound of the window's skips
// and misses: a skip or miss is recorded when its due time comes or later
// (recorded_at >= nominal_at, both database time), so the rows whose due
// time is in the window were recorded in it; the slack covers a replica
// whose estimate of database time is a little ahead.
const recordedSlackSeconds = "60"

// OccurrenceSummaries reads the summaries of views (by View.ID) in one
// statement.
func OccurrenceSummaries(ctx context.Context, q Querier, views []View) (map[string]OccurrenceSummary, error) {
	out := make(map[string]OccurrenceSummary, len(views))
	if len(views) == 0 {
		return out, nil
	}
	ids, jobIDs, scopes, clusters := occurrenceSummaryArgs(views)
	// Without JIT: the statement's estimated cost (a probe per job) passes
	// jit_above_cost at a few thousand jobs, and compiling it took 2 s of
	// 3 at 10,000 (BenchmarkOccurrenceSummaries10k) for a plan that runs
	// in a fraction of that. SET LOCAL ends with the transaction (inside
	// a caller's transaction, with the caller's: the page's read-only
	// snapshot).
	tx, err := q.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read occurrence summaries: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return nil, fmt.Errorf("read occurrence summaries: %w", err)
	}
	rows, err := tx.Query(ctx, occurrenceSummarySQL, ids, jobIDs, scopes, clusters, OccurrenceWindow.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read occurrence summaries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var at *time.Time
		var outcome, reason *string
		var s OccurrenceSummary
		if err := rows.Scan(&id, optTimeScanner{&at}, &outcome, &reason, &s.Skipped24h, &s.Missed24h); err != nil {
			return nil, fmt.Errorf("read occurrence summaries: %w", err)
		}
		if at != nil && outcome != nil {
			s.Last = &LastOccurrence{Outcome: *outcome, NominalAt: at.UTC()}
			if reason != nil {
				s.Last.Reason = *reason
			}
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read occurrence summaries: %w", err)
	}
	return out, nil
}

// occurrenceSummaryArgs are occurrenceSummarySQL's $1 to $4 for views.
func occurrenceSummaryArgs(views []View) (ids, jobIDs []string, scopes, clusters []*string) {
	ids = make([]string, 0, len(views))
	jobIDs = make([]string, 0, len(views))
	scopes = make([]*string, 0, len(views))
	clusters = make([]*string, 0, len(views))
	for _, v := range views {
		k, duty := jobs.ParseDutyKey(v.ID)
		cluster := k.Cluster
		ids, jobIDs = append(ids, v.ID), append(jobIDs, k.Job)
		switch {
		case duty:
			scopes, clusters = append(scopes, &cluster), append(clusters, &cluster)
		case v.Scope == jobs.ScopeInstallation:
			empty := ""
			scopes, clusters = append(scopes, &empty), append(clusters, nil)
		default:
			scopes, clusters = append(scopes, nil), append(clusters, nil)
		}
	}
	return ids, jobIDs, scopes, clusters
}

// AddOccurrenceSummaries fills the Occurrences of every view (one
// statement).
func AddOccurrenceSummaries(ctx context.Context, q Querier, views []View) error {
	sums, err := OccurrenceSummaries(ctx, q, views)
	if err != nil {
		return err
	}
	for i := range views {
		s := sums[views[i].ID]
		views[i].Occurrences = &s
	}
	return nil
}
