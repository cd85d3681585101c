package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// jobs overdue's flag: the default grace is a minute; a bad one is a usage
// error (exit 2) naming --grace, before any database is opened.
func TestJobsOverdueCmdReadsTheGrace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		grace time.Duration
		bad   bool
	}{
		{"no flag is a minute", nil, time.Minute, false},
		{"a duration", []string{"--grace", "5s"}, 5 * time.Second, false},
		{"zero is allowed", []string{"--grace", "0s"}, 0, false},
		{"a negative duration is refused", []string{"--grace", "-1m"}, 0, true},
		{"a word is refused", []string{"--grace", "soon"}, 0, true},
		{"a number without a unit is refused", []string{"--grace", "60"}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			a := &app{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, now: time.Now}
			var got *jobsOverdueOptions
			cmd := newJobsOverdueCmd(a, func(_ context.Context, o *jobsOverdueOptions) error { got = o; return nil })
			cmd.SetArgs(c.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&stderr)
			err := cmd.Execute()
			if c.bad {
				if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--grace") {
					t.Fatalf("err %v (exit %d), want a usage error naming --grace", err, exitCode(err))
				}
				if got != nil {
					t.Fatal("the command ran")
				}
				return
			}
			if err != nil || got == nil || got.Grace != c.grace {
				t.Fatalf("err %v, options %+v; want grace %s", err, got, c.grace)
			}
		})
	}
	if exitCode(errOverdue) != exitFailure {
		t.Fatalf("an overdue job exits %d, want 1", exitCode(errOverdue))
	}
}
