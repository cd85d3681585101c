package jobs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestNextOfAFixedDelayCountsFromTheEndOfTheRun(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		d    time.Duration
		end  time.Time
		want time.Time
	}{
		{"30s after a run that ended at noon UTC", 30 * time.Second,
			time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)},
		{"1h30m after a run that ended a millisecond before midnight", 90 * time.Minute,
			time.Date(2026, 12, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC), time.Date(2027, 1, 1, 1, 29, 59, int(999*time.Millisecond), time.UTC)},
		{"the same instant whatever the zone of the end", 10 * time.Second,
			time.Date(2026, 11, 1, 1, 59, 55, 0, la), time.Date(2026, 11, 1, 1, 59, 55, 0, la).Add(10 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := every(t, tt.d).Next(tt.end); !got.Equal(tt.want) {
				t.Errorf("every %s: Next(%s) = %s, want %s", tt.d, tt.end, got, tt.want)
			}
		})
	}
}

func TestNextOfACronIsComputedInUTC(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		expr string
		end  time.Time
		want time.Time
	}{
		{"0 2 * * * after 01:00 UTC fires at 02:00 UTC the same day", "0 2 * * *",
			time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)},
		{"0 2 * * * after 01:00 in Los Angeles (09:00 UTC) fires at 02:00 UTC the next day", "0 2 * * *",
			time.Date(2026, 11, 30, 1, 0, 0, 0, la), time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)},
		{"0 2 * * * exactly at 02:00 UTC fires the next day, never the same instant", "0 2 * * *",
			time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)},
		{"*/15 * * * * after 10:07:30 fires at 10:15", "*/15 * * * *",
			time.Date(2026, 11, 30, 10, 7, 30, 0, time.UTC), time.Date(2026, 11, 30, 10, 15, 0, 0, time.UTC)},
		{"@daily after noon fires at the next midnight UTC", "@daily",
			time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"0 0 29 2 * after March 2026 fires on 29 February 2028", "0 0 29 2 *",
			time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := cron(t, tt.expr).Next(tt.end)
			if !got.Equal(tt.want) {
				t.Errorf("cron %q: Next(%s) = %s, want %s", tt.expr, tt.end, got, tt.want)
			}
			if got.Location() != time.UTC {
				t.Errorf("cron %q: Next(%s) = %s is not in UTC", tt.expr, tt.end, got)
			}
		})
	}
}

// TestACronIgnoresTheLocalZone runs in a child process whose zone is
// America/Los_Angeles, and sets time.Local there too: setting it in this
// process would race with every goroutine that calls time.Now.
func TestACronIgnoresTheLocalZone(t *testing.T) {
	t.Parallel()
	if !runInChild(t, "TZ=America/Los_Angeles") {
		return
	}
	if _, off := time.Date(2026, 11, 30, 0, 0, 0, 0, time.Local).Zone(); off != -8*3600 {
		t.Fatalf("the child's zone is %s, offset %ds; want Los Angeles (-28800s)", time.Local, off)
	}
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Date(2026, 11, 30, 1, 0, 0, 0, la) // 09:00 UTC
	want := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	check := func(how string, s jobs.Schedule) {
		t.Helper()
		for _, e := range []time.Time{end, end.UTC(), end.Local()} {
			if got := s.Next(e); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("%s: Next(%s) = %s, want %s (02:00 UTC, not 02:00 in Los Angeles)", how, e, got, want)
			}
		}
		if got := s.Interval(end); got != 24*time.Hour {
			t.Errorf("%s: Interval = %s, want 24h", how, got)
		}
	}
	check("in a process whose zone is Los Angeles", cron(t, "0 2 * * *"))

	saved := time.Local
	time.Local = la
	defer func() { time.Local = saved }()
	check("with time.Local set to Los Angeles", cron(t, "0 2 * * *"))
}

// TestACronParsedBeforeTheLocalZoneChangesStaysUTC sets time.Local too, in
// a child process. robfig/cron stamps each schedule with the time.Local of
// the moment of parsing and treats it as "the zone of the time given to
// Next" only while that pointer is still time.Local; once time.Local is
// another value, Next converts into the zone captured at parse time.
func TestACronParsedBeforeTheLocalZoneChangesStaysUTC(t *testing.T) {
	t.Parallel()
	if !runInChild(t) {
		return
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	saved := time.Local
	defer func() { time.Local = saved }()

	time.Local = ny
	s := cron(t, "0 2 * * *")
	time.Local = la
	end := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	want := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	if got := s.Next(end); !got.Equal(want) {
		t.Errorf("parsed under %s, evaluated under %s: Next(%s) = %s, want %s", ny, la, end, got.UTC(), want)
	}
}

func TestParseCronRejectsATimeZonePrefix(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		"CRON_TZ=America/New_York 0 2 * * *",
		"TZ=UTC 0 2 * * *",
		"  CRON_TZ=UTC 0 2 * * *",
		"CRON_TZ=UTC",     // without a space robfig/cron panics (slice bounds)
		"TZ=Europe/Paris", // likewise
		"TZ=",
	} {
		t.Run(expr, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.ParseCron(expr)
			if !errors.Is(err, jobs.ErrSchedule) {
				t.Fatalf("ParseCron(%q) = %v, want an ErrSchedule", expr, err)
			}
			want := "a time zone prefix is not allowed; give the zone with tz: (config) or --tz (jobs set)"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ParseCron(%q) = %q, want it to say %q", expr, err, want)
			}
		})
	}
}

func TestParseCronRejectsGarbageWithoutPanicking(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, want string
	}{
		{"an empty expression", "", "invalid schedule: empty cron expression"},
		{"only blanks", "   ", "invalid schedule: empty cron expression"},
		{"a step of zero", "*/0 * * * *", "step of range should be a positive number"},
		{"a step of zero in a range", "1-5/0 * * * *", "step of range should be a positive number"},
		{"a range beyond the field", "0-60 * * * *", "end of range (60) above maximum (59)"},
		{"a very long range", "0-99999999999999999999 * * * *", "failed to parse int"},
		{"a reversed range", "5-1 * * * *", "beginning of range (5) beyond end of range (1)"},
		{"a negative number", "-1 * * * *", "failed to parse int"},
		{"too many hyphens", "1-2-3 * * * *", "too many hyphens"},
		{"too many slashes", "*/2/3 * * * *", "too many slashes"},
		{"four fields", "0 2 * *", "expected exactly 5 fields, found 4"},
		{"six fields (seconds are not accepted)", "0 0 2 * * *", "expected exactly 5 fields, found 6"},
		{"words", "every day at two", "expected exactly 5 fields, found 4"},
		{"an unknown descriptor", "@fortnightly", "unrecognized descriptor"},
		{"@every (use every: instead)", "@every 5m", "use every: instead of @every"},
		{"a month name out of place", "0 2 jan * *", "failed to parse int"},
		{"a huge step", "*/99999999999999999999 * * * *", "failed to parse int"},
		{"a lone star", "*", "expected exactly 5 fields, found 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := jobs.ParseCron(tt.expr)
			if err == nil {
				t.Fatalf("ParseCron(%q) = %v, want an error", tt.expr, s)
			}
			if !errors.Is(err, jobs.ErrSchedule) {
				t.Errorf("ParseCron(%q) = %v, want it to wrap ErrSchedule", tt.expr, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseCron(%q) = %q, want it to contain %q", tt.expr, err, tt.want)
			}
		})
	}
}

// FuzzParseCron checks that no input makes ParseCron panic, and that an
// accepted expression fires, in UTC, after any time.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{
		"0 2 * * *", "*/0 * * * *", "TZ=UTC", "CRON_TZ=UTC", "CRON_TZ=UTC 0 2 * * *", "0 0 30 2 *",
		"@daily", "@every 1s", "1-5/2 * * * 1-5", "0-59/100000000000 * * * *", "* * * * 7", "?", "@",
	} {
		f.Add(s)
	}
	start := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := jobs.ParseCron(expr)
		if err != nil {
			if !errors.Is(err, jobs.ErrSchedule) {
				t.Fatalf("ParseCron(%q) = %v, not an ErrSchedule", expr, err)
			}
			return
		}
		next := s.Next(start)
		if next.IsZero() || !next.After(start) {
			t.Fatalf("ParseCron(%q) accepted, but Next(%s) = %s", expr, start, next)
		}
	})
}

func TestParseCronRejectsACronThatNeverFires(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"0 0 30 2 *", "0 0 31 4 *", "0 0 31 11 *"} {
		_, err := jobs.ParseCron(expr)
		want := `invalid schedule: cron "` + expr + `" never fires`
		if err == nil || err.Error() != want {
			t.Errorf("ParseCron(%q) = %v, want %q", expr, err, want)
		}
	}
}

func TestEveryRejectsANonPositiveDelay(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := jobs.Every(d)
		if !errors.Is(err, jobs.ErrSchedule) || !strings.Contains(err.Error(), "every must be positive") {
			t.Errorf("Every(%s) = %v, want an ErrSchedule saying every must be positive", d, err)
		}
	}
}

func TestScheduleStringAndParseScheduleRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sched jobs.Schedule
		text  string
	}{
		{"a 30s delay is stored as every 30s", every(t, 30*time.Second), "every 30s"},
		{"a 1m30s delay is stored as every 1m30s", every(t, 90*time.Second), "every 1m30s"},
		{"a 1h delay is stored as every 1h", every(t, time.Hour), "every 1h"},
		{"a 2h5m delay is stored as every 2h5m", every(t, 2*time.Hour+5*time.Minute), "every 2h5m"},
		{"a 1h0m30s delay keeps its zero minutes", every(t, time.Hour+30*time.Second), "every 1h0m30s"},
		{"a 1.5s delay is stored as every 1.5s", every(t, 1500*time.Millisecond), "every 1.5s"},
		{"a daily cron is stored as cron 0 2 * * *", cron(t, "0 2 * * *"), "cron 0 2 * * *"},
		{"a descriptor is stored as cron @hourly", cron(t, "@hourly"), "cron @hourly"},
		{"a cron with ranges and steps keeps its text", cron(t, "*/5 9-17 * * 1-5"), "cron */5 9-17 * * 1-5"},
	}
	start := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.sched.String(); got != tt.text {
				t.Fatalf("String() = %q, want %q", got, tt.text)
			}
			back, err := jobs.ParseSchedule(tt.text)
			if err != nil {
				t.Fatalf("ParseSchedule(%q): %v", tt.text, err)
			}
			if back.String() != tt.text || back.Every != tt.sched.Every || back.Cron != tt.sched.Cron {
				t.Errorf("ParseSchedule(%q) = %+v, want %+v", tt.text, back, tt.sched)
			}
			if got, want := back.Next(start), tt.sched.Next(start); !got.Equal(want) {
				t.Errorf("ParseSchedule(%q).Next = %s, want %s", tt.text, got, want)
			}
		})
	}
}

func TestAZeroScheduleHasNoStoredForm(t *testing.T) {
	t.Parallel()
	var s jobs.Schedule
	if !s.IsZero() || s.IsCron() || s.String() != "" {
		t.Errorf("zero Schedule: IsZero %v, IsCron %v, String %q; want true, false, \"\"", s.IsZero(), s.IsCron(), s.String())
	}
}

func TestParseScheduleRejectsWhatStringNeverWrites(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text, want string
	}{
		{"an empty text", "", `invalid schedule: "": want "every DURATION" or "cron EXPR"`},
		{"an unknown kind", "daily 02:00", `invalid schedule: "daily 02:00": want "every DURATION" or "cron EXPR"`},
		{"a bare duration", "30s", `invalid schedule: "30s": want "every DURATION" or "cron EXPR"`},
		{"every without a unit", "every 30", `invalid schedule: "every 30": time: missing unit in duration "30"`},
		{"every with a negative delay", "every -5s", "invalid schedule: every must be positive, got -5s"},
		{"every zero", "every 0s", "invalid schedule: every must be positive, got 0s"},
		{"every below the minimum", "every 10ms", `invalid schedule: "every 10ms": every is shorter than the minimum 1s`},
		{"cron without an expression", "cron ", "invalid schedule: empty cron expression"},
		{"cron with a time zone", "cron TZ=UTC 0 2 * * *", `invalid schedule: cron "TZ=UTC 0 2 * * *": a time zone prefix is not allowed; give the zone with tz: (config) or --tz (jobs set)`},
		{"cron that never fires", "cron 0 0 30 2 *", `invalid schedule: cron "0 0 30 2 *" never fires`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.ParseSchedule(tt.text)
			if err == nil || err.Error() != tt.want {
				t.Errorf("ParseSchedule(%q) = %v, want %q", tt.text, err, tt.want)
			}
			if !errors.Is(err, jobs.ErrSchedule) {
				t.Errorf("ParseSchedule(%q) = %v, want it to wrap ErrSchedule", tt.text, err)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 15, 10, 7, 0, 0, time.UTC)
	tests := []struct {
		name  string
		sched jobs.Schedule
		want  time.Duration
	}{
		{"of a 45s delay is 45s", every(t, 45*time.Second), 45 * time.Second},
		{"of a 2h delay is 2h", every(t, 2*time.Hour), 2 * time.Hour},
		{"of a cron every minute is 1m", cron(t, "* * * * *"), time.Minute},
		{"of a cron every 15 minutes is 15m", cron(t, "*/15 * * * *"), 15 * time.Minute},
		{"of a daily cron is 24h", cron(t, "0 2 * * *"), 24 * time.Hour},
		{"of a weekly cron is 168h", cron(t, "0 2 * * 1"), 7 * 24 * time.Hour},
		{"of a monthly cron in January 2026 is February's 28 days", cron(t, "0 0 1 * *"), 28 * 24 * time.Hour},
		{"of a cron at 9 and 17 is the gap after the next fire (17:00 to 09:00)", cron(t, "0 9,17 * * *"), 16 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.sched.Interval(at); got != tt.want {
				t.Errorf("%s: Interval(%s) = %s, want %s", tt.sched, at, got, tt.want)
			}
		})
	}
}

func TestFormatDurationDropsZeroUnitsAndRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{500 * time.Millisecond, "500ms"},
		{1500 * time.Millisecond, "1.5s"},
		{30 * time.Second, "30s"},
		{time.Minute, "1m"},
		{90 * time.Second, "1m30s"},
		{10*time.Minute + 500*time.Millisecond, "10m0.5s"},
		{time.Hour, "1h"},
		{2*time.Hour + 5*time.Minute, "2h5m"},
		{time.Hour + 30*time.Second, "1h0m30s"},
		{24 * time.Hour, "24h"},
	}
	for _, tt := range tests {
		got := jobs.FormatDuration(tt.d)
		if got != tt.want {
			t.Errorf("FormatDuration(%s) = %q, want %q", tt.d, got, tt.want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != tt.d {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", got, back, err, tt.d)
		}
	}
}

func TestParseScheduleReadsTheLongFormOfOlderReplicas(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]time.Duration{"every 1m0s": time.Minute, "every 1h0m0s": time.Hour, "every 2h5m0s": 2*time.Hour + 5*time.Minute} {
		s, err := jobs.ParseSchedule(text)
		if err != nil || s.Every != want {
			t.Errorf("ParseSchedule(%q) = %+v, %v; want every %s", text, s, err, want)
		}
	}
}

// LocalDue keeps a due time exact while the replica's estimate of
// database time and the database's now of the read agree within DueSnap,
// and moves it by their difference beyond.
func TestLocalDue(t *testing.T) {
	due := time.Date(2026, 11, 30, 9, 1, 0, 0, time.UTC)
	db := due.Add(-40 * time.Second)
	for _, c := range []struct {
		local time.Duration // the replica's estimate minus the database's now
		want  time.Time
	}{
		{0, due},
		{-time.Millisecond, due}, // the heartbeat's bias: no longer 09:00:59.999
		{3 * time.Millisecond, due},
		{jobs.DueSnap, due},
		{-jobs.DueSnap, due},
		{40 * time.Second, due.Add(40 * time.Second)}, // a replica 40 s fast fires at the database's time
		{-2 * time.Second, due.Add(-2 * time.Second)},
	} {
		if got := jobs.LocalDue(due, db, db.Add(c.local)); !got.Equal(c.want) {
			t.Errorf("estimate %s off: %s, want %s", c.local, got.Format(time.RFC3339Nano), c.want.Format(time.RFC3339Nano))
		}
	}
}
