package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func defJob(t *testing.T) jobs.Job {
	t.Helper()
	s, err := jobs.Every(30 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return jobs.Job{ID: "nightly", Scope: jobs.ScopeInstallation, Schedule: s,
		Spec: jobs.TaskSpec{Command: []string{"./bin/report", "--day", "yester day"}}, Env: map[string]string{"B": "2", "A": "1"}}
}

func TestADefinitionsDigestDoesNotDependOnTheOrderOfItsFields(t *testing.T) {
	t.Parallel()
	want := jobs.DefinitionOf(defJob(t), nil)
	names := jobs.FieldNames(want)
	for range 20 { // map iteration order differs from one build of the map to the next
		d := jobs.Definition{}
		for i := len(names) - 1; i >= 0; i-- {
			if v, ok := want[names[i]]; ok {
				d[names[i]] = v
			}
		}
		if d.Digest() != want.Digest() || d.JSON() != want.JSON() {
			t.Fatalf("digest %s (%s) of the same fields set in reverse order, want %s (%s)", d.Digest(), d.JSON(), want.Digest(), want.JSON())
		}
	}
	if got := jobs.DefinitionOf(defJob(t), nil).Digest(); got != want.Digest() {
		t.Fatalf("a second definition of the same job: digest %s, want %s", got, want.Digest())
	}
}

func TestADefinitionsDigestChangesWithEachField(t *testing.T) {
	t.Parallel()
	cron := func(expr, zone string) jobs.Schedule {
		s, err := jobs.ParseCron(expr)
		if err != nil {
			t.Fatal(err)
		}
		loc, err := jobs.LoadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		return s.InZone(loc)
	}
	base := defJob(t)
	base.Schedule = cron("0 2 * * *", "Europe/Berlin")
	changes := map[string]func(j *jobs.Job){
		"scope":    func(j *jobs.Job) { j.Scope = jobs.ScopeInstance },
		"clusters": func(j *jobs.Job) { j.Scope, j.PerCluster = jobs.ScopeInstance, true },
		"schedule": func(j *jobs.Job) { j.Schedule = cron("0 3 * * *", "Europe/Berlin") },
		"tz":       func(j *jobs.Job) { j.Schedule = cron("0 2 * * *", "America/New_York") },
		"timeout":  func(j *jobs.Job) { j.Timeout = 7 * time.Minute },
		"missed":   func(j *jobs.Job) { j.Missed = jobs.MissedSkip },
		"lock":     func(j *jobs.Job) { j.Lock = "nightlyReport" },
		"task":     func(j *jobs.Job) { j.Spec.Command = []string{"./bin/report", "--day", "today"} },
		"env":      func(j *jobs.Job) { j.Env = map[string]string{"A": "1"} },
		"headers": func(j *jobs.Job) {
			j.Env = nil
			j.Spec = jobs.TaskSpec{HTTP: &jobs.HTTPSpec{Method: "POST", URL: "http://x/", Headers: map[string]string{"Authorization": "t"}}}
		},
	}
	for _, f := range jobs.DefinitionFields {
		if _, ok := changes[f.Name]; !ok {
			t.Errorf("field %q has no case here: add one", f.Name)
		}
	}
	want := jobs.DefinitionOf(base, nil)
	for name, change := range changes {
		j := base
		change(&j)
		got := jobs.DefinitionOf(j, nil)
		if got.Digest() == want.Digest() {
			t.Errorf("changing %s: the digest stayed %s (%s)", name, got.Digest(), got.JSON())
		}
		if name != "headers" && name != "clusters" && got[name] == want[name] {
			t.Errorf("changing %s: the field stayed %q", name, got[name])
		}
	}
}

func TestADefinitionShowsItsDefaultsAndNoSecret(t *testing.T) {
	t.Parallel()
	j := defJob(t)
	j.Env = map[string]string{"PGPASSWORD": "hunter2", "REPORT_DIR": "/srv"}
	j.Spec.Command = []string{"psql", "postgres://app:hunter2@db/app", "-c", "select 1"}
	scrub := func(s string) string { return strings.ReplaceAll(s, "hunter2", "xxxxx") }
	d := jobs.DefinitionOf(j, scrub)
	want := jobs.Definition{
		"scope": "installation", "schedule": "every 30m", "tz": "UTC", "timeout": "1h30m", "lock": "nightly",
		"task": "command: psql postgres://app:xxxxx@db/app -c 'select 1'", "env": "PGPASSWORD, REPORT_DIR",
	}
	if d.JSON() != want.JSON() {
		t.Fatalf("definition\n %s\nwant\n %s", d.JSON(), want.JSON())
	}
	if strings.Contains(d.JSON(), "hunter2") {
		t.Fatalf("a secret in %s", d.JSON())
	}
	if got := d.Value("missed"); got != "run-once" {
		t.Fatalf("missed left out shows %q, want run-once", got)
	}
}

func TestAFieldAtItsDefaultIsLeftOutSoAddingAFieldKeepsOldDigests(t *testing.T) {
	t.Parallel()
	d := jobs.DefinitionOf(defJob(t), nil)
	for _, name := range []string{"missed", "clusters", "headers"} {
		if _, ok := d[name]; ok {
			t.Errorf("field %q at its default is published as %q", name, d[name])
		}
	}
	// A field a newer replica publishes is listed after the known ones.
	names := jobs.FieldNames(jobs.Definition{"zz-new": "1"})
	if names[len(names)-1] != "zz-new" || names[0] != "scope" {
		t.Fatalf("field names %v", names)
	}
}
