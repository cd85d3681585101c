package jobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/natsort"
)

// ReplicaStatus is one replica's status row of a job, with whether that
// replica is live now.
type ReplicaStatus struct {
	jobs.Status
	Live bool
}

// ReadStatus returns the status rows (of job, or of every job when job is
// ""), with replica liveness and database now. The rows of a per-cluster
// job are its duties' (job@cluster): job reads them all, job@cluster one
// duty's.
func ReadStatus(ctx context.Context, q Querier, job string) ([]ReplicaStatus, time.Time, error) {
	// One statement: the rows, each replica's liveness, and database now.
	sql := `SELECT ` + statusColumns + `, ` + liveness.LiveSQL("r") + `, now()
FROM studio_job_status s LEFT JOIN studio_replica r ON r.id = s.replica_id`
	args := []any{}
	switch {
	case isDutyKey(job):
		sql += ` WHERE s.job_id = $1`
		args = append(args, job)
	case job != "":
		sql += ` WHERE ` + jobRowsSQL("s", 1)
		args = append(args, job)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read job status: %w", err)
	}
	defer rows.Close()
	var out []ReplicaStatus
	var live bool
	var now time.Time
	err = scanStatus(rows, []any{&live, &now}, func(st jobs.Status) {
		out = append(out, ReplicaStatus{Status: st, Live: live})
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	if now.IsZero() {
		// No rows: still answer with database time.
		if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return nil, time.Time{}, fmt.Errorf("read database time: %w", err)
		}
	}
	// By job, then replica, in natural order (c2 before c10), which
	// ORDER BY cannot give.
	slices.SortFunc(out, func(a, b ReplicaStatus) int {
		return cmp.Or(natsort.Compare(a.JobID, b.JobID), natsort.Compare(a.ReplicaID, b.ReplicaID))
	})
	return out, now.UTC(), nil
}

// View is a job merged across the live replicas that host it: the latest
// run wherever it happened, summed counters, and the health of the whole.
type View struct {
	ID               string
	Scope            jobs.Scope
	Schedule         string
	Health           jobs.Health
	LastOutcome      jobs.Outcome
	LastError        string
	LastStartedAt    *time.Time
	LastFinishedAt   *time.Time
	LastReplica      string
	NextFireAt       *time.Time
	Runs             int64
	Failures         int64
	Timeouts         int64
	LockLost         int64
	Overruns         int64
	SkippedElsewhere int64
	InvalidSchedule  string
	Paused           bool
	// Pause is who paused the job, why and until when, from its setting
	// (AddPauses); nil when not read or not paused.
	Pause    *PauseView
	Replicas int // live replicas reporting it
	// Occurrences is the newest occurrence and the skips and misses of the
	// last 24 h (AddOccurrenceSummaries); nil when not read.
	Occurrences *OccurrenceSummary
	// Drift: the live replicas' definitions of the job disagree (AddDrift,
	// definitions.go); false when not read.
	Drift bool
}

// Merge builds one View per job from status rows. Rows of replicas that are
// not live are used only when no live replica reports the job (so a job
// whose every replica is gone still shows its last state); such a job's
// health is retired, never stalled or failing.
func Merge(rows []ReplicaStatus, now time.Time) []View {
	byJob := map[string][]ReplicaStatus{}
	for _, r := range rows {
		byJob[r.JobID] = append(byJob[r.JobID], r)
	}
	out := make([]View, 0, len(byJob))
	for id, rs := range byJob {
		use := rs[:0:0]
		for _, r := range rs {
			if r.Live {
				use = append(use, r)
			}
		}
		if len(use) == 0 {
			use = rs
		}
		v := View{ID: id, Scope: use[0].Scope, Schedule: use[0].Schedule}
		var merged jobs.Status
		// lastDone is the outcome that judges health: the newest start's,
		// or, while that run goes on, the newest finish's (doneAt) among
		// the rows in use. A replica running the job now may never have
		// finished it, or finished it before another replica's later
		// failure: its own row's outcome is not the job's last.
		var lastDone, finishedOutcome jobs.Outcome
		var doneAt *time.Time
		merged.Schedule, merged.Scope = v.Schedule, v.Scope
		for _, r := range use {
			if r.Live {
				v.Replicas++
			}
			v.Runs += r.Runs
			v.Failures += r.Failures
			v.Timeouts += r.Timeouts
			v.LockLost += r.LockLost
			v.Overruns += r.Overruns
			v.SkippedElsewhere += r.SkippedElsewhere
			v.Paused = v.Paused || r.Paused
			if r.Running && r.LastStartedAt != nil && (merged.LastStartedAt == nil || r.LastStartedAt.After(*merged.LastStartedAt)) {
				// A run in progress within its timeout is not stalled.
				merged.Running, merged.LastStartedAt, merged.Timeout = true, r.LastStartedAt, r.Timeout
			}
			if r.InvalidSchedule != "" {
				v.InvalidSchedule = r.InvalidSchedule
			}
			if r.Live && r.NextFireAt != nil && (v.NextFireAt == nil || r.NextFireAt.Before(*v.NextFireAt)) {
				v.NextFireAt = r.NextFireAt
			}
			if r.LastFinishedAt != nil && r.LastOutcome != "" && (doneAt == nil || r.LastFinishedAt.After(*doneAt)) {
				doneAt, finishedOutcome = r.LastFinishedAt, r.LastOutcome
			}
			if r.LastStartedAt != nil && (v.LastStartedAt == nil || r.LastStartedAt.After(*v.LastStartedAt)) {
				v.LastStartedAt, v.LastFinishedAt, v.LastReplica = r.LastStartedAt, r.LastFinishedAt, r.ReplicaID
				v.LastOutcome, v.LastError = r.LastOutcome, r.LastError
				lastDone = r.LastOutcome // the last completed outcome judges health
				if r.Running {
					v.LastOutcome = jobs.OutcomeRunning
				}
			}
		}
		// A completion counts wherever it happened, on a replica that is
		// gone since too: an installation job that ran on a replica that
		// then crashed is not stalled while a live one follows its shared
		// schedule (the live one records no run or skip of its own until
		// the next due time).
		for _, r := range rs {
			if r.LastFinishedAt != nil && (merged.LastFinishedAt == nil || r.LastFinishedAt.After(*merged.LastFinishedAt)) {
				merged.LastFinishedAt = r.LastFinishedAt
			}
			if r.LastSkippedElsewhereAt != nil && (merged.LastSkippedElsewhereAt == nil || r.LastSkippedElsewhereAt.After(*merged.LastSkippedElsewhereAt)) {
				merged.LastSkippedElsewhereAt = r.LastSkippedElsewhereAt
			}
		}
		merged.Paused, merged.InvalidSchedule = v.Paused, v.InvalidSchedule
		if v.LastOutcome == jobs.OutcomeRunning {
			lastDone = finishedOutcome
		}
		merged.LastOutcome = lastDone
		if merged.LastCompletion().IsZero() {
			// Never completed anywhere: judge from the first start, if any.
			if v.LastStartedAt != nil {
				merged.Since = *v.LastStartedAt
			}
		}
		v.Health = jobs.JudgeHealth(merged, now)
		if v.Replicas == 0 {
			// No live replica declares it: nothing is late or failing
			// now, whatever its last state says (issue 20).
			v.Health = jobs.HealthRetired
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b View) int { return natsort.Compare(a.ID, b.ID) })
	return out
}

// History returns the last limit runs of job, newest first (by start time,
// then seq), of every replica and cluster. It reads what housekeeping keeps
// (Retention): the job's newest RunsKeptPerJob runs, then its failures of
// the last FailuresKeptFor (at most FailuresKeptPerJob), and its runs still
// going, in one order; the index studio_job_run_job_started serves both.
func History(ctx context.Context, q Querier, job string, limit int) ([]jobs.Run, error) {
	rows, err := q.Query(ctx, `SELECT `+runColumnsSQL+` FROM studio_job_run WHERE job_id = $1 ORDER BY started_at DESC, seq DESC LIMIT $2`, job, limit)
	if err != nil {
		return nil, fmt.Errorf("read history of job %q: %w", job, err)
	}
	defer rows.Close()
	var out []jobs.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("read history of job %q: %w", job, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ViewJSON is the stable JSON/YAML shape of a job (jobs list, jobs status,
// the replica's /v1/jobs).
type ViewJSON struct {
	ID       string `json:"id" yaml:"id"`
	Scope    string `json:"scope" yaml:"scope"`
	Schedule string `json:"schedule" yaml:"schedule"`
	// TZ is the zone the cron fields are read in: "UTC" by default, and
	// for a fixed delay, which ignores zones (docs/schedules.md).
	TZ string `json:"tz" yaml:"tz"`
	// JitterSeconds and DeadlineSeconds are the job's jitter: and
	// deadline: in seconds, 0 when not set (docs/schedules.md, "Jitter and
	// the start deadline").
	JitterSeconds    float64    `json:"jitter_seconds" yaml:"jitter_seconds"`
	DeadlineSeconds  float64    `json:"deadline_seconds" yaml:"deadline_seconds"`
	Health           string     `json:"health" yaml:"health"`
	LastOutcome      *string    `json:"last_outcome" yaml:"last_outcome"`
	LastStartedAt    *time.Time `json:"last_started_at" yaml:"last_started_at"`
	LastFinishedAt   *time.Time `json:"last_finished_at" yaml:"last_finished_at"`
	LastReplica      *string    `json:"last_replica" yaml:"last_replica"`
	NextFireAt       *time.Time `json:"next_fire_at" yaml:"next_fire_at"`
	Runs             int64      `json:"runs" yaml:"runs"`
	Failures         int64      `json:"failures" yaml:"failures"`
	Timeouts         int64      `json:"timeouts" yaml:"timeouts"`
	LockLost         int64      `json:"lock_lost" yaml:"lock_lost"`
	Overruns         int64      `json:"overruns" yaml:"overruns"`
	SkippedElsewhere int64      `json:"skipped_elsewhere" yaml:"skipped_elsewhere"`
	// LastError is the last run's error, whole as stored (the ERROR column
	// of the wide table, which shows InvalidSchedule instead when there is
	// one); null after a success or before the first run.
	LastError       *string `json:"last_error" yaml:"last_error"`
	InvalidSchedule *string `json:"invalid_schedule" yaml:"invalid_schedule"`
	Paused          bool    `json:"paused" yaml:"paused"`
	// PausedBy, PausedReason and PausedUntil describe the pause in force
	// (docs/schedules.md, "Pause with a reason and an end"): null when the
	// job is not paused, or the pause has no reason or no end.
	PausedBy     *string    `json:"paused_by" yaml:"paused_by"`
	PausedReason *string    `json:"paused_reason" yaml:"paused_reason"`
	PausedUntil  *time.Time `json:"paused_until" yaml:"paused_until"`
	// LastOccurrence is the newest occurrence (null when none is
	// recorded); Skipped24h and Missed24h count the skips and misses of
	// the last 24 h (docs/occurrences.md).
	LastOccurrence *LastOccurrenceJSON `json:"last_occurrence" yaml:"last_occurrence"`
	Skipped24h     int64               `json:"skipped_24h" yaml:"skipped_24h"`
	Missed24h      int64               `json:"missed_24h" yaml:"missed_24h"`
	// Drift: the live replicas' definitions of the job disagree (issue 24
	// part 7, docs/schedules.md "Drift between replicas").
	Drift bool `json:"drift" yaml:"drift"`
}

// LastOccurrenceJSON is the stable shape of a job's newest occurrence.
type LastOccurrenceJSON struct {
	Outcome string  `json:"outcome" yaml:"outcome"`
	Reason  *string `json:"reason" yaml:"reason"`
	// NominalAt is written as the occurrence key writes it
	// (jobs.FormatNominal: milliseconds).
	NominalAt string `json:"nominal_at" yaml:"nominal_at"`
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// JSON renders v in its stable shape.
func (v View) JSON() ViewJSON {
	j := ViewJSON{
		ID: v.ID, Scope: string(v.Scope), Health: string(v.Health),
		LastOutcome: optString(string(v.LastOutcome)), LastStartedAt: utcPtr(v.LastStartedAt), LastFinishedAt: utcPtr(v.LastFinishedAt),
		LastReplica: optString(v.LastReplica), NextFireAt: utcPtr(v.NextFireAt),
		Runs: v.Runs, Failures: v.Failures, Timeouts: v.Timeouts, LockLost: v.LockLost, Overruns: v.Overruns,
		SkippedElsewhere: v.SkippedElsewhere, LastError: optString(v.LastError), InvalidSchedule: optString(v.InvalidSchedule), Paused: v.Paused,
	}
	j.Schedule, j.TZ = jobs.SplitZone(v.Schedule)
	_, jitter, deadline := jobs.SplitOptions(v.Schedule)
	j.JitterSeconds, j.DeadlineSeconds = jitter.Seconds(), deadline.Seconds()
	j.Drift = v.Drift
	if p := v.Pause; p != nil {
		j.PausedBy, j.PausedReason, j.PausedUntil = optString(p.By), optString(p.Reason), utcPtr(p.Until)
	}
	if o := v.Occurrences; o != nil {
		j.Skipped24h, j.Missed24h = o.Skipped24h, o.Missed24h
		if o.Last != nil {
			j.LastOccurrence = &LastOccurrenceJSON{Outcome: o.Last.Outcome, Reason: optString(o.Last.Reason), NominalAt: jobs.FormatNominal(o.Last.NominalAt)}
		}
	}
	return j
}

// ErrUnknownRun: no run with that seq, or none of that job (a not-found
// error, exit 4 in the CLI).
var ErrUnknownRun = errors.New("no such run")

// ErrNoOutput: the run stored no output: its task printed nothing, or it is
// still going (the tail is stored when it ends).
var ErrNoOutput = errors.New("no output stored")

// runColumnsSQL are the columns RunOf scans, in scanRun's order.
const runColumnsSQL = `seq, job_id, replica_id, coalesce(cluster, ''), started_at, finished_at, outcome, coalesce(error, ''), coalesce(output_tail, '')`

// RunQuery picks one run for RunOf.
type RunQuery struct {
	Job string
	// Cluster, when not "", narrows to one cluster's runs of a clusters:
	// owned job.
	Cluster string
	// Seq is the run; 0 picks the job's newest (by start time, then seq).
	Seq int64
	// Ended, with Seq 0, picks the newest run that has ended.
	Ended bool
}

// RunOf returns one run, output tail included (see RunQuery). A seq of
// another job or cluster, an unknown seq and a job without runs are
// ErrUnknownRun; a job no replica reported and without runs is
// ErrUnknownJob. The tail is what the replica stored, scrubbed of secrets
// before it was written.
func RunOf(ctx context.Context, q Querier, rq RunQuery) (jobs.Run, error) {
	job, cluster, seq := rq.Job, rq.Cluster, rq.Seq
	name := jobs.DutyKey{Job: job, Cluster: cluster}.String()
	var row pgx.Row
	if seq != 0 {
		row = q.QueryRow(ctx, `SELECT `+runColumnsSQL+` FROM studio_job_run WHERE seq = $1`, seq)
	} else {
		row = q.QueryRow(ctx, `SELECT `+runColumnsSQL+` FROM studio_job_run
WHERE job_id = $1 AND ($2 = '' OR cluster = $2) AND (NOT $3 OR finished_at IS NOT NULL)
ORDER BY started_at DESC, seq DESC LIMIT 1`, job, cluster, rq.Ended)
	}
	r, err := scanRun(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && seq != 0:
		return jobs.Run{}, fmt.Errorf("run %d: %w (housekeeping may have removed it; jobs history %s lists the runs kept)", seq, ErrUnknownRun, job)
	case errors.Is(err, pgx.ErrNoRows):
		var ran bool
		if cluster != "" {
			if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_run WHERE job_id = $1)`, job).Scan(&ran); err != nil {
				return jobs.Run{}, fmt.Errorf("read runs of job %q: %w", job, err)
			}
		}
		if !ran {
			if kerr := Known(ctx, q, job); kerr != nil {
				return jobs.Run{}, kerr
			}
		}
		if rq.Ended {
			return jobs.Run{}, fmt.Errorf("job %q: %w: none has ended", name, ErrUnknownRun)
		}
		return jobs.Run{}, fmt.Errorf("job %q: %w: it has none recorded", name, ErrUnknownRun)
	case err != nil:
		return jobs.Run{}, fmt.Errorf("read run of job %q: %w", name, err)
	}
	if r.JobID != job || cluster != "" && r.Cluster != cluster {
		of := jobs.DutyKey{Job: r.JobID, Cluster: r.Cluster}.String()
		return jobs.Run{}, fmt.Errorf("run %d is a run of job %q, not of %q: %w", seq, of, name, ErrUnknownRun)
	}
	return r, nil
}

func scanRun(row pgx.Row) (jobs.Run, error) {
	var r jobs.Run
	var outcome string
	// Times in UTC; an infinite one (no replica writes it: a corrupt row)
	// reads as none, as in the status rows (columns.go).
	if err := row.Scan(&r.Seq, &r.JobID, &r.ReplicaID, &r.Cluster, timeScanner{&r.StartedAt}, optTimeScanner{&r.FinishedAt}, &outcome, &r.Error, &r.OutputTail); err != nil {
		return jobs.Run{}, err
	}
	r.Outcome = jobs.Outcome(outcome)
	return r, nil
}

// NoOutputError says why run r has no output to show, wrapping ErrNoOutput.
func NoOutputError(r jobs.Run) error {
	name := jobs.DutyKey{Job: r.JobID, Cluster: r.Cluster}.String()
	if r.Outcome == jobs.OutcomeRunning {
		return fmt.Errorf("run %d of job %q is still running: %w yet (its output is stored when it ends)", r.Seq, name, ErrNoOutput)
	}
	return fmt.Errorf("run %d of job %q (%s): %w: its task printed nothing", r.Seq, name, r.Outcome, ErrNoOutput)
}

// isDutyKey reports whether id is a per-cluster duty's key (job@cluster).
func isDutyKey(id string) bool {
	_, duty := jobs.ParseDutyKey(id)
	return duty
}
