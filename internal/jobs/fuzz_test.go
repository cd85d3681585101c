package jobs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
)

// Fuzz targets of issue 7, deliverable 10. `go test` runs their seeds (the
// f.Add calls and testdata/fuzz/<name>/); `go test -fuzz=<name>` explores.
// See docs/fuzzing.md.

// FuzzParse: the jobs walker never panics, every error it returns is a
// ConfigError naming the file and a field, and every job it accepts is
// whole: a valid unique id, a scope, one schedule that fires, one task.
func FuzzParse(f *testing.F) {
	f.Add([]byte(validConfig))
	for _, s := range []string{
		"",
		"jobs:",
		"jobs: []",
		"jobs: {}",
		"jobs: [1, 2]",
		"jobs:\n  - id: a\n    scope: instance\n    every: 1s\n    run: {sql: 'SELECT 1'}\n",
		"jobs:\n  - id: a\n    scope: instance\n    cron: '0 0 30 2 *'\n    run: {sql: 'SELECT 1'}\n",
		"jobs:\n  - id: a\n    scope: instance\n    cron: '*/0 * * * *'\n    run: {command: [x]}\n",
		"jobs:\n  - id: a\n    scope: instance\n    cron: '@every 1s'\n    run: {command: [x]}\n",
		"jobs:\n  - id: a\n    scope: instance\n    cron: 'TZ=Europe/Paris 0 2 * * *'\n    run: {command: [x]}\n",
		"jobs:\n  - id: a\n    scope: installation\n    every: 1m\n    timeout: -1s\n    run: {command: ['']}\n",
		"jobs:\n  - id: a\n    scope: installation\n    every: 1m\n    run: {http: {url: 'ftp://x'}}\n",
		"jobs:\n  - id: a\n    scope: installation\n    every: 1m\n    run: {http: {url: 'http://x', headers: {A: [1]}}}\n",
		"jobs:\n  - &j {id: a, scope: instance, every: 1s, run: {sql: x}}\n  - *j\n",
		"jobs:\n  - {id: a, id: b}\n",
		"jobs: !!binary aGVsbG8=\n",
		"jobs:\n  - ? [a, b]\n    : c\n",
		"jobs:\n  - id: studio-housekeeping\n    scope: instance\n    every: 1m\n    run: {sql: x}\n",
		"%YAML 1.2\n---\njobs: [{id: x}]\n...\n",
		"jobs:\n  - id: \"a\\u0000b\"\n",
		"a: &a [*a]\n",
		"jobs:\n  - {id: a, scope: installation, every: 1s, lock: scheduledTaskName, run: {sql: x}}\n  - {id: b, scope: installation, every: 1s, lock: scheduledTaskName, run: {sql: x}}\n",
		"jobs:\n  - {id: a, scope: installation, every: 1s, lock: b, run: {sql: x}}\n  - {id: b, scope: installation, every: 1s, run: {sql: x}}\n",
		"jobs:\n  - {id: a, scope: instance, every: 1s, lock: x, run: {sql: x}}\n",
		"jobs:\n  - {id: a, scope: installation, every: 1s, lock: studio-housekeeping, run: {sql: x}}\n",
		"jobs:\n  - {id: a, scope: installation, every: 1s, lock: \"Größenänderung\", run: {sql: x}}\n",
		"jobs:\n  - {id: a, scope: installation, every: 8785h, timeout: 25h, run: {sql: x}}\n",
		"jobs:\n  - {id: a, scope: installation, every: 1s, timeout: 1ns, run: {sql: x}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		list, err := jobs.Parse(configFile, b)
		if err != nil {
			var ce *jobs.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a ConfigError", err, err)
			}
			if ce.File != configFile || ce.Field == "" || ce.Msg == "" {
				t.Fatalf("error %q lacks its file, field or message: %+v", err, ce)
			}
			if !strings.HasPrefix(err.Error(), configFile) {
				t.Fatalf("error %q does not start with the file name", err)
			}
			if list != nil {
				t.Fatalf("Parse returned jobs with an error")
			}
			return
		}
		seen := map[string]bool{}
		lockTaken := map[string]bool{jobs.HousekeepingID: true}
		for _, j := range list {
			checkParsedJob(t, j)
			if seen[j.ID] {
				t.Fatalf("job id %q accepted twice", j.ID)
			}
			seen[j.ID] = true
			if j.Scope == jobs.ScopeInstallation {
				if lockTaken[j.LockName()] {
					t.Fatalf("job %q: lock %q accepted for a second job", j.ID, j.LockName())
				}
				lockTaken[j.LockName()] = true
			}
		}
	})
}

func checkParsedJob(t *testing.T, j jobs.Job) {
	t.Helper()
	if err := jobs.ValidateID(j.ID); err != nil {
		t.Fatalf("accepted job id %q: %v", j.ID, err)
	}
	if j.ID == jobs.HousekeepingID {
		t.Fatalf("accepted the built-in job's id")
	}
	if j.Scope != jobs.ScopeInstallation && j.Scope != jobs.ScopeInstance {
		t.Fatalf("job %q: accepted scope %q", j.ID, j.Scope)
	}
	if j.Schedule.IsZero() {
		t.Fatalf("job %q: accepted without a schedule", j.ID)
	}
	if j.Schedule.IsCron() && j.Schedule.Every != 0 {
		t.Fatalf("job %q: both every and cron", j.ID)
	}
	if !j.Schedule.IsCron() && j.Schedule.Every < jobs.MinEvery {
		t.Fatalf("job %q: every %s is under the minimum", j.ID, j.Schedule.Every)
	}
	if !j.Schedule.IsCron() && j.Schedule.Every > jobs.MaxEvery {
		t.Fatalf("job %q: every %s is over the maximum", j.ID, j.Schedule.Every)
	}
	checkFires(t, j.Schedule)
	if j.Timeout != 0 && (j.Timeout < jobs.MinTimeout || j.Timeout > jobs.MaxTimeout) {
		t.Fatalf("job %q: timeout %s out of bounds", j.ID, j.Timeout)
	}
	if err := locks.ValidateName(j.LockName()); err != nil {
		t.Fatalf("job %q: lock name %q: %v", j.ID, j.LockName(), err)
	}
	if j.Lock != "" && j.Scope != jobs.ScopeInstallation {
		t.Fatalf("job %q: a lock on a %s job", j.ID, j.Scope)
	}
	kinds := 0
	if len(j.Spec.Command) > 0 {
		kinds++
		if j.Spec.Command[0] == "" {
			t.Fatalf("job %q: empty program", j.ID)
		}
	}
	if j.Spec.SQL != "" {
		kinds++
		if strings.TrimSpace(j.Spec.SQL) == "" {
			t.Fatalf("job %q: blank sql", j.ID)
		}
	}
	if j.Spec.HTTP != nil {
		kinds++
		if j.Spec.HTTP.URL == "" || j.Spec.HTTP.Method == "" {
			t.Fatalf("job %q: http task without url or method: %+v", j.ID, j.Spec.HTTP)
		}
	}
	if kinds != 1 || j.Spec.Kind() == "" {
		t.Fatalf("job %q: %d task kinds (%+v)", j.ID, kinds, j.Spec)
	}
	// What the status row stores reads back as the same schedule.
	back, err := jobs.ParseSchedule(j.Schedule.String())
	if err != nil {
		t.Fatalf("job %q: stored schedule %q does not read back: %v", j.ID, j.Schedule.String(), err)
	}
	if back.String() != j.Schedule.String() {
		t.Fatalf("job %q: schedule %q reads back as %q", j.ID, j.Schedule.String(), back.String())
	}
}

// fuzzEpochs are the instants a fuzzed schedule must fire after: ordinary
// days, leap days, ends of month and year, and far ahead.
var fuzzEpochs = []time.Time{
	time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC),
	time.Date(2026, 12, 31, 23, 59, 30, 0, time.UTC),
	time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC),
	time.Date(2099, 6, 30, 12, 0, 0, 0, time.UTC),
}

// checkFires: a schedule that was accepted fires after each epoch, later
// than it, and Interval is not negative.
func checkFires(t *testing.T, s jobs.Schedule) {
	t.Helper()
	for _, at := range fuzzEpochs {
		next := s.Next(at)
		if s.IsCron() {
			// robfig/cron gives up after five years: 29 February on a
			// Monday may legitimately not fire within that from some
			// epochs, but it must from 2000 (ParseCron's own check).
			if next.IsZero() {
				if at.Year() == 2000 {
					t.Fatalf("cron %q: accepted but never fires after %s", s.Cron, at)
				}
				continue
			}
			if next.Location() != time.UTC {
				t.Fatalf("cron %q: next fire %s is not in UTC", s.Cron, next)
			}
		}
		if !next.After(at) {
			t.Fatalf("schedule %q: next fire %s is not after %s", s.String(), next, at)
		}
		if iv := s.Interval(at); iv < 0 {
			t.Fatalf("schedule %q: negative interval %s after %s", s.String(), iv, at)
		}
	}
}

// FuzzCronGuard: the guard around robfig/cron turns every panic into an
// ErrSchedule error; an accepted expression fires, in UTC, and survives the
// stored form.
func FuzzCronGuard(f *testing.F) {
	for _, s := range []string{
		"0 2 * * *", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight",
		"*/5 * * * *", "0 0 29 2 *", "0 0 30 2 *", "0 0 31 4 *", "0 0 29 2 1",
		"0-59/7 1,2,3 1-31/2 JAN-DEC/3 SUN-SAT", "0 0 * * 7", "0 0 * * 0-7",
		"*/0 * * * *", "0-0/0 * * * *", "1-0 * * * *", "60 * * * *", "* 24 * * *",
		"? * * * *", "* * ? * ?", "0 0 L * *", "0 0 1W * *", "0 0 * * 1#2",
		"@every 1s", "@every -1s", "@every 0s", "@reboot", "@", "@@", "@ daily",
		"CRON_TZ=UTC 0 2 * * *", "TZ=Nowhere/None 0 2 * * *", "CRON_TZ= 0 2 * * *", " TZ=UTC 0 0 * * *",
		"", " ", "\t0 2 * * *\n", "0 2 * * * *", "0 2 * *", "*", "* * * * * * *",
		"-1 * * * *", "1--2 * * * *", "1-2-3 * * * *", "/5 * * * *", "*/ * * * *", "*/-1 * * * *",
		"9999999999999999999 * * * *", "0-9223372036854775807 * * * *", "*/9223372036854775807 * * * *",
		"0 0 1 1 * extra", "０ ２ * * *", "0\x002 * * *",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := jobs.ParseCron(expr)
		if err != nil {
			if !errors.Is(err, jobs.ErrSchedule) {
				t.Fatalf("ParseCron(%q): error %v does not wrap ErrSchedule", expr, err)
			}
			if !s.IsZero() {
				t.Fatalf("ParseCron(%q): a schedule with an error: %+v", expr, s)
			}
			return
		}
		if !s.IsCron() || s.Cron != strings.TrimSpace(expr) {
			t.Fatalf("ParseCron(%q) = cron %q", expr, s.Cron)
		}
		checkFires(t, s)
		back, err := jobs.ParseSchedule(s.String())
		if err != nil {
			t.Fatalf("stored schedule %q does not read back: %v", s.String(), err)
		}
		if back.Cron != s.Cron {
			t.Fatalf("stored schedule %q reads back as cron %q", s.String(), back.Cron)
		}
		for _, at := range fuzzEpochs {
			if a, b := s.Next(at), back.Next(at); !a.Equal(b) {
				t.Fatalf("cron %q: next after %s is %s, %s after reading back", s.Cron, at, a, b)
			}
		}
	})
}

// FuzzParseSchedule: the stored form ("every 30s", "cron 0 2 * * *") that
// operator overrides are read from never panics and, once accepted, reads
// back the same.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{
		"every 30s", "every 1m30s", "every 1h", "every 0s", "every -1s", "every 999999h", "every 1ns",
		"every", "every ", "every 1", "every 1.5h", "every 2562047h47m16.854775807s", "every 2562048h",
		"cron 0 2 * * *", "cron @daily", "cron", "cron  ", "cron */0 * * * *", "cron @every 1s",
		"daily", "", " every 30s ", "EVERY 30s", "every\t30s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := jobs.ParseSchedule(text)
		if err != nil {
			if !errors.Is(err, jobs.ErrSchedule) {
				t.Fatalf("ParseSchedule(%q): error %v does not wrap ErrSchedule", text, err)
			}
			return
		}
		if s.IsZero() {
			t.Fatalf("ParseSchedule(%q) accepted an empty schedule", text)
		}
		if !s.IsCron() && s.Every < jobs.MinEvery {
			t.Fatalf("ParseSchedule(%q) accepted every %s", text, s.Every)
		}
		checkFires(t, s)
		back, err := jobs.ParseSchedule(s.String())
		if err != nil || back.String() != s.String() {
			t.Fatalf("ParseSchedule(%q) = %q, which reads back as %q, %v", text, s.String(), back.String(), err)
		}
	})
}
