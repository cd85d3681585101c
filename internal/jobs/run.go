package jobs

import (
	"strings"
	"time"
)

// Run is one execution (a studio_job_run row).
type Run struct {
	Seq        int64
	JobID      string
	ReplicaID  string
	Cluster    string
	StartedAt  time.Time
	FinishedAt *time.Time
	Outcome    Outcome
	Error      string
	OutputTail string
	// NominalAt is the due time this run is the occurrence of, in
	// database time (Nominal); zero: unknown (NULL, as an older replica
	// writes). ScopeKey is the occurrence's scope key ("" for an
	// installation job, the replica id for an instance job, the cluster
	// for a per-cluster duty). Triggered: a `jobs trigger` run, whose
	// nominal time is the trigger's. Backfill: a run of a `jobs backfill`
	// occurrence, whose nominal time is that past occurrence's.
	NominalAt time.Time
	ScopeKey  string
	Triggered bool
	Backfill  bool
}

// Setting is an operator override (a studio_job_setting row).
type Setting struct {
	JobID     string
	Schedule  string // stored form ("every 30s", "cron ..."), "" for none
	Paused    bool
	UpdatedAt time.Time
	UpdatedBy string
	// PausedBy, PausedReason and PausedUntil describe a pause (empty and
	// zero when not paused; PausedUntil zero: no end). See PausedAt.
	PausedBy     string
	PausedReason string
	PausedUntil  time.Time
}

// Storable makes text fit a text column: valid UTF-8, no NUL bytes.
func Storable(t string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(t, "\x00", ""), "\uFFFD")
}

// The built-in housekeeping job; internal/jobstore runs it (Housekeeping).
const (
	HousekeepingID    = "studio-housekeeping"
	HousekeepingEvery = time.Minute
)
