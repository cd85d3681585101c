package jobs_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestJudgeHealth(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { return ptr(now.Add(-d)) }
	const minute = "every 1m" // three intervals: 3m
	tests := []struct {
		name string
		st   jobs.Status
		want jobs.Health
	}{
		{"a job that succeeded a minute ago is ok",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(time.Minute)}, jobs.HealthOK},
		{"a paused job is paused even when its schedule is invalid and its last run failed",
			jobs.Status{Schedule: minute, Paused: true, InvalidSchedule: "bad cron", LastOutcome: jobs.OutcomeFailed, LastFinishedAt: ago(time.Hour)}, jobs.HealthPaused},
		{"a paused job is paused even when stalled",
			jobs.Status{Schedule: minute, Paused: true, LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(time.Hour)}, jobs.HealthPaused},
		{"an invalid schedule wins over a failed run",
			jobs.Status{Schedule: minute, InvalidSchedule: `cron "*/0 * * * *": step of range should be a positive number`, LastOutcome: jobs.OutcomeFailed}, jobs.HealthInvalidSchedule},
		{"an invalid schedule wins over a stall",
			jobs.Status{Schedule: minute, InvalidSchedule: "bad", LastFinishedAt: ago(time.Hour)}, jobs.HealthInvalidSchedule},
		{"a failed last run is failing",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeFailed, LastFinishedAt: ago(time.Minute)}, jobs.HealthFailing},
		{"a timed-out last run is failing",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeTimedOut, LastFinishedAt: ago(time.Minute)}, jobs.HealthFailing},
		{"a last run that lost its lock is failing",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeLockLost, LastFinishedAt: ago(time.Minute)}, jobs.HealthFailing},
		{"an interrupted last run is failing",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeInterrupted, LastFinishedAt: ago(time.Minute)}, jobs.HealthFailing},
		{"a failed run long ago is failing rather than stalled",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeFailed, LastFinishedAt: ago(time.Hour)}, jobs.HealthFailing},
		{"a job whose last completion is 3m1s old (more than three 1m intervals) is stalled",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(3*time.Minute + time.Second)}, jobs.HealthStalled},
		{"a job whose last completion is exactly three intervals old is ok",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(3 * time.Minute)}, jobs.HealthOK},
		{"a recent skip counts as a completion, so an old last run is not stalled",
			jobs.Status{Schedule: minute, LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(time.Hour), LastSkippedElsewhereAt: ago(30 * time.Second)}, jobs.HealthOK},
		{"a job that only ever skipped, recently, is ok",
			jobs.Status{Schedule: minute, LastSkippedElsewhereAt: ago(30 * time.Second), Since: now.Add(-time.Hour)}, jobs.HealthOK},
		{"an old skip and an old run are stalled",
			jobs.Status{Schedule: minute, LastFinishedAt: ago(time.Hour), LastSkippedElsewhereAt: ago(10 * time.Minute)}, jobs.HealthStalled},
		{"a job that never completed is judged from Since: tracked for 10m is stalled",
			jobs.Status{Schedule: minute, Since: now.Add(-10 * time.Minute)}, jobs.HealthStalled},
		{"a job that never completed is judged from Since: tracked for 1m is ok",
			jobs.Status{Schedule: minute, Since: now.Add(-time.Minute)}, jobs.HealthOK},
		{"a job that never completed and has no Since is ok",
			jobs.Status{Schedule: minute}, jobs.HealthOK},
		{"a running job that never completed is judged from Since",
			jobs.Status{Schedule: minute, Running: true, LastStartedAt: ago(10 * time.Minute), Since: now.Add(-10 * time.Minute)}, jobs.HealthStalled},
		{"a run in progress within its timeout is not stalled (a 30s duty every 2s, 25s into its run)",
			jobs.Status{Schedule: "every 2s", Running: true, LastStartedAt: ago(25 * time.Second), LastFinishedAt: ago(26 * time.Second), LastOutcome: jobs.OutcomeSucceeded}, jobs.HealthOK},
		{"a run in progress within a configured timeout longer than the default is not stalled",
			jobs.Status{Schedule: minute, Running: true, LastStartedAt: ago(50 * time.Minute), LastFinishedAt: ago(51 * time.Minute), Timeout: time.Hour}, jobs.HealthOK},
		{"a run in progress past its timeout is judged as if it were not running",
			jobs.Status{Schedule: minute, Running: true, LastStartedAt: ago(50 * time.Minute), LastFinishedAt: ago(51 * time.Minute), Timeout: 10 * time.Minute}, jobs.HealthStalled},
		{"a daily cron that ran two days ago is ok (three intervals: 72h)",
			jobs.Status{Schedule: "cron 0 2 * * *", LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(48 * time.Hour)}, jobs.HealthOK},
		{"a daily cron that ran four days ago is stalled",
			jobs.Status{Schedule: "cron 0 2 * * *", LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(96 * time.Hour)}, jobs.HealthStalled},
		{"a 2h delay whose last run is 5h old is ok (three intervals: 6h)",
			jobs.Status{Schedule: "every 2h", LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(5 * time.Hour)}, jobs.HealthOK},
		{"an unreadable stored schedule is not judged stalled",
			jobs.Status{Schedule: "fortnightly", LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: ago(1000 * time.Hour)}, jobs.HealthOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jobs.JudgeHealth(tt.st, now); got != tt.want {
				t.Errorf("JudgeHealth(%+v) = %s, want %s", tt.st, got, tt.want)
			}
		})
	}
}

func TestLastCompletionIsTheLaterOfTheLastRunAndTheLastSkip(t *testing.T) {
	t.Parallel()
	run := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	skip := run.Add(time.Minute)
	tests := []struct {
		name string
		st   jobs.Status
		want time.Time
	}{
		{"nothing yet is the zero time", jobs.Status{}, time.Time{}},
		{"a run only", jobs.Status{LastFinishedAt: &run}, run},
		{"a skip only", jobs.Status{LastSkippedElsewhereAt: &skip}, skip},
		{"a later skip", jobs.Status{LastFinishedAt: &run, LastSkippedElsewhereAt: &skip}, skip},
		{"a later run", jobs.Status{LastFinishedAt: &skip, LastSkippedElsewhereAt: &run}, skip},
	}
	for _, tt := range tests {
		if got := tt.st.LastCompletion(); !got.Equal(tt.want) {
			t.Errorf("%s: LastCompletion = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestOutcomesThatMakeAJobFailing(t *testing.T) {
	t.Parallel()
	want := map[jobs.Outcome]bool{
		jobs.OutcomeRunning: false, jobs.OutcomeSucceeded: false, "": false,
		jobs.OutcomeFailed: true, jobs.OutcomeTimedOut: true, jobs.OutcomeLockLost: true, jobs.OutcomeInterrupted: true,
	}
	for o, w := range want {
		if got := o.Failing(); got != w {
			t.Errorf("Outcome(%q).Failing() = %v, want %v", o, got, w)
		}
	}
}

func TestAWeekdayCronIsNotStalledOverTheWeekend(t *testing.T) {
	t.Parallel()
	// Friday's 09:00 run finished at 09:00:10; Monday's 09:00 run is in
	// progress 30 s later. No fire was missed.
	friday := time.Date(2026, 11, 27, 9, 0, 10, 0, time.UTC)
	monday := time.Date(2026, 11, 30, 9, 0, 30, 0, time.UTC)
	if friday.Weekday() != time.Friday || monday.Weekday() != time.Monday {
		t.Fatalf("bad dates: %s, %s", friday.Weekday(), monday.Weekday())
	}
	st := jobs.Status{Schedule: "cron 0 9 * * 1-5", Running: true, LastOutcome: jobs.OutcomeSucceeded, LastFinishedAt: &friday,
		LastStartedAt: ptr(monday.Add(-30 * time.Second))}
	if got := jobs.JudgeHealth(st, monday); got != jobs.HealthOK {
		t.Errorf("JudgeHealth on Monday 09:00:30 = %s, want ok", got)
	}
	// Missing Monday, Tuesday and Wednesday is stalled, whatever the rule.
	if got := jobs.JudgeHealth(jobs.Status{Schedule: "cron 0 9 * * 1-5", LastFinishedAt: &friday}, friday.Add(5*24*time.Hour+time.Hour)); got != jobs.HealthStalled {
		t.Errorf("JudgeHealth on Wednesday 10:00 after Friday = %s, want stalled", got)
	}
}
