package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
)

// oneSetting is a Settings that answers one setting for every job.
type oneSetting struct{ s jobs.Setting }

func (o *oneSetting) Get(context.Context, string) (jobs.Setting, error) { return o.s, nil }
func (o *oneSetting) Invalidate(string)                                 {}
func (o *oneSetting) InvalidateAll()                                    {}
func (o *oneSetting) Refresh(context.Context) ([]string, error)         { return nil, nil }

// A schedule override is parsed once per change, not at every fire: the
// fires that read an unchanged override allocate nothing, and a changed
// one is parsed (and a malformed one reported) at the next fire.
func TestAScheduleOverrideIsParsedOncePerChange(t *testing.T) {
	configured, err := jobs.Every(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	set := &oneSetting{s: jobs.Setting{Schedule: "cron */5 * * * *"}}
	r := &Runner{o: Options{Settings: set}}
	js := &jobState{job: jobtask.Job{Job: jobs.Job{ID: "report", Scope: jobs.ScopeInstance, Schedule: configured}}}
	ctx := context.Background()

	sched, _, invalid, _, err := r.settings(ctx, js)
	if err != nil || invalid != "" || sched.Cron != "*/5 * * * *" {
		t.Fatalf("settings = %v, %q, %v; want the cron override", sched, invalid, err)
	}
	first := js.override.Load()
	if allocs := testing.AllocsPerRun(100, func() { r.settings(ctx, js) }); allocs != 0 {
		t.Errorf("a fire with an unchanged override allocates %.0f times, want 0 (it is parsed again)", allocs)
	}
	if js.override.Load() != first {
		t.Error("an unchanged override was parsed again")
	}

	set.s.Schedule = "every 30s"
	if sched, _, invalid, _, _ := r.settings(ctx, js); invalid != "" || sched.Every != 30*time.Second {
		t.Errorf("after a change: settings = %v, %q; want every 30s", sched, invalid)
	}
	set.s.Schedule = "cron 61 * * * *"
	if sched, _, invalid, _, _ := r.settings(ctx, js); invalid == "" || sched.Every != time.Minute {
		t.Errorf("a malformed override: settings = %v, %q; want the configured schedule and the parser's cause", sched, invalid)
	}
	set.s.Schedule = ""
	if sched, _, invalid, _, _ := r.settings(ctx, js); invalid != "" || sched.Every != time.Minute {
		t.Errorf("no override: settings = %v, %q; want the configured schedule", sched, invalid)
	}
}

// A zone override (`jobs set --tz`) reads the configured cron in that
// zone; a schedule override is read in the configured zone unless the
// override names one; an unknown zone is reported and the configured
// schedule kept.
func TestAZoneOverrideKeepsTheConfiguredCronAndAScheduleOverrideTheConfiguredZone(t *testing.T) {
	berlin, err := jobs.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	cron, err := jobs.ParseCron("30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	set := &oneSetting{}
	r := &Runner{o: Options{Settings: set}}
	js := &jobState{job: jobtask.Job{Job: jobs.Job{ID: "report", Scope: jobs.ScopeInstallation, Schedule: cron.InZone(berlin)}}}
	ctx := context.Background()
	for _, tt := range []struct{ stored, want, invalid string }{
		{"", "cron 30 2 * * * tz Europe/Berlin", ""},
		{"tz America/New_York", "cron 30 2 * * * tz America/New_York", ""},
		{"cron 0 4 * * *", "cron 0 4 * * * tz Europe/Berlin", ""},
		{"cron 0 4 * * * tz UTC", "cron 0 4 * * *", ""},
		{"tz Mars/Olympus", "cron 30 2 * * * tz Europe/Berlin", `"Mars/Olympus" is not a known time zone`},
	} {
		set.s.Schedule = tt.stored
		sched, _, invalid, _, err := r.settings(ctx, js)
		if err != nil || sched.String() != tt.want || (invalid == "") != (tt.invalid == "") || !strings.Contains(invalid, tt.invalid) {
			t.Errorf("override %q: settings = %q, %q, %v; want %q, %q", tt.stored, sched, invalid, err, tt.want, tt.invalid)
		}
	}
}
