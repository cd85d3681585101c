// Package jobs is the job model of SPEC §5: scopes, schedules, the timing
// rules, configuration, health, and the shapes of a status row, a run and
// an operator setting. It reads no database: internal/jobstore keeps
// status, history and settings in PostgreSQL.
package jobs

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Scope says where a job runs.
type Scope string

const (
	// ScopeInstallation: the effect lies in the shared database or outside
	// systems; one replica per tick, through the lock table.
	ScopeInstallation Scope = "installation"
	// ScopeInstance: the effect is this replica's own state; every replica.
	ScopeInstance Scope = "instance"
)

// MaxIDBytes is the longest job id: it is also the lock name (VARCHAR(64)).
const MaxIDBytes = 64

// MinEvery is the shortest fixed delay a configuration may ask for.
const MinEvery = time.Second

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// ValidateID checks a job id: [a-z0-9][a-z0-9-]*, at most 64 bytes.
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("must not be empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%q is %d bytes, at most %d allowed", id, len(id), MaxIDBytes)
	case dutyOf(id) != "":
		// A per-cluster duty's key (job@cluster): settings, pauses and
		// triggers apply to the job, on every cluster it owns.
		return fmt.Errorf("%q is one cluster's duty of job %q: give the job's id", id, dutyOf(id))
	case !idPattern.MatchString(id):
		return fmt.Errorf("%q must match [a-z0-9][a-z0-9-]*", id)
	}
	return nil
}

// dutyOf returns the job of a per-cluster duty's key (job@cluster), or "".
func dutyOf(id string) string {
	k, ok := ParseDutyKey(id)
	if !ok || !idPattern.MatchString(k.Job) {
		return ""
	}
	return k.Job
}

// DutyKey names one status row of a job: the job's own id, or, for a
// per-cluster duty (clusters: owned), "job@cluster". It is the job id of
// the duty's status row, of the runner's Snapshot and of `jobs output
// job@cluster`. A job id never contains "@", so a key never names a job of
// its own; history rows keep the job's own id and record the cluster in
// their cluster column.
type DutyKey struct {
	Job     string
	Cluster string // "": the job's own row (not a duty)
}

// dutySep separates the job from the cluster in a duty's key.
const dutySep = "@"

// String is "job@cluster", or the job's id when Cluster is empty.
func (k DutyKey) String() string {
	if k.Cluster == "" {
		return k.Job
	}
	return k.Job + dutySep + k.Cluster
}

// ParseDutyKey splits a status row's job id at its first "@": the job and
// the cluster of a duty's key, with duty true (the cluster may be empty in
// malformed input: "job@"), or the whole id as Job and duty false.
func ParseDutyKey(id string) (k DutyKey, duty bool) {
	job, cluster, duty := strings.Cut(id, dutySep)
	return DutyKey{Job: job, Cluster: cluster}, duty
}

// TaskSpec is a task as configured. The runner's side binds it to the
// task it executes (internal/jobtask).
type TaskSpec struct {
	Command []string
	SQL     string
	HTTP    *HTTPSpec
}

// HTTPSpec is an http task as configured (run.http).
type HTTPSpec struct {
	Method  string // upper case; POST unless configured
	URL     string
	Headers map[string]string
	Body    string
}

// Kind is "command", "sql" or "http".
func (t TaskSpec) Kind() string {
	switch {
	case len(t.Command) > 0:
		return "command"
	case t.SQL != "":
		return "sql"
	case t.HTTP != nil:
		return "http"
	}
	return ""
}

// Job is one scheduled job.
type Job struct {
	ID       string
	Scope    Scope
	Schedule Schedule      // as configured; an operator override may replace it at a fire
	Timeout  time.Duration // 0: DefaultTimeout of the schedule in force
	Spec     TaskSpec      // the configured task (internal/jobtask binds it)
	Builtin  bool          // declared in code (studio-housekeeping)
	// Lock is the ShedLock lock name an installation job takes (key lock:);
	// "" means the job id. Any ShedLock name up to 64 characters, so a Go
	// replica can share a lock a Java node names scheduledTaskName.
	Lock string
	// Missed is what a fixed-delay or cron job does at start when its due
	// time passed while no replica ran it (key missed:): run once, skip
	// to the next due time still ahead, or catch up (bounded by CatchUp).
	Missed Missed
	// CatchUp bounds missed: catch-up (key catch_up:); zero otherwise.
	CatchUp CatchUp

	File string // where it was declared, for messages
	Line int

	// PerCluster (clusters: owned): the job runs once per cluster this
	// replica owns a lease of (docs/leases.md). Only with ScopeInstance.
	PerCluster bool

	// Env is the job's env: entries, added to the clean environment of its
	// command (internal/tasks' Environ).
	Env map[string]string
}

// LockName is the name of the job's lock in the lock table: its lock: key,
// or else its id.
func (j Job) LockName() string {
	if j.Lock != "" {
		return j.Lock
	}
	return j.ID
}

// TimeoutFor is the run timeout under schedule s (the configured or
// overridden schedule in force).
func (j Job) TimeoutFor(s Schedule) time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	return DefaultTimeout(s)
}

// Missed is the missed: key.
type Missed string

const (
	// MissedRunOnce (the default): a run that fell due while no replica was
	// up runs once at start, never once per missed interval.
	MissedRunOnce Missed = "run-once"
	// MissedSkip: wait for the next due time still ahead (last end + k x
	// every, or the next cron time).
	MissedSkip Missed = "skip"
	// MissedCatchUp: run the newest CatchUp.Max of the due times missed
	// within CatchUp.Within before the start, oldest first, one after
	// another, each with its own nominal time (docs/schedules.md,
	// "Catch-up").
	MissedCatchUp Missed = "catch-up"
)

// ParseMissed reads the missed: key.
func ParseMissed(v string) (Missed, error) {
	switch Missed(v) {
	case MissedRunOnce, MissedSkip, MissedCatchUp:
		return Missed(v), nil
	}
	return "", fmt.Errorf("%q: want run-once (the default), skip or catch-up", v)
}

// CatchUp is the catch_up: key of a job with missed: catch-up: at most Max
// of the due times missed in the last Within before a start run.
type CatchUp struct {
	Max    int
	Within time.Duration
}

// Bounds of catch_up: a catch-up runs its occurrences one after another,
// so a thousand is already a long queue; a window beyond a year is a typo.
const (
	MaxCatchUp       = 1000
	MaxCatchUpWithin = 366 * 24 * time.Hour
)
