package jobs_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// The numbers of SPEC §5.2, from ADR-0125 and ADR-0194 (seeds 000 and 001).

func every(t testing.TB, d time.Duration) jobs.Schedule {
	t.Helper()
	s, err := jobs.Every(d)
	if err != nil {
		t.Fatalf("Every(%s): %v", d, err)
	}
	return s
}

func cron(t testing.TB, expr string) jobs.Schedule {
	t.Helper()
	s, err := jobs.ParseCron(expr)
	if err != nil {
		t.Fatalf("ParseCron(%q): %v", expr, err)
	}
	return s
}

// justUnderCap is the fixed delay whose 90 % is one nanosecond short of the
// five-minute cap: 0.9 * 5m33.333333333s = 4m59.9999999997s, truncated.
const justUnderCap = 5*time.Minute + 33*time.Second + 333333333*time.Nanosecond

func TestMinimumGap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sched jobs.Schedule
		want  time.Duration
	}{
		{"is 90% of a 10s delay: 9s", every(t, 10*time.Second), 9 * time.Second},
		{"is 90% of a 1s delay: 900ms", every(t, time.Second), 900 * time.Millisecond},
		{"is 90% of a 1m delay: 54s", every(t, time.Minute), 54 * time.Second},
		{"is 90% of a 5m delay: 4m30s", every(t, 5*time.Minute), 4*time.Minute + 30*time.Second},
		{"is just under 5m for a delay of 5m33.333333333s", every(t, justUnderCap), 5*time.Minute - time.Nanosecond},
		{"is capped at 5m for a delay of 5m33.333333334s", every(t, justUnderCap+time.Nanosecond), 5 * time.Minute},
		{"is capped at 5m for a 10m delay", every(t, 10*time.Minute), 5 * time.Minute},
		{"is capped at 5m for a 1h delay", every(t, time.Hour), 5 * time.Minute},
		{"is capped at 5m for a 2h delay", every(t, 2*time.Hour), 5 * time.Minute},
		{"is 30s for a cron that fires every minute", cron(t, "* * * * *"), 30 * time.Second},
		{"is 30s for a daily cron", cron(t, "0 2 * * *"), 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jobs.MinimumGap(tt.sched); got != tt.want {
				t.Errorf("MinimumGap(%s) = %s, want %s", tt.sched, got, tt.want)
			}
		})
	}
}

func TestLockAtLeastForIsTheMinimumGap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sched jobs.Schedule
		want  time.Duration
	}{
		{"10s delay holds the lock at least 9s", every(t, 10*time.Second), 9 * time.Second},
		{"1s delay holds the lock at least 900ms", every(t, time.Second), 900 * time.Millisecond},
		{"2m delay holds the lock at least 1m48s", every(t, 2*time.Minute), time.Minute + 48*time.Second},
		{"1h delay holds the lock at least 5m (the cap)", every(t, time.Hour), 5 * time.Minute},
		{"cron holds the lock at least 30s", cron(t, "0 2 * * *"), 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jobs.LockAtLeastFor(tt.sched); got != tt.want {
				t.Errorf("LockAtLeastFor(%s) = %s, want %s", tt.sched, got, tt.want)
			}
			if got, gap := jobs.LockAtLeastFor(tt.sched), jobs.MinimumGap(tt.sched); got != gap {
				t.Errorf("LockAtLeastFor(%s) = %s, MinimumGap = %s; want them equal", tt.sched, got, gap)
			}
		})
	}
}

func TestLockAtMostFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sched jobs.Schedule
		want  time.Duration
	}{
		{"has a 60s floor for a 1s delay", every(t, time.Second), 60 * time.Second},
		{"has a 60s floor for a 10s delay (gap 9s)", every(t, 10*time.Second), 60 * time.Second},
		{"has a 60s floor for a 1m delay (gap 54s)", every(t, time.Minute), 60 * time.Second},
		{"is 60s for a 1m6.666666666s delay (gap just under 60s)", every(t, 66666666666*time.Nanosecond), 60 * time.Second},
		{"is the gap for a 1m6.666666668s delay (gap just over 60s)", every(t, 66666666668*time.Nanosecond), 60*time.Second + time.Nanosecond},
		{"is the gap for a 2m delay: 1m48s", every(t, 2*time.Minute), time.Minute + 48*time.Second},
		{"is the capped gap for a 10m delay: 5m", every(t, 10*time.Minute), 5 * time.Minute},
		{"is the capped gap for a 2h delay: 5m", every(t, 2*time.Hour), 5 * time.Minute},
		{"is 60s for a cron (gap 30s)", cron(t, "0 2 * * *"), 60 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jobs.LockAtMostFor(tt.sched); got != tt.want {
				t.Errorf("LockAtMostFor(%s) = %s, want %s", tt.sched, got, tt.want)
			}
			if most, least := jobs.LockAtMostFor(tt.sched), jobs.LockAtLeastFor(tt.sched); least > most {
				t.Errorf("LockAtLeastFor(%s) = %s exceeds LockAtMostFor = %s", tt.sched, least, most)
			}
		})
	}
}

func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sched jobs.Schedule
		want  time.Duration
	}{
		{"is the 5m floor for a 10s delay", every(t, 10*time.Second), 5 * time.Minute},
		{"is the 5m floor for a 1m delay (3 intervals = 3m)", every(t, time.Minute), 5 * time.Minute},
		{"is 5m for a 100s delay (3 intervals = exactly 5m)", every(t, 100*time.Second), 5 * time.Minute},
		{"is 3 intervals for a 2m delay: 6m", every(t, 2*time.Minute), 6 * time.Minute},
		{"is 3 intervals for a 1h delay: 3h", every(t, time.Hour), 3 * time.Hour},
		{"is 1h for a cron that fires every minute", cron(t, "* * * * *"), time.Hour},
		{"is 1h for a daily cron", cron(t, "0 2 * * *"), time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jobs.DefaultTimeout(tt.sched); got != tt.want {
				t.Errorf("DefaultTimeout(%s) = %s, want %s", tt.sched, got, tt.want)
			}
		})
	}
}

func TestAJobTimeoutOverridesTheDefault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration
		sched   jobs.Schedule
		want    time.Duration
	}{
		{"no timeout gives the default of a 2m delay: 6m", 0, every(t, 2*time.Minute), 6 * time.Minute},
		{"no timeout gives the default of a cron: 1h", 0, cron(t, "0 2 * * *"), time.Hour},
		{"a 10m timeout wins over a 2m delay's 6m", 10 * time.Minute, every(t, 2*time.Minute), 10 * time.Minute},
		{"a 30s timeout wins over the 5m floor", 30 * time.Second, every(t, 10*time.Second), 30 * time.Second},
		{"a 2h timeout wins over a cron's 1h", 2 * time.Hour, cron(t, "0 2 * * *"), 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := jobs.Job{ID: "j", Schedule: tt.sched, Timeout: tt.timeout}
			if got := j.TimeoutFor(tt.sched); got != tt.want {
				t.Errorf("TimeoutFor(%s) with timeout %s = %s, want %s", tt.sched, tt.timeout, got, tt.want)
			}
		})
	}
}

func TestKeepAliveEveryIsHalfOfLockAtMostFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sched jobs.Schedule
		want  time.Duration
	}{
		{"10s delay extends every 30s (half of 60s)", every(t, 10*time.Second), 30 * time.Second},
		{"2m delay extends every 54s (half of 1m48s)", every(t, 2*time.Minute), 54 * time.Second},
		{"2h delay extends every 2m30s (half of 5m)", every(t, 2*time.Hour), 2*time.Minute + 30*time.Second},
		{"cron extends every 30s (half of 60s)", cron(t, "0 2 * * *"), 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jobs.KeepAliveEvery(tt.sched); got != tt.want {
				t.Errorf("KeepAliveEvery(%s) = %s, want %s", tt.sched, got, tt.want)
			}
			if got, most := jobs.KeepAliveEvery(tt.sched), jobs.LockAtMostFor(tt.sched); 2*got != most {
				t.Errorf("KeepAliveEvery(%s) = %s, want half of LockAtMostFor %s", tt.sched, got, most)
			}
		})
	}
}

func TestTheTimingConstantsKeepTheNumbersOfTheSourceDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		got, want any
	}{
		{"the minimum gap share is 90%", jobs.MinimumGapShare, 0.9},
		{"the minimum gap cap is five minutes", jobs.MinimumGapCap, 5 * time.Minute},
		{"a cron's minimum gap is 30 seconds", jobs.CronMinimumGap, 30 * time.Second},
		{"lockAtMostFor's floor is one minute", jobs.LockAtMostForFloor, time.Minute},
		{"the timeout floor is five minutes", jobs.TimeoutFloor, 5 * time.Minute},
		{"the timeout is three intervals", jobs.TimeoutIntervals, 3},
		{"a cron's timeout is one hour", jobs.CronTimeout, time.Hour},
		{"a job is stalled after three intervals", jobs.StalledIntervals, 3},
		{"an invalid schedule is asked again every minute", jobs.InvalidScheduleRetry, time.Minute},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
