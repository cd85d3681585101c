package jobs

import "time"

// StartTrace is what the database knows of one job's occurrences under
// one scope key when a replica starts, or acquires a duty's cluster: what
// a stretch of due times that passed with no replica counts from, and
// what became of its parts (docs/occurrences.md, "Missed stretches").
type StartTrace struct {
	// Anchor is the end of the last run (per-cluster duties only, from
	// studio_duty_end and the run history; zero: none known).
	// Installation jobs take theirs from the shared schedule, instance
	// jobs from their status row.
	Anchor time.Time
	// Recorded is the latest nominal time accounted for: the last skip or
	// miss recorded, or the newest run's own nominal time (zero: none).
	Recorded time.Time
	// LostStarted and LostUntil: the newest run never ended; it started
	// at LostStarted and its replica died at LostUntil (the dead
	// incarnation's last heartbeat). Zero: the newest run ended, or its
	// replica is live.
	LostStarted, LostUntil time.Time
	// Pauses are the job's pause and resume changes (studio_audit), oldest
	// first, from the last one before the stretch could start.
	Pauses []PauseChange
}

// PauseChange is one `jobs pause` (Paused) or `jobs resume` at At by By.
// Until is a pause's end (zero: none): from it on the job is not paused,
// whether or not a resume was written (docs/schedules.md, "Pause with a
// reason and an end").
type PauseChange struct {
	At     time.Time
	Paused bool
	By     string
	Until  time.Time
}

// PausedAt reports whether the changes leave the job paused at t, and by
// whom (the last change at or before t, unless it is a pause whose end
// is at or before t; none: not paused).
func (s StartTrace) PausedAt(t time.Time) (bool, string) {
	paused, by := false, ""
	for _, c := range s.Pauses {
		if c.At.After(t) {
			break
		}
		paused, by = c.Paused, c.By
		if paused && !c.Until.IsZero() && !t.Before(c.Until) {
			paused, by = false, ""
		}
	}
	return paused, by
}
