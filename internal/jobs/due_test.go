package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestDueAfter(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	every, _ := jobs.Every(10 * time.Second)
	cron, err := jobs.ParseCron("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		s       jobs.Schedule
		lastEnd time.Time
		now     time.Time
		missed  jobs.Missed
		want    time.Time
	}{
		{"never run: at once", every, time.Time{}, t0, "", t0},
		{"never run cron: next cron time", cron, time.Time{}, t0.Add(5 * time.Second), "", t0.Add(time.Minute)},
		{"ahead: every after the end", every, t0, t0.Add(3 * time.Second), "", t0.Add(10 * time.Second)},
		{"ahead with skip too", every, t0, t0.Add(3 * time.Second), jobs.MissedSkip, t0.Add(10 * time.Second)},
		{"missed: run once now", every, t0, t0.Add(95 * time.Second), jobs.MissedRunOnce, t0.Add(95 * time.Second)},
		{"missed, default: run once now", every, t0, t0.Add(95 * time.Second), "", t0.Add(95 * time.Second)},
		{"missed skip: last end + k every ahead", every, t0, t0.Add(95 * time.Second), jobs.MissedSkip, t0.Add(100 * time.Second)},
		{"missed skip on a multiple: the next one", every, t0, t0.Add(100 * time.Second), jobs.MissedSkip, t0.Add(100 * time.Second)},
		{"cron ahead", cron, t0.Add(500 * time.Millisecond), t0.Add(time.Second), "", t0.Add(time.Minute)},
		{"cron missed: now", cron, t0, t0.Add(150 * time.Second), "", t0.Add(150 * time.Second)},
		{"cron missed skip: next cron time", cron, t0, t0.Add(150 * time.Second), jobs.MissedSkip, t0.Add(3 * time.Minute)},
	}
	for _, c := range cases {
		if got := jobs.DueAfter(c.s, c.lastEnd, c.now, c.missed); !got.Equal(c.want) {
			t.Errorf("%s: DueAfter = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestParseMissed(t *testing.T) {
	for _, v := range []string{"run-once", "skip", "catch-up"} {
		if m, err := jobs.ParseMissed(v); err != nil || string(m) != v {
			t.Errorf("ParseMissed(%q) = %q, %v", v, m, err)
		}
	}
	if _, err := jobs.ParseMissed("always"); err == nil {
		t.Error("ParseMissed(always): no error")
	}
}

func TestConfigMissedKey(t *testing.T) {
	base := "jobs:\n  - id: a\n    scope: installation\n    every: 1m\n    run:\n      command: [\"true\"]\n"
	list, err := jobs.Parse("s.yaml", []byte(base+"    missed: skip\n"))
	if err != nil || list[0].Missed != jobs.MissedSkip {
		t.Fatalf("missed: skip: %v, %+v", err, list)
	}
	list, err = jobs.Parse("s.yaml", []byte(base))
	if err != nil || list[0].Missed != "" {
		t.Fatalf("no missed: %v, %+v", err, list)
	}
	_, err = jobs.Parse("s.yaml", []byte(base+"    missed: sometimes\n"))
	if err == nil || !strings.Contains(err.Error(), `missed: "sometimes": want run-once (the default), skip or catch-up`) {
		t.Fatalf("missed: sometimes: %v", err)
	}
}
