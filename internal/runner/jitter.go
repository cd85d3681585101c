package runner

import (
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
)

// Deterministic jitter (issue 24, part 2; docs/schedules.md, "Jitter and
// the start deadline"). A job's schedule carries its jitter bound; the
// runner fixes the offset of each job and scope once, where the job state
// is made (New for installation and instance jobs, AddCluster for duties):
// jobs.JitterOffset of the job id and the scope key ("" for an
// installation job, the replica id for an instance job, the cluster for a
// duty), so every replica computes the same offset for the same job and
// scope. An operator's schedule override keeps it (jobs.Override.Apply).
//
//   - A cron job runs at each cron time plus the offset: its due times,
//     the shared schedule's grid, its nominal times (STUDIO_SCHEDULED_AT)
//     and its occurrence keys all come from the shifted schedule
//     (jobs.Schedule.Next), so replicas agree.
//   - A fixed-delay job is due at end + every + offset (its grid without
//     runs, end + offset + k × every: gridLast, gridNext); a run that
//     would start at once is delayed by the offset as well: a job never
//     run anywhere, the run after a missed stretch (missed: run-once), an
//     instance job's first run (in place of the random initial delay), a
//     duty's first fire after its cluster is acquired. So jobs started by
//     one deploy, or ending together, move apart and stay apart.

// scopedJob returns j with its schedule's jitter offset for scope key.
func scopedJob(j jobtask.Job, scopeKey string) jobtask.Job {
	j.Schedule = j.Schedule.ForScope(j.ID, scopeKey)
	return j
}

// jobScopeKey is the occurrence scope key of a job that is not a duty
// (Runner.scopeKey's, before there is a job state).
func jobScopeKey(j jobtask.Job, replicaID string) string {
	if j.Scope == jobs.ScopeInstance {
		return replicaID
	}
	return ""
}

// jitterStart delays a fixed-delay job's due time by its jitter offset when
// it is due at once (at or before now); a cron's due times are shifted
// already, and a run at start after a missed stretch of a cron stays at
// once (its nominal time is the stretch's last shifted cron time; delaying
// it could pass the next).
func jitterStart(s jobs.Schedule, due, now time.Time) time.Time {
	if s.IsCron() || s.Offset() == 0 || due.After(now) {
		return due
	}
	return now.Add(s.Offset())
}

// initialDelay is the first fire's delay of a job with no run to follow:
// its jitter offset when it has a jitter (deterministic, even when the
// offset is 0), else Options.InitialDelay.
func (r *Runner) initialDelay(js *jobState) time.Duration {
	if js.sched.Jitter() > 0 && !js.sched.IsCron() {
		return js.sched.Offset()
	}
	return r.o.InitialDelay(js.job.Job)
}
