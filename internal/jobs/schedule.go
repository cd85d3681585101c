package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a job's trigger: a fixed delay counted from the end of a run,
// or a cron expression read in a time zone (UTC unless InZone says
// otherwise; a fixed delay ignores its zone).
type Schedule struct {
	Every time.Duration
	Cron  string
	cron  cron.Schedule
	loc   *time.Location // nil: UTC
	// jitter (key jitter:) is the bound of the fixed offset that delays
	// each cron time, and offset that offset for one scope (ForScope,
	// jitter.go); deadline (key deadline:) is how late after its nominal
	// time an occurrence may still start. Zero: none.
	jitter, offset, deadline time.Duration
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

// ParseCron parses a cron expression, read in UTC (InZone moves it to a
// zone). A CRON_TZ= or TZ= prefix is rejected (the zone is the tz: key),
// and the parser's panics are turned into errors.
func ParseCron(expr string) (s Schedule, err error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Schedule{}, fmt.Errorf("%w: empty cron expression", ErrSchedule)
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return Schedule{}, fmt.Errorf("%w: cron %q: a time zone prefix is not allowed; give the zone with tz: (config) or --tz (jobs set)", ErrSchedule, expr)
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

// zoneSep separates a schedule's stored form from its zone: "cron 30 2 *
// * * tz Europe/Berlin". No cron field or duration contains it.
const zoneSep = " tz "

// LoadZone reads an IANA zone name ("Europe/Berlin"). "" and "UTC" are UTC.
// The binary embeds the zone database (time/tzdata); ZONEINFO, when set,
// is read first.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	// LoadLocation also takes "Local", which is this machine's zone, not
	// one every replica shares.
	if name == "Local" || strings.ContainsAny(name, " \t\n") {
		return nil, fmt.Errorf("%q is not a time zone every replica shares: want an IANA name such as Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known time zone: want an IANA name such as Europe/Berlin", name)
	}
	return loc, nil
}

// InZone returns s with its cron fields read in loc (nil: UTC).
func (s Schedule) InZone(loc *time.Location) Schedule {
	if loc == time.UTC || (loc != nil && loc.String() == "UTC") {
		loc = nil
	}
	s.loc = loc
	return s
}

// Location is the zone the cron fields are read in (UTC by default).
func (s Schedule) Location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// Zone is the name of the zone in force: "UTC" by default, and always for
// a fixed delay, which ignores zones.
func (s Schedule) Zone() string {
	if !s.IsCron() {
		return "UTC"
	}
	return s.Location().String()
}

// Equal reports whether s and o fire at the same times (and have the same
// jitter and deadline).
func (s Schedule) Equal(o Schedule) bool {
	return s.Every == o.Every && s.Cron == o.Cron && s.Location().String() == o.Location().String() &&
		s.jitter == o.jitter && s.offset == o.offset && s.deadline == o.deadline
}

// IsCron reports whether the schedule is a cron expression.
func (s Schedule) IsCron() bool { return s.Cron != "" }

// IsZero reports an unset schedule.
func (s Schedule) IsZero() bool { return s.Every == 0 && s.Cron == "" }

// Next is when the job fires next after a run (or skip) that ended at end:
// end + every, or the first cron time after end. Cron fields are read on
// the wall clock of the schedule's zone, each local time taken once
// (docs/schedules.md, "Time zones"): a local time that occurs twice (the
// clocks go back) at its first occurrence, and one that does not exist
// (the clocks go forward) at the first instant after the gap. The result
// is in UTC; zero when the expression never fires again. A jitter offset
// (ForScope, jitter.go) delays each: a fixed delay is end + every +
// offset, a cron each cron time plus the offset.
func (s Schedule) Next(end time.Time) time.Time {
	if !s.IsCron() {
		return end.Add(s.Every + s.offset)
	}
	if s.offset > 0 {
		n := s.next(end.Add(-s.offset))
		if n.IsZero() {
			return n
		}
		return n.Add(s.offset)
	}
	return s.next(end)
}

// next is Next of the cron without its jitter offset.
func (s Schedule) next(end time.Time) time.Time {
	if s.loc == nil {
		return s.cron.Next(end.UTC())
	}
	// The cron is parsed in UTC, so on "wall" times (a local time written
	// as if it were UTC) it is the plain calendar. A local time's instant
	// never decreases as the local time grows, and the instant of end's
	// own local time is at or before end, so the answer is the first
	// matching local time after end's whose instant is after end. Past
	// that local time, the loop steps only over the second pass of a
	// repeated hour (at most an hour of matches).
	w := wall(end.In(s.loc))
	for i := 0; i < maxZoneSteps; i++ {
		w = s.cron.Next(w)
		if w.IsZero() {
			return w
		}
		if at := instant(w, s.loc); at.After(end) {
			return at.UTC()
		}
	}
	return time.Time{}
}

// maxZoneSteps bounds Next's walk over local times whose instant is not
// after end: a repeated hour of a cron every second is 3,600.
const maxZoneSteps = 10_000

// wall is t's local date and clock written as UTC.
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant is the instant of local time w (written as UTC) in loc: the
// first of two when the local time occurs twice, the end of the gap when
// it does not occur at all.
func instant(w time.Time, loc *time.Location) time.Time {
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	start, end := guess.ZoneBounds()
	// The offsets that can hold around w: the guess's own and those of
	// the periods on either side of it.
	var offsets []int
	_, o := guess.Zone()
	offsets = append(offsets, o)
	if !start.IsZero() {
		_, b := start.Add(-time.Nanosecond).Zone()
		offsets = append(offsets, b)
	}
	if !end.IsZero() {
		_, a := end.Zone()
		offsets = append(offsets, a)
	}
	var best time.Time
	for _, off := range offsets {
		u := w.Add(-time.Duration(off) * time.Second)
		if _, got := u.In(loc).Zone(); got == off && (best.IsZero() || u.Before(best)) {
			best = u
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: w lies between a transition T's local time before it (T +
	// the old offset) and after it (T + the new one). T is where the gap
	// ends.
	for _, t := range []time.Time{start, end} {
		if t.IsZero() {
			continue
		}
		_, before := t.Add(-time.Nanosecond).Zone()
		_, after := t.Zone()
		// The local times of T's two sides, written as UTC like w.
		lo, hi := t.Add(time.Duration(before)*time.Second), t.Add(time.Duration(after)*time.Second)
		if !w.Before(lo) && w.Before(hi) {
			return t
		}
	}
	return guess
}

// Interval is the schedule's typical period: the delay, or the time between
// two cron fires after t.
func (s Schedule) Interval(t time.Time) time.Duration {
	if !s.IsCron() {
		return s.Every
	}
	a := s.Next(t)
	return s.Next(a).Sub(a)
}

// String is the stored form: "every 30s", "cron 0 2 * * *", or for a
// cron read in a zone other than UTC "cron 0 2 * * * tz Europe/Berlin";
// then " jitter D" and " deadline D" when set (jitter.go).
func (s Schedule) String() string {
	t := ""
	switch {
	case s.IsCron() && s.loc != nil:
		t = "cron " + s.Cron + zoneSep + s.loc.String()
	case s.IsCron():
		t = "cron " + s.Cron
	case s.Every > 0:
		t = "every " + FormatDuration(s.Every)
	}
	if t == "" {
		return t
	}
	return t + s.optionsText()
}

// ParseSchedule reads the stored form written by String (a zone is also
// read after "every D": it is ignored).
func ParseSchedule(text string) (Schedule, error) {
	text, jitter, deadline, err := cutOptions(text)
	if err != nil {
		return Schedule{}, err
	}
	body, zone, hasZone := cutZone(text)
	s, err := parseBody(body)
	if err != nil {
		return s, err
	}
	s.jitter, s.deadline = jitter, deadline
	if !hasZone {
		return s, nil
	}
	loc, err := LoadZone(zone)
	if err != nil {
		return Schedule{}, fmt.Errorf("%w: %q: %v", ErrSchedule, text, err)
	}
	return s.InZone(loc), nil
}

// SplitZone splits a stored form (as a status row keeps it) into the
// schedule and the name of the zone its cron fields are read in: "UTC"
// when it names none. A jitter and a deadline are left out (SplitOptions
// reads them).
func SplitZone(text string) (schedule, zone string) {
	text, _, _ = SplitOptions(text)
	body, zone, ok := cutZone(text)
	if !ok || zone == "" {
		zone = "UTC"
	}
	return body, zone
}

// cutZone splits a stored form at its zone: "cron 0 2 * * * tz X" is
// "cron 0 2 * * *" and X.
func cutZone(text string) (body, zone string, ok bool) {
	text = strings.TrimSpace(text)
	if i := strings.LastIndex(text, zoneSep); i >= 0 {
		return strings.TrimSpace(text[:i]), strings.TrimSpace(text[i+len(zoneSep):]), true
	}
	return text, "", false
}

func parseBody(text string) (Schedule, error) {
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
	a := lastEnd.Add(s.offset)                // a jitter offset shifts the grid (jitter.go)
	k := (now.Sub(a) + s.Every - 1) / s.Every // the least k with a + k × every >= now
	return a.Add(k * s.Every)
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

// Override is an operator's setting of a job's schedule and zone (`jobs
// set`), stored as text in studio_job_setting.schedule: "every 30s" or
// "cron 0 3 * * *", either followed by " tz ZONE", or "tz ZONE" alone (the
// configured schedule, read in another zone).
type Override struct {
	Schedule Schedule       // zero: the configured schedule
	Zone     *time.Location // nil: the configured zone
}

// ParseOverride reads the stored form written by Override.String ("": no
// override).
func ParseOverride(text string) (Override, error) {
	text = strings.TrimSpace(text)
	body, zone, hasZone := cutZone(text)
	if z, ok := strings.CutPrefix(text, strings.TrimPrefix(zoneSep, " ")); ok {
		body, zone, hasZone = "", strings.TrimSpace(z), true
	}
	var o Override
	if hasZone {
		loc, err := LoadZone(zone)
		if err != nil {
			return Override{}, fmt.Errorf("%w: %q: %v", ErrSchedule, text, err)
		}
		o.Zone = loc
	}
	if body != "" {
		s, err := parseBody(body)
		if err != nil {
			return Override{}, err
		}
		o.Schedule = s
	}
	return o, nil
}

// String is the stored form; "" for no override.
func (o Override) String() string {
	t := ""
	if !o.Schedule.IsZero() {
		t = o.Schedule.InZone(nil).String()
	}
	switch {
	case o.Zone == nil:
		return t
	case t == "":
		return strings.TrimPrefix(zoneSep, " ") + o.Zone.String()
	}
	return t + zoneSep + o.Zone.String()
}

// Apply is the schedule in force under the override: the override's
// schedule in place of the configured one (read in the configured zone),
// and its zone in place of the configured zone.
func (o Override) Apply(configured Schedule) Schedule {
	s := configured
	if !o.Schedule.IsZero() {
		s = o.Schedule.InZone(configured.loc)
		// The jitter (and its offset) and the deadline are the
		// configuration's: an override replaces the times only.
		s.jitter, s.offset, s.deadline = configured.jitter, configured.offset, configured.deadline
	}
	if o.Zone != nil {
		s = s.InZone(o.Zone)
	}
	return s
}
