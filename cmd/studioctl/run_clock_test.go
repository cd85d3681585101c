package main

import (
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
)

func TestRunClockReadsTheTestOffset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		value   string
		want    clock.Clock
		wantErr string
	}{
		{name: "unset keeps the real clock", value: "", want: nil},
		{name: "a duration moves the clock", value: "-20s", want: clock.Offset{By: -20 * time.Second}},
		{name: "a bad value names the variable", value: "soon", wantErr: "STUDIO_TEST_CLOCK_OFFSET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := runClock(func(k string) string {
				if k == envTestClockOffset {
					return tt.value
				}
				return ""
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("runClock(%q) error = %v, want one naming %s", tt.value, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("runClock(%q) = %v, %v; want %v", tt.value, got, err, tt.want)
			}
		})
	}
}
