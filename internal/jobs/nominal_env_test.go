package jobs_test

import (
	"slices"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/tasks"
)

// tasks writes STUDIO_SCHEDULED_AT itself (it cannot import jobs): the
// same string as FormatNominal, for any instant and zone.
func TestTasksWriteTheNominalTimeAsFormatNominal(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 5, 2, 0, 0, 999_999_999, time.FixedZone("X", -7*3600)),
		time.Date(1999, 1, 1, 0, 0, 59, 1_000_000, time.UTC),
	} {
		env := tasks.Environ(tasks.Env{ScheduledAt: at}, nil)
		if want := "STUDIO_SCHEDULED_AT=" + jobs.FormatNominal(at); !slices.Contains(env, want) {
			t.Errorf("%v: environment %q lacks %s", at, env, want)
		}
	}
}
