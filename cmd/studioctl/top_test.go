package main

import (
	"testing"

	"github.com/studioctl/studioctl/internal/watch"
)

func TestTopParsesItsFlags(t *testing.T) {
	t.Parallel()
	top := verb(newTopCmd)
	runFlagCases(t, []flagCase{
		{name: "top", parse: top, want: &topOptions{Poll: watch.DefaultPoll}},
		{name: "top --read-only", parse: top, args: []string{"--read-only"}, want: &topOptions{ReadOnly: true, Poll: watch.DefaultPoll}},
		{name: "top takes no argument", parse: top, args: []string{"jobs"}, wantErr: `unexpected argument "jobs"`},
		{name: "top --watch-poll must be positive", parse: top, args: []string{"--watch-poll", "0s"}, wantErr: "--watch-poll: must be positive"},
	})
}
