package doctor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/natsort"
	"github.com/studioctl/studioctl/internal/replicas"
)

// jobState is what the job checks read: every status row, merged views
// and database now.
type jobState struct {
	rows  []jobstore.ReplicaStatus
	views []jobstore.View
	now   time.Time
}

func readJobs(ctx context.Context, e *env) (jobState, error) {
	rows, now, err := jobstore.ReadStatus(ctx, e.pool, "")
	if err != nil {
		return jobState{}, err
	}
	return jobState{rows: rows, views: jobstore.Merge(rows, now), now: now}, nil
}

// baseID is the job id of a status row's job id: a per-cluster duty's row
// is "id@cluster".
func baseID(id string) string {
	k, _ := jobs.ParseDutyKey(id)
	return k.Job
}

// schedules maps each job's own id to the schedule in force, as its status
// rows say (a live replica's row first).
func (s jobState) schedules() map[string]string {
	out := map[string]string{}
	for _, live := range []bool{true, false} {
		for _, r := range s.rows {
			id := baseID(r.JobID)
			if _, ok := out[id]; !ok && r.Live == live && r.Schedule != "" {
				out[id] = r.Schedule
			}
		}
	}
	return out
}

// timeout is job id's timeout under schedule: the configured one when the
// configuration file declares the job, else the default of the schedule
// (the database does not store timeouts). ok is false when the schedule
// does not parse.
func (e *env) timeout(id, schedule string) (d time.Duration, configured, ok bool) {
	sched, err := jobs.ParseSchedule(schedule)
	if err != nil {
		return 0, false, false
	}
	for _, j := range e.o.Jobs {
		if j.ID == baseID(id) {
			return j.TimeoutFor(sched), j.Timeout > 0, true
		}
	}
	return jobs.DefaultTimeout(sched), false, true
}

// checkFailingJobs: a job whose last run failed (warn), or whose schedule
// override does not parse, so it does not run at all (fail). Only jobs a
// live replica hosts are judged.
func checkFailingJobs(ctx context.Context, e *env) Result {
	s, err := readJobs(ctx, e)
	if err != nil {
		return failed(err)
	}
	var failing, invalid, failingIDs []string
	hosted, paused := 0, 0
	for _, v := range s.views {
		if v.Replicas == 0 {
			continue
		}
		hosted++
		switch v.Health {
		case jobs.HealthFailing:
			what := fmt.Sprintf("%s (%s", v.ID, plural(int(v.Failures), "failure", "failures"))
			if v.LastError != "" {
				what += ", last error: " + shorten(v.LastError, 60)
			}
			failing = append(failing, what+")")
			failingIDs = append(failingIDs, v.ID)
		case jobs.HealthInvalidSchedule:
			invalid = append(invalid, fmt.Sprintf("%s (%s)", v.ID, shorten(v.InvalidSchedule, 60)))
		case jobs.HealthPaused:
			paused++
		}
	}
	switch {
	case len(invalid) > 0:
		detail := plural(len(invalid), "job does not run", "jobs do not run") + ", its schedule override is invalid: " + list(invalid)
		hint := "studioctl jobs set ID --every D (or --cron) replaces the override; jobs status ID shows it"
		if len(failing) > 0 {
			detail += "; failing: " + list(failing)
			hint += "; for the failing ones, " + outputHint(failingIDs)
		}
		return Result{Status: Fail, Detail: detail, Hint: hint}
	case len(failing) > 0:
		return Result{Status: Warn, Detail: plural(len(failing), "job failing", "jobs failing") + ": " + list(failing),
			Hint: outputHint(failingIDs)}
	}
	detail := fmt.Sprintf("%s on live replicas, none failing", plural(hosted, "job", "jobs"))
	if paused > 0 {
		detail += fmt.Sprintf(" (%d paused)", paused)
	}
	return Result{Status: OK, Detail: detail}
}

// outputHint names the commands that show why jobs fail: jobs output
// prints a run's stored output (a per-cluster duty's id, job@cluster, as
// it is), jobs history lists the runs.
func outputHint(ids []string) string {
	if len(ids) == 1 {
		return fmt.Sprintf("studioctl jobs output %s prints the output of its last run; studioctl jobs history %s lists its runs",
			ids[0], baseID(ids[0]))
	}
	return fmt.Sprintf("studioctl jobs output ID prints the output of a job's last run (studioctl jobs output %s); studioctl jobs history ID lists its runs",
		ids[0])
}

// runningSQL lists the runs still running on live replicas, with their age
// in database time.
var runningSQL = `SELECT j.job_id, coalesce(j.cluster, ''), j.replica_id, j.seq, EXTRACT(EPOCH FROM (now() - j.started_at))::float8
FROM studio_job_run j JOIN studio_replica r ON r.id = j.replica_id
WHERE j.outcome = 'running' AND isfinite(j.started_at) AND ` + liveness.LiveSQL("r") + `
ORDER BY j.started_at`

// checkStalledJobs: a job that should run and does not: no completion
// within three intervals (jobs list's "stalled"), a next fire well past due
// on a live replica that is not running it, or a run going on well past
// its timeout.
func checkStalledJobs(ctx context.Context, e *env) Result {
	s, err := readJobs(ctx, e)
	if err != nil {
		return failed(err)
	}
	// The last end of each installation job anywhere (the shared
	// schedule): a live replica that did not run the job lately has no
	// completion of its own, though another replica ran it.
	ends := map[string]time.Time{}
	if e.tables["studio_job_schedule"] {
		rows, err := e.pool.Query(ctx, `SELECT job_id, last_ended_at FROM studio_job_schedule WHERE isfinite(last_ended_at)`)
		if err != nil {
			return failed(fmt.Errorf("read the shared schedule: %w", err))
		}
		type end struct {
			job string
			at  time.Time
		}
		es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (end, error) {
			var x end
			err := r.Scan(&x.job, &x.at)
			return x, err
		})
		if err != nil {
			return failed(fmt.Errorf("read the shared schedule: %w", err))
		}
		for _, x := range es {
			ends[x.job] = x.at.UTC()
		}
	}
	var stalled []string
	for _, v := range s.views {
		// A run going on is progress; one past its timeout is judged below.
		if v.Replicas == 0 || v.Health != jobs.HealthStalled || v.LastOutcome == jobs.OutcomeRunning {
			continue
		}
		if end, ok := ends[v.ID]; ok {
			if jobs.JudgeHealth(jobs.Status{Schedule: v.Schedule, LastFinishedAt: &end}, s.now) != jobs.HealthStalled {
				continue // it ran elsewhere in time
			}
			if v.LastFinishedAt == nil || end.After(*v.LastFinishedAt) {
				v.LastFinishedAt = &end
			}
		}
		last := "none finished"
		if v.LastFinishedAt != nil {
			last = "last finished " + ago(s.now.Sub(*v.LastFinishedAt)) + " ago"
		}
		stalled = append(stalled, fmt.Sprintf("%s: no run completed within three intervals of %s (%s)", v.ID, v.Schedule, last))
	}
	// A draining replica fires nothing new: only ready ones are judged.
	reps, err := replicas.List(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	ready := map[string]bool{}
	for _, in := range reps {
		ready[in.ID] = in.Live && in.State == replicas.StateReady
	}
	for _, r := range s.rows {
		if !r.Live || !ready[r.ReplicaID] || r.Running || r.Paused || r.NextFireAt == nil {
			continue
		}
		if late := s.now.Sub(*r.NextFireAt); late > OverdueGrace {
			stalled = append(stalled, fmt.Sprintf("%s on %s: due %s ago and not fired", r.JobID, r.ReplicaID, ago(late)))
		}
	}
	sched := s.schedules()
	rows, err := e.pool.Query(ctx, runningSQL)
	if err != nil {
		return failed(fmt.Errorf("read running runs: %w", err))
	}
	type running struct {
		job, cluster, replica string
		seq                   int64
		age                   float64
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (running, error) {
		var x running
		err := r.Scan(&x.job, &x.cluster, &x.replica, &x.seq, &x.age)
		return x, err
	})
	if err != nil {
		return failed(fmt.Errorf("read running runs: %w", err))
	}
	for _, x := range runs {
		timeout, _, ok := e.timeout(x.job, sched[x.job])
		age := time.Duration(x.age * float64(time.Second))
		if !ok || age <= timeout+PastTimeoutGrace {
			continue
		}
		name := jobs.DutyKey{Job: x.job, Cluster: x.cluster}.String()
		stalled = append(stalled, fmt.Sprintf("%s run %d on %s: running for %s, past its %s timeout", name, x.seq, x.replica, ago(age), timeout))
	}
	// No live replica at all, while replicas reported jobs within
	// CrashWindow: nothing runs them.
	live := 0
	for _, in := range reps {
		if in.Live {
			live++
		}
	}
	var nowhere []string
	if live == 0 {
		seen := map[string]bool{}
		for _, r := range s.rows {
			if id := baseID(r.JobID); !seen[id] && s.now.Sub(r.UpdatedAt) <= CrashWindow {
				seen[id] = true
				nowhere = append(nowhere, id)
			}
		}
	}
	if len(nowhere) > 0 {
		detail := fmt.Sprintf("no replica is live: %s reported in the last 24h %s nowhere (%s)",
			plural(len(nowhere), "job", "jobs"), map[bool]string{true: "runs", false: "run"}[len(nowhere) == 1], list(nowhere))
		if len(stalled) > 0 {
			detail += "; " + list(stalled)
		}
		return Result{Status: Fail, Detail: detail, Hint: "start a replica (studioctl run); crashed_replicas says whether the last ones crashed"}
	}
	if len(stalled) > 0 {
		return Result{Status: Fail, Detail: list(stalled),
			Hint: "studioctl jobs status ID shows each replica's view; a run past its timeout was not stopped: read that replica's log, and drain or restart it"}
	}
	return Result{Status: OK, Detail: "every job on a live replica ran within three intervals, fires on time and no run is past its timeout"}
}

// longestSQL is each job's longest finished run of the window, in seconds:
// runs cut short (interrupted, lock lost) do not count.
const longestSQL = `SELECT DISTINCT ON (job_id) job_id, replica_id, seq, EXTRACT(EPOCH FROM (finished_at - started_at))::float8
FROM studio_job_run
WHERE finished_at IS NOT NULL AND started_at > now() - make_interval(secs => $1)
  AND isfinite(started_at) AND isfinite(finished_at)
  AND outcome IN ('succeeded', 'failed', 'timed_out')
ORDER BY job_id, finished_at - started_at DESC`

// checkNearTimeout: a job whose longest run of the last NearTimeoutWindow
// took NearTimeoutShare of its timeout or more: the next one may be
// killed. The timeout is the configuration file's when it declares the job
// (the database does not store it), else the default of the schedule in
// force.
func checkNearTimeout(ctx context.Context, e *env) Result {
	s, err := readJobs(ctx, e)
	if err != nil {
		return failed(err)
	}
	sched := s.schedules()
	rows, err := e.pool.Query(ctx, longestSQL, NearTimeoutWindow.Seconds())
	if err != nil {
		return failed(fmt.Errorf("read run durations: %w", err))
	}
	type longest struct {
		job, replica string
		seq          int64
		secs         float64
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (longest, error) {
		var x longest
		err := r.Scan(&x.job, &x.replica, &x.seq, &x.secs)
		return x, err
	})
	if err != nil {
		return failed(fmt.Errorf("read run durations: %w", err))
	}
	slices.SortFunc(runs, func(a, b longest) int { return natsort.Compare(a.job, b.job) })
	var near []string
	for _, x := range runs {
		timeout, configured, ok := e.timeout(x.job, sched[x.job])
		if !ok {
			continue
		}
		src := "default"
		if configured {
			src = "configured"
		}
		took := time.Duration(x.secs * float64(time.Second))
		if share := took.Seconds() / timeout.Seconds(); share >= NearTimeoutShare {
			near = append(near, fmt.Sprintf("%s: run %d on %s took %s of its %s timeout (%s, %.0f%%)",
				x.job, x.seq, x.replica, took.Round(time.Millisecond), timeout, src, 100*share))
		}
	}
	configured := 0
	for _, j := range e.o.Jobs {
		if j.Timeout > 0 {
			configured++
		}
	}
	source := "default timeouts: no configuration file declares jobs"
	switch {
	case e.o.JobsErr != nil:
		source = "default timeouts: the configuration's jobs could not be read (" + shorten(e.o.JobsErr.Error(), 80) + ")"
	case len(e.o.Jobs) > 0:
		source = fmt.Sprintf("timeouts: %d configured in %s, defaults for the rest", configured, e.o.JobsSource)
	}
	if e.o.JobsErr != nil && len(near) == 0 {
		return Result{Status: Warn, Detail: "no run of the last 24h came within 20% of its timeout, but " + source,
			Hint: "fix the configuration file: studioctl run refuses it too"}
	}
	if len(near) > 0 {
		return Result{Status: Warn, Detail: list(near),
			Hint: "raise the job's timeout: in the configuration (a run that reaches it is killed as timed_out), or make the job faster; doctor reads timeouts from its own --config"}
	}
	return Result{Status: OK, Detail: fmt.Sprintf("no run of the last 24h came within 20%% of its timeout (%s)", source)}
}
