package jobs_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestJitterOffsetIsTheSameForAJobAndScopeAndWithinItsBound(t *testing.T) {
	t.Parallel()
	const jitter = 10 * time.Minute
	seen := map[time.Duration]bool{}
	for _, job := range []string{"billing", "report", "a", "install-01", "install-02", "install-40"} {
		for _, scope := range []string{"", "replica-a", "replica-b", "c1"} {
			off := jobs.JitterOffset(jitter, job, scope)
			if again := jobs.JitterOffset(jitter, job, scope); again != off {
				t.Fatalf("%s/%s: offset %s then %s", job, scope, off, again)
			}
			if off < 0 || off >= jitter {
				t.Errorf("%s/%s: offset %s, want in [0, %s)", job, scope, off, jitter)
			}
			if off%time.Millisecond != 0 {
				t.Errorf("%s/%s: offset %s is not whole milliseconds", job, scope, off)
			}
			seen[off] = true
		}
	}
	if len(seen) < 20 {
		t.Errorf("24 jobs and scopes got %d distinct offsets: the hash does not spread them", len(seen))
	}
	for _, tiny := range []time.Duration{0, time.Microsecond, 999 * time.Microsecond} {
		if got := jobs.JitterOffset(tiny, "billing", ""); got != 0 {
			t.Errorf("jitter %s: offset %s, want 0", tiny, got)
		}
	}
}

func TestJitterOffsetValuesDoNotChangeBetweenVersions(t *testing.T) {
	t.Parallel()
	// Pinned: every replica of every version must agree.
	tests := []struct {
		jitter     time.Duration
		job, scope string
		want       time.Duration
	}{
		{time.Hour, "billing", "", pinned["billing/"]},
		{time.Hour, "report", "c1", pinned["report/c1"]},
		{5 * time.Second, "tick", "replica-a", pinned["tick/replica-a"]},
	}
	for _, tt := range tests {
		if got := jobs.JitterOffset(tt.jitter, tt.job, tt.scope); got != tt.want {
			t.Errorf("JitterOffset(%s, %q, %q) = %s, want %s", tt.jitter, tt.job, tt.scope, got, tt.want)
		}
	}
}

// pinned are JitterOffset's values as first shipped.
var pinned = map[string]time.Duration{
	"billing/":       1009748 * time.Millisecond,
	"report/c1":      225413 * time.Millisecond,
	"tick/replica-a": 4938 * time.Millisecond,
}

func TestAJitteredCronIsTheCronShiftedByItsOffsetAndNeverBeforeIt(t *testing.T) {
	t.Parallel()
	base, err := jobs.ParseCron("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	j := base.WithJitter(10 * time.Minute)
	at := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	for _, scope := range []string{"", "replica-a", "replica-b"} {
		s := j.ForScope("billing", scope)
		off := s.Offset()
		if off != jobs.JitterOffset(10*time.Minute, "billing", scope) {
			t.Fatalf("scope %q: offset %s", scope, off)
		}
		// Walk a day of times from a moment inside the shifted hour.
		tt := at.Add(-time.Second)
		for i := 0; i < 24; i++ {
			n := s.Next(tt)
			c := base.Next(n.Add(-off - time.Nanosecond))
			if !n.Equal(c.Add(off)) {
				t.Fatalf("scope %q: Next(%s) = %s, want the cron time %s plus %s", scope, tt, n, c, off)
			}
			if n.Before(c) || !n.After(tt) {
				t.Fatalf("scope %q: Next(%s) = %s: before its cron time %s or not after t", scope, tt, n, c)
			}
			tt = n
		}
		// From just before a shifted time, the next is that time; from it,
		// the next hour's.
		shifted := at.Add(off)
		if n := s.Next(shifted.Add(-time.Millisecond)); !n.Equal(shifted) {
			t.Errorf("scope %q: Next(just before %s) = %s", scope, shifted, n)
		}
		if n := s.Next(shifted); !n.Equal(shifted.Add(time.Hour)) {
			t.Errorf("scope %q: Next(%s) = %s, want an hour later", scope, shifted, n)
		}
	}
}

func TestAJitteredScheduleKeepsItsOptionsInItsStoredForm(t *testing.T) {
	t.Parallel()
	berlin, err := jobs.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := jobs.ParseCron("30 2 * * *")
	e, _ := jobs.Every(time.Hour)
	tests := []struct {
		name     string
		s        jobs.Schedule
		text     string
		schedule string // SplitZone's
		zone     string
	}{
		{"every with both", e.WithJitter(5 * time.Minute).WithDeadline(10 * time.Minute), "every 1h jitter 5m deadline 10m", "every 1h", "UTC"},
		{"a zoned cron with a jitter", c.InZone(berlin).WithJitter(90 * time.Second), "cron 30 2 * * * tz Europe/Berlin jitter 1m30s", "cron 30 2 * * *", "Europe/Berlin"},
		{"a cron with a deadline", c.WithDeadline(time.Hour), "cron 30 2 * * * deadline 1h", "cron 30 2 * * *", "UTC"},
		{"neither", c, "cron 30 2 * * *", "cron 30 2 * * *", "UTC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.s.String(); got != tt.text {
				t.Fatalf("String = %q, want %q", got, tt.text)
			}
			back, err := jobs.ParseSchedule(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Equal(tt.s) {
				t.Errorf("ParseSchedule(%q) = %v, want %v", tt.text, back, tt.s)
			}
			if s, z := jobs.SplitZone(tt.text); s != tt.schedule || z != tt.zone {
				t.Errorf("SplitZone = %q, %q; want %q, %q", s, z, tt.schedule, tt.zone)
			}
			rest, j, d := jobs.SplitOptions(tt.text)
			if j != tt.s.Jitter() || d != tt.s.Deadline() {
				t.Errorf("SplitOptions = %q, %s, %s", rest, j, d)
			}
		})
	}
	if _, err := jobs.ParseSchedule("every 1h jitter soon"); err == nil {
		t.Error("a stored jitter that is not a duration parsed")
	}
}

func TestAnOverrideKeepsTheConfiguredJitterOffsetAndDeadline(t *testing.T) {
	t.Parallel()
	c, _ := jobs.ParseCron("0 * * * *")
	configured := c.WithJitter(10*time.Minute).WithDeadline(time.Minute).ForScope("billing", "")
	o, err := jobs.ParseOverride("cron 30 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	s := o.Apply(configured)
	if s.Cron != "30 * * * *" || s.Jitter() != configured.Jitter() || s.Offset() != configured.Offset() || s.Deadline() != time.Minute {
		t.Fatalf("Apply = %v (jitter %s offset %s deadline %s)", s, s.Jitter(), s.Offset(), s.Deadline())
	}
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	if n := s.Next(at); !n.Equal(at.Add(30*time.Minute + configured.Offset())) {
		t.Errorf("Next = %s, want 00:30 plus the offset", n)
	}
}

func TestJitterAndDeadlineAreReadFromTheConfiguration(t *testing.T) {
	t.Parallel()
	got, err := jobs.Parse("jobs.yaml", []byte(head+"    scope: installation\n    every: 1h\n    jitter: 5m\n    deadline: 2m\n"+cmd+
		"  - id: nightly\n    scope: instance\n    cron: \"0 2 * * *\"\n    tz: Europe/Berlin\n    jitter: 0s\n"+cmd))
	if err != nil {
		t.Fatal(err)
	}
	if s := got[0].Schedule; s.Jitter() != 5*time.Minute || s.Deadline() != 2*time.Minute || s.Offset() != 0 {
		t.Errorf("report: jitter %s deadline %s offset %s", s.Jitter(), s.Deadline(), s.Offset())
	}
	if s := got[1].Schedule; s.Jitter() != 0 || s.Deadline() != 0 || s.String() != "cron 0 2 * * * tz Europe/Berlin" {
		t.Errorf("nightly: %q jitter %s deadline %s", s, s.Jitter(), s.Deadline())
	}
	// A cron's shortest gap counts in its zone: 02:00 Berlin is 23 hours
	// from the day before on the spring-forward night.
	_, err = jobs.Parse("jobs.yaml", []byte(head+"    scope: instance\n    cron: \"0 2 * * *\"\n    tz: Europe/Berlin\n    jitter: 23h30m\n"+cmd))
	if err == nil {
		t.Error("a jitter of 23h30m on a daily cron in Berlin was accepted")
	}
}

// A jittered fixed delay is due every + offset after an end; its grid of
// due times without a run (paused, missed) is end + offset + k × every,
// which DueAfter's missed: skip follows.
func TestAJitteredFixedDelayIsDueEveryPlusItsOffsetAfterAnEnd(t *testing.T) {
	t.Parallel()
	e, _ := jobs.Every(time.Hour)
	s := e.WithJitter(10*time.Minute).ForScope("billing", "")
	off := s.Offset()
	if off == 0 {
		t.Fatal("offset 0: pick another id")
	}
	end := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	if n := s.Next(end); !n.Equal(end.Add(time.Hour + off)) {
		t.Errorf("Next = %s, want end + 1h + %s", n, off)
	}
	if d := jobs.DueAfter(s, end, end.Add(30*time.Minute), jobs.MissedRunOnce); !d.Equal(end.Add(time.Hour + off)) {
		t.Errorf("DueAfter ahead = %s", d)
	}
	now := end.Add(5*time.Hour + 30*time.Minute)
	if d := jobs.DueAfter(s, end, now, jobs.MissedSkip); !d.Equal(end.Add(off).Add(6 * time.Hour)) {
		t.Errorf("DueAfter skip = %s, want end + offset + 6h", d)
	}
	if d := jobs.DueAfter(s, end, now, jobs.MissedRunOnce); !d.Equal(now) {
		t.Errorf("DueAfter run-once = %s, want now", d)
	}
	if d := jobs.DueAfter(s, time.Time{}, now, jobs.MissedRunOnce); !d.Equal(now) {
		t.Errorf("DueAfter never ran = %s, want now (the runner delays it)", d)
	}
}
