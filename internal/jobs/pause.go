package jobs

import "time"

// PausedAt reports whether the setting pauses its job at t: paused, and
// its end, if it has one, not come yet (docs/schedules.md, "Pause with a
// reason and an end"). A pause whose end has passed is over at once,
// whether or not a replica has written its resume yet: a job whose every
// replica was down at the end does not stay paused.
func (s Setting) PausedAt(t time.Time) bool {
	return s.Paused && (s.PausedUntil.IsZero() || t.Before(s.PausedUntil))
}

// SamePause reports whether a and b pause alike: paused, by whom, why
// and until when.
func SamePause(a, b Setting) bool {
	return a.Paused == b.Paused && a.PausedBy == b.PausedBy && a.PausedReason == b.PausedReason && a.PausedUntil.Equal(b.PausedUntil)
}

// PauseEndActor is the actor of the audit row of a resume at a pause's
// end: the replica that noticed the end and wrote it.
func PauseEndActor(replica string) string { return "replica:" + replica }
