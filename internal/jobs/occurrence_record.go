package jobs

import "time"

// OccurrenceRecord is a skip or a miss as the runner records it: a row of
// studio_occurrence (migrations/00010_occurrences.sql). A run is its own
// occurrence (Run.NominalAt) and needs none.
type OccurrenceRecord struct {
	JobID     string
	ScopeKey  string
	NominalAt time.Time // Nominal
	Outcome   string    // OccurrenceSkipped or OccurrenceMissed
	Reason    string    // Reason*
	ReplicaID string    // the replica that recorded it
	Seq       int64     // missed/lost: the run; 0: none
	// LockName, for skipped/held-elsewhere: the lock that was held. The
	// run store reads its holder (locked_by) when it writes the row, and
	// writes nothing when the holder is a live replica: the occurrence ran
	// (or runs) there.
	LockName string
	PausedBy string // skipped/paused: the setting's updated_by
	// Count and LastNominalAt: a stretch (missed/down, skipped/overrun) of
	// Count due times from NominalAt to LastNominalAt. Count 0 is 1.
	Count         int
	LastNominalAt time.Time
}
