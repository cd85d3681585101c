package jobs

import (
	"errors"
	"fmt"
	"time"
)

// Backfill bounds (docs/schedules.md, "Backfill").
const (
	// DefaultBackfillMax is how many occurrences one jobs backfill may ask
	// for without --max.
	DefaultBackfillMax = 100
	// BackfillMaxLimit is the largest --max: one request is one
	// transaction, and its occurrences run one after another.
	BackfillMaxLimit = 10_000
)

// ErrBackfillTooMany: the range holds more occurrences than the bound.
var ErrBackfillTooMany = errors.New("more occurrences than --max")

// BackfillOccurrence is one nominal time a backfill computes, with the
// end of its slot: the next nominal time of the schedule after it. A run
// whose nominal time falls in [At, Until) is a run of this occurrence
// (a live run's nominal time may lie after the grid's, a fixed delay's
// or a jittered one's).
type BackfillOccurrence struct {
	At, Until time.Time
}

// BackfillOccurrences returns the occurrences of s in [from, to), oldest
// first, at most max of them (ErrBackfillTooMany when there are more; the
// walk stops there, so a huge range costs max+1 steps).
//
// A cron's occurrences are its cron times, read in its zone as the runner
// reads them (a local time that occurs twice once, at its first instant;
// one that does not exist at the end of the gap). A fixed delay has no
// times of its own (each counts from the end of the run before), so its
// occurrences are the multiples of the delay since the Unix epoch: the
// same for every backfill of the job, whatever --from says, so that a
// second backfill finds what the first asked for.
func BackfillOccurrences(s Schedule, from, to time.Time, max int) ([]BackfillOccurrence, error) {
	if s.IsZero() {
		return nil, fmt.Errorf("%w: no schedule", ErrSchedule)
	}
	if !from.Before(to) {
		return nil, nil
	}
	next := func(t time.Time) time.Time { return s.Next(t) }
	var t time.Time
	if s.IsCron() {
		t = s.Next(from.Add(-time.Nanosecond))
	} else {
		t = everyGrid(s.Every, from)
	}
	var out []BackfillOccurrence
	for !t.IsZero() && t.Before(to) {
		if len(out) == max {
			return nil, fmt.Errorf("%w: [%s, %s) holds more than %d", ErrBackfillTooMany,
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), max)
		}
		n := next(t)
		out = append(out, BackfillOccurrence{At: t.UTC(), Until: n.UTC()})
		t = n
	}
	return out, nil
}

// everyGrid is the first multiple of d since the Unix epoch at or after t.
func everyGrid(d time.Duration, t time.Time) time.Time {
	epoch := time.Unix(0, 0).UTC()
	since := t.Sub(epoch) // saturates far from 1970; backfills are near now
	k := since / d
	g := epoch.Add(k * d)
	if g.Before(t) {
		g = g.Add(d)
	}
	return g.UTC()
}

// BackfillClaim is a backfill occurrence a replica claimed: its request
// and nominal time.
type BackfillClaim struct {
	RequestSeq int64
	JobID      string
	NominalAt  time.Time
}
