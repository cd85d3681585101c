package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a job's trigger: a fixed delay counted from the end of a run,
// or a cron expression read in UTC.
type Schedule struct {
	Every time.Duration
	Cron  string
	cron  cron.Schedule
}

// ErrSchedule marks a malformed schedule.
var ErrSchedule = errors.New("invalid schedule")

// cronParser takes standard five-field expressions and descriptors (@daily).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Every returns a fixed-delay schedule.
func Every(d time.Duration) (Schedule, error) {
	if d <= 0 {
		return Schedule{}, fmt.Errorf("%w: every must be positive, got %s", ErrSchedule, d)
	}
	return Schedule{Every: d}, nil
}

// ParseCron parses a cron expression, always in UTC. A CRON_TZ= or TZ=
// prefix is rejected, and the parser's panics are turned into errors.
func ParseCron(expr string) (s Schedule, err error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Schedule{}, fmt.Errorf("%w: empty cron expression", ErrSchedule)
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return Schedule{}, fmt.Errorf("%w: cron %q: a time zone prefix is not allowed; cron is always read in UTC", ErrSchedule, expr)
	}
	if strings.HasPrefix(expr, "@every") {
		return Schedule{}, fmt.Errorf("%w: cron %q: use every: instead of @every", ErrSchedule, expr)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: cron %q: %v", ErrSchedule, expr, r)
		}
	}()
	// The parser would otherwise keep time.Local of the moment of parsing.
	c, err := cronParser.Parse("CRON_TZ=UTC " + expr)
	if err != nil {
		return Schedule{}, fmt.Errorf("%w: cron %q: %v", ErrSchedule, expr, err)
	}
	// A schedule that never fires (30 February) would spin or stall.
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Schedule{}, fmt.Errorf("%w: cron %q never fires", ErrSchedule, expr)
	}
	return Schedule{Cron: expr, cron: c}, nil
}

// IsCron reports whether the schedule is a cron expression.
func (s Schedule) IsCron() bool { return s.Cron != "" }

// IsZero reports an unset schedule.
func (s Schedule) IsZero() bool { return s.Every == 0 && s.Cron == "" }

// Next is when the job fires next after a run (or skip) that ended at end.
func (s Schedule) Next(end time.Time) time.Time {
	if s.IsCron() {
		return s.cron.Next(end.UTC())
	}
	return end.Add(s.Every)
}

// Interval is the schedule's typical period: the delay, or the time between
// two cron fires after t.
func (s Schedule) Interval(t time.Time) time.Duration {
	if !s.IsCron() {
		return s.Every
	}
	a := s.cron.Next(t.UTC())
	return s.cron.Next(a).Sub(a)
}

// String is the stored form: "every 30s" or "cron 0 2 * * *".
func (s Schedule) String() string {
	if s.IsCron() {
		return "cron " + s.Cron
	}
	if s.Every > 0 {
		return "every " + FormatDuration(s.Every)
	}
	return ""
}

// ParseSchedule reads the stored form written by String.
func ParseSchedule(text string) (Schedule, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	switch kind {
	case "every":
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return Schedule{}, fmt.Errorf("%w: %q: %v", ErrSchedule, text, err)
		}
		s, err := Every(d)
		if err == nil && d < MinEvery {
			err = fmt.Errorf("%w: %q: every is shorter than the minimum %s", ErrSchedule, text, MinEvery)
		}
		return s, err
	case "cron":
		return ParseCron(rest)
	default:
		return Schedule{}, fmt.Errorf("%w: %q: want \"every DURATION\" or \"cron EXPR\"", ErrSchedule, text)
	}
}

// FormatDuration is d as time.ParseDuration reads it, without zero units:
// 1h, 1m30s, 2h5m (not 1h0m0s).
func FormatDuration(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

// DueAfter is when a job is due next given the end of its last run (zero:
// it never ran) at now, all in database time. A fixed delay is due every
// after lastEnd, a cron at its next time after lastEnd; a job that never
// ran is due at once (a cron at its next time). A due time already past is
// now, or with MissedSkip the first lastEnd + k × every still ahead (a
// cron: its next time after now).
func DueAfter(s Schedule, lastEnd, now time.Time, missed Missed) time.Time {
	if lastEnd.IsZero() {
		if s.IsCron() {
			return s.Next(now)
		}
		return now
	}
	due := s.Next(lastEnd)
	if !due.Before(now) {
		return due
	}
	if missed != MissedSkip {
		return now
	}
	if s.IsCron() {
		return s.Next(now)
	}
	k := (now.Sub(lastEnd) + s.Every - 1) / s.Every // the least k with lastEnd + k × every >= now
	return lastEnd.Add(k * s.Every)
}

// DueSnap is how far a replica's estimate of database time may stand from
// the database's now of a read for LocalDue to keep a due time exact: the
// read's latency, and the offset's error (the heartbeat measures the
// offset from the midpoint of a round trip whose now() is taken at its
// start, which puts the estimate about a millisecond behind).
const DueSnap = 5 * time.Millisecond

// LocalDue is due (database time, computed from a read whose now() was
// dbNow) on the timeline of a replica whose estimate of database time was
// localNow when the read returned. Within DueSnap of each other it is due
// itself, so the stored next due time is the exact due time (a cron's on
// its minute, not a millisecond before it); further apart, due moved by
// their difference, so that a wrong offset can neither make the timer
// spin nor fire it far from the database's time.
func LocalDue(due, dbNow, localNow time.Time) time.Time {
	shift := localNow.Sub(dbNow)
	if shift >= -DueSnap && shift <= DueSnap {
		return due
	}
	return due.Add(shift)
}
