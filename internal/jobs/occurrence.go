package jobs

import (
	"time"
)

// An occurrence is one time a job fell due, keyed by job, scope key and
// nominal time (migrations/00010_occurrences.sql, docs/occurrences.md).

// Occurrence outcomes (studio_occurrences.outcome).
const (
	OccurrenceRan     = "ran"
	OccurrenceSkipped = "skipped"
	OccurrenceMissed  = "missed"
)

// Occurrence reasons (studio_occurrences.reason): skipped/…, missed/….
const (
	ReasonPaused          = "paused"
	ReasonHeldElsewhere   = "held-elsewhere"
	ReasonOverrun         = "overrun"
	ReasonInvalidSchedule = "invalid-schedule"
	ReasonDeadline        = "deadline"
	ReasonDown            = "down"
	ReasonLost            = "lost"
)

// NominalLayout is how a nominal time is written: RFC 3339, UTC,
// milliseconds (STUDIO_SCHEDULED_AT, Studio-Scheduled-At,
// studio.scheduled_at, and the last part of an occurrence key).
const NominalLayout = "2006-01-02T15:04:05.000Z07:00"

// Nominal is t as a nominal time: UTC, truncated to the millisecond, so
// that the stored nominal_at and the formatted one are the same instant on
// every replica.
func Nominal(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// FormatNominal writes t as NominalLayout (after Nominal).
func FormatNominal(t time.Time) string { return Nominal(t).Format(NominalLayout) }

// OccurrenceKey is `<job>/<scope key>/<nominal time>`: the same string on
// every replica for the same occurrence (STUDIO_OCCURRENCE_KEY). The scope
// key is "" for an installation job, the replica id for an instance job,
// the cluster for a per-cluster duty.
func OccurrenceKey(job, scopeKey string, nominal time.Time) string {
	return job + "/" + scopeKey + "/" + FormatNominal(nominal)
}
