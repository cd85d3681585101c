package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestJobDurationsNeedAUnitAndSaneBounds(t *testing.T) {
	t.Parallel()
	job := func(lines string) string {
		return "jobs:\n  - id: report\n    scope: installation\n" + lines + "    run:\n      command: [\"true\"]\n"
	}
	tests := []struct {
		name  string
		yaml  string
		field string
		msg   string // "" means valid
	}{
		{"a bare number as every is refused, not read as nanoseconds", job("    every: 5\n"), "every", `"5" is not a duration (for example 30s, 5m, 1h)`},
		{"a bare 0 as every is refused", job("    every: 0\n"), "every", "0s is shorter than the minimum 1s"},
		{"a negative every is refused", job("    every: -5s\n"), "every", "-5s is shorter than the minimum 1s"},
		{"an every over a year is refused", job("    every: 9000h\n"), "every", "9000h is longer than the maximum 8784h0m0s (use cron for rarer runs)"},
		{"an every of a year is allowed", job("    every: 8784h\n"), "", ""},
		{"a bare number as timeout is refused", job("    every: 10s\n    timeout: 30\n"), "timeout", `"30" is not a duration (for example 30s, 10m)`},
		{"a zero timeout is refused", job("    every: 10s\n    timeout: 0s\n"), "timeout", "must be positive, got 0s"},
		{"a negative timeout is refused", job("    every: 10s\n    timeout: -1m\n"), "timeout", "must be positive, got -1m0s"},
		{"a sub-millisecond timeout is refused", job("    every: 10s\n    timeout: 10us\n"), "timeout", "10us is shorter than the minimum 1ms"},
		{"a timeout over a day is refused", job("    every: 10s\n    timeout: 25h\n"), "timeout", "25h is longer than the maximum 24h0m0s"},
		{"a timeout of a day is allowed", job("    every: 10s\n    timeout: 24h\n"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			list, err := jobs.Parse("d.yaml", []byte(tt.yaml))
			if tt.msg == "" {
				if err != nil || len(list) != 1 {
					t.Fatalf("Parse = %v, %v; want one job", list, err)
				}
				return
			}
			var ce *jobs.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v, want a *jobs.ConfigError", err)
			}
			if ce.Field != tt.field || ce.Msg != tt.msg || ce.Job != "report" {
				t.Fatalf("error field %q job %q msg %q, want field %q msg %q", ce.Field, ce.Job, ce.Msg, tt.field, tt.msg)
			}
		})
	}
	if jobs.MaxEvery != 366*24*time.Hour || jobs.MaxTimeout != 24*time.Hour {
		t.Errorf("bounds changed: MaxEvery %s, MaxTimeout %s; update docs/replica-start.md", jobs.MaxEvery, jobs.MaxTimeout)
	}
}
