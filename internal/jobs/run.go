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
}

// Setting is an operator override (a studio_job_setting row).
type Setting struct {
	JobID     string
	Schedule  string // stored form ("every 30s", "cron ..."), "" for none
	Paused    bool
	UpdatedAt time.Time
	UpdatedBy string
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
