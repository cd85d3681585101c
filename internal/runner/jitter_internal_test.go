package runner

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// A jittered fixed delay's grid (due times without a run) is end + offset
// + k × every; a jittered cron's, its shifted cron times. Every replica
// computes the same from the same end.
func TestTheGridOfAJitteredScheduleIsShiftedByItsOffset(t *testing.T) {
	t.Parallel()
	e, _ := jobs.Every(10 * time.Second)
	c, _ := jobs.ParseCron("* * * * *")
	end := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	for _, s := range []jobs.Schedule{e.WithJitter(5*time.Second).ForScope("billing", ""), c.WithJitter(30*time.Second).ForScope("billing", "")} {
		off := s.Offset()
		step := 10 * time.Second
		if s.IsCron() {
			step = time.Minute
		}
		first := end.Add(off).Add(step)
		if s.IsCron() {
			first = end.Add(off) // the minute of end, shifted, is after end
		}
		if n := s.Next(end); !n.Equal(first) {
			t.Fatalf("%s: Next(end) = %s, want %s", s, n, first)
		}
		at := first.Add(3*step + time.Second)
		if g := gridLast(s, end, at); !g.Equal(first.Add(3 * step)) {
			t.Errorf("%s: gridLast = %s, want %s", s, g, first.Add(3*step))
		}
		if g := gridNext(s, end, at); !g.Equal(first.Add(4 * step)) {
			t.Errorf("%s: gridNext = %s, want %s", s, g, first.Add(4*step))
		}
		if g := gridNext(s, end, end); !g.Equal(first) {
			t.Errorf("%s: gridNext(end) = %s, want %s", s, g, first)
		}
		n, f, last, _ := gridSpan(s, end, first.Add(time.Nanosecond), at)
		if n != 3 || !f.Equal(first.Add(step)) || !last.Equal(first.Add(3*step)) {
			t.Errorf("%s: gridSpan = %d, %s, %s", s, n, f, last)
		}
	}
}
