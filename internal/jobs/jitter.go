package jobs

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Deterministic jitter and the start deadline (issue 24, parts 2 and 4;
// docs/schedules.md, "Jitter and the start deadline").
//
// A job's jitter: is the bound of a fixed offset in [0, jitter), computed
// from a hash of the job id and the scope key (JitterOffset), so every
// replica computes the same offset for the same job and scope. A cron is
// shifted by it: each cron time plus the offset (Schedule.Next). A fixed
// delay keeps its times (end + every); its jitter delays a run that would
// start at once (internal/runner, jitter.go).
//
// A job's deadline: is how late after its nominal time an occurrence may
// still start; one that cannot is recorded skipped/deadline and does not
// run (internal/runner, deadline_skip.go).

// Stored form of the options after the schedule (and its zone): "every 1h
// jitter 5m deadline 10m". No cron field, duration or zone name contains
// them.
const (
	jitterSep   = " jitter "
	deadlineSep = " deadline "
)

// MinDeadline is the shortest deadline: a timer fires a few milliseconds
// after its due time, and a shorter deadline would skip runs that are on
// time. MaxDeadline and MaxJitter bound typos.
const (
	MinDeadline = time.Second
	MaxDeadline = MaxEvery
	MaxJitter   = MaxEvery
)

// WithJitter returns s with jitter bound d (0: none) and no offset yet
// (ForScope sets it).
func (s Schedule) WithJitter(d time.Duration) Schedule {
	s.jitter, s.offset = d, 0
	return s
}

// WithDeadline returns s with start deadline d (0: none).
func (s Schedule) WithDeadline(d time.Duration) Schedule {
	s.deadline = d
	return s
}

// Jitter is the configured jitter bound (0: none).
func (s Schedule) Jitter() time.Duration { return s.jitter }

// Offset is the jitter offset in force (0 until ForScope).
func (s Schedule) Offset() time.Duration { return s.offset }

// Deadline is the start deadline (0: none).
func (s Schedule) Deadline() time.Duration { return s.deadline }

// ForScope returns s with the jitter offset of job in scope scopeKey ("" for
// an installation job, the replica id for an instance job, the cluster for
// a duty): JitterOffset(s.Jitter(), job, scopeKey).
func (s Schedule) ForScope(job, scopeKey string) Schedule {
	s.offset = JitterOffset(s.jitter, job, scopeKey)
	return s
}

// JitterOffset is the fixed offset of job in scope scopeKey for a jitter
// bound: a whole number of milliseconds in [0, jitter), from the FNV-1a
// hash of the job id, a zero byte and the scope key. It is the same on
// every replica and in every version: changing it would move every
// jittered job's times. 0 for a jitter under a millisecond.
func JitterOffset(jitter time.Duration, job, scopeKey string) time.Duration {
	steps := uint64(jitter / time.Millisecond)
	if steps == 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(job))
	h.Write([]byte{0})
	h.Write([]byte(scopeKey))
	return time.Duration(h.Sum64()%steps) * time.Millisecond
}

// optionsText is the stored form of s's jitter and deadline: "" when
// neither is set.
func (s Schedule) optionsText() string {
	t := ""
	if s.jitter > 0 {
		t += jitterSep + FormatDuration(s.jitter)
	}
	if s.deadline > 0 {
		t += deadlineSep + FormatDuration(s.deadline)
	}
	return t
}

// SplitOptions splits a stored form (as a status row keeps it) into the
// schedule with its zone, the jitter and the deadline (0 when not given or
// malformed): "every 1h jitter 5m deadline 10m" is "every 1h", 5m and 10m.
func SplitOptions(text string) (schedule string, jitter, deadline time.Duration) {
	rest, j, d, err := cutOptions(text)
	if err != nil {
		return strings.TrimSpace(text), 0, 0
	}
	return rest, j, d
}

// cutOptions cuts " deadline D" and then " jitter D" off the end of a
// stored form.
func cutOptions(text string) (rest string, jitter, deadline time.Duration, err error) {
	rest = strings.TrimSpace(text)
	for _, o := range []struct {
		sep string
		d   *time.Duration
	}{{deadlineSep, &deadline}, {jitterSep, &jitter}} {
		i := strings.LastIndex(rest, o.sep)
		if i < 0 {
			continue
		}
		v := strings.TrimSpace(rest[i+len(o.sep):])
		d, perr := time.ParseDuration(v)
		if perr != nil || d < 0 {
			return "", 0, 0, fmt.Errorf("%w: %q: %s%q is not a duration", ErrSchedule, text, strings.TrimSpace(o.sep)+" ", v)
		}
		*o.d, rest = d, strings.TrimSpace(rest[:i])
	}
	return rest, jitter, deadline, nil
}

// ShortestGap is the shortest time between two successive fires of s: the
// delay of a fixed delay; for a cron, the shortest gap among its first
// gapSamples times after 1 January 2026 in its zone (without a jitter
// offset). A jitter must be shorter than it.
func (s Schedule) ShortestGap() time.Duration {
	if !s.IsCron() {
		return s.Every
	}
	base := s
	base.offset = 0
	t := base.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	shortest := time.Duration(0)
	for i := 0; i < gapSamples && !t.IsZero(); i++ {
		n := base.Next(t)
		if n.IsZero() {
			break
		}
		if g := n.Sub(t); shortest == 0 || g < shortest {
			shortest = g
		}
		t = n
	}
	return shortest
}

// gapSamples is how many cron times ShortestGap looks at: more than a
// year of a daily cron, a week of a cron every 15 minutes.
const gapSamples = 1000
