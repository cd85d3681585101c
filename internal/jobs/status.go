package jobs

import (
	"time"
)

// Outcome of a run (studio_job_run.outcome).
type Outcome string

const (
	OutcomeRunning     Outcome = "running"
	OutcomeSucceeded   Outcome = "succeeded"
	OutcomeFailed      Outcome = "failed"
	OutcomeTimedOut    Outcome = "timed_out"
	OutcomeLockLost    Outcome = "lock_lost"
	OutcomeInterrupted Outcome = "interrupted"
)

// Failing reports whether an outcome makes a job failing.
func (o Outcome) Failing() bool {
	return o == OutcomeFailed || o == OutcomeTimedOut || o == OutcomeLockLost || o == OutcomeInterrupted
}

// Health of a job.
type Health string

const (
	HealthOK              Health = "ok"
	HealthFailing         Health = "failing"
	HealthStalled         Health = "stalled"
	HealthInvalidSchedule Health = "invalid-schedule"
	HealthPaused          Health = "paused"
	// HealthRetired: no live replica declares the job (its replicas stopped
	// or are gone, or it was removed from their configuration). Readers
	// show its last state as it was; it is never stalled or failing.
	HealthRetired Health = "retired"
)

// Status is one replica's view of one job (a studio_job_status row).
type Status struct {
	ReplicaID              string
	JobID                  string
	Scope                  Scope
	Schedule               string // the schedule in force, stored form
	NextFireAt             *time.Time
	Running                bool
	LastStartedAt          *time.Time
	LastFinishedAt         *time.Time
	LastOutcome            Outcome
	LastError              string
	LastSuccessAt          *time.Time
	LastSkippedElsewhereAt *time.Time
	Runs                   int64
	Failures               int64
	Timeouts               int64
	LockLost               int64
	Overruns               int64
	SkippedElsewhere       int64
	InvalidSchedule        string // the parser's cause, "" when valid
	Paused                 bool
	UpdatedAt              time.Time
	Since                  time.Time // when this replica started tracking the job (not stored)
	// Timeout is the job's timeout in force (stored as
	// studio_job_status.timeout_ms; 0: unknown, the default of the
	// schedule, as in rows written before migration 00008). JudgeHealth
	// uses it for a run in progress.
	Timeout time.Duration
}

// LastCompletion is the later of the last finished run and the last skip:
// a skip counts as a completion when judging a stalled job.
func (s Status) LastCompletion() time.Time {
	var t time.Time
	if s.LastFinishedAt != nil {
		t = *s.LastFinishedAt
	}
	if s.LastSkippedElsewhereAt != nil && s.LastSkippedElsewhereAt.After(t) {
		t = *s.LastSkippedElsewhereAt
	}
	return t
}

// JudgeHealth says how a job is: paused, invalid-schedule, failing (last
// outcome failed, timed out, lost its lock or was interrupted), stalled (no
// completion within three intervals of the schedule in force, and no run
// in progress), or ok. since is when tracking began (a job that never
// completed is judged from then).
//
// A run in progress within its timeout is progress: the job is not
// stalled while it goes on (a 30 s run every 2 s is not stalled 25 s into
// it). The timeout is s.Timeout when the reader knows it (the
// configuration), else the default of the schedule in force
// (DefaultTimeout), since status rows do not store it. A run past it is
// judged as if it were not running; doctor's stalled_jobs names such a run
// with the configured timeout.
func JudgeHealth(s Status, now time.Time) Health {
	switch {
	case s.Paused:
		return HealthPaused
	case s.InvalidSchedule != "":
		return HealthInvalidSchedule
	case s.LastOutcome.Failing():
		return HealthFailing
	}
	sched, err := ParseSchedule(s.Schedule)
	if err != nil {
		return HealthOK
	}
	if s.Running && s.LastStartedAt != nil {
		timeout := s.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout(sched)
		}
		if !now.After(s.LastStartedAt.Add(timeout)) {
			return HealthOK
		}
	}
	last := s.LastCompletion()
	if last.IsZero() {
		last = s.Since
	}
	if last.IsZero() {
		return HealthOK
	}
	// Three fires after the last completion (for a fixed delay: three
	// delays), so a weekday cron is not stalled over a weekend.
	deadline := last
	for range StalledIntervals {
		deadline = sched.Next(deadline)
	}
	if now.After(deadline) {
		return HealthStalled
	}
	return HealthOK
}
