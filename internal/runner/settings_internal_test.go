package runner

import (
	"context"
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
