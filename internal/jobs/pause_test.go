package jobs_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestAPauseWithAnEndIsOverFromItsEnd(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	end := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		s    jobs.Setting
		at   time.Time
		want bool
	}{
		{"not paused", jobs.Setting{}, t0, false},
		{"paused without an end, for ever", jobs.Setting{Paused: true}, t0.Add(1000 * time.Hour), true},
		{"paused before its end", jobs.Setting{Paused: true, PausedUntil: end}, end.Add(-time.Nanosecond), true},
		{"not paused at its end", jobs.Setting{Paused: true, PausedUntil: end}, end, false},
		{"not paused after its end, resume written or not", jobs.Setting{Paused: true, PausedUntil: end}, end.Add(time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.PausedAt(tc.at); got != tc.want {
				t.Errorf("PausedAt = %v, want %v", got, tc.want)
			}
		})
	}
	// The start's trace of the same pause: paused by alice until the end,
	// then not, with no resume recorded.
	tr := jobs.StartTrace{Pauses: []jobs.PauseChange{{At: t0, Paused: true, By: "alice", Until: end}}}
	for _, tc := range []struct {
		at   time.Time
		want bool
		by   string
	}{
		{t0.Add(-time.Second), false, ""}, {t0, true, "alice"}, {end.Add(-time.Second), true, "alice"}, {end, false, ""}, {end.Add(time.Hour), false, ""},
	} {
		if got, by := tr.PausedAt(tc.at); got != tc.want || by != tc.by {
			t.Errorf("trace PausedAt(%s) = %v, %q; want %v, %q", tc.at.Format(time.TimeOnly), got, by, tc.want, tc.by)
		}
	}
}
