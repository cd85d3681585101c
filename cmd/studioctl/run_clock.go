package main

import (
	"fmt"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
)

// envTestClockOffset moves a replica's clock by a Go duration ("-20s",
// "45s"): a test-only setting for fault runs (the nemesis's clock fault,
// docs/reliability.md), because a Go binary reads the time through the
// vDSO and no LD_PRELOAD tool can skew it. Unset or empty: the real clock.
// It is not a configuration key and appears in no config file.
const envTestClockOffset = "STUDIO_TEST_CLOCK_OFFSET"

// runClock is the replica's clock: the real one, or the real one off by
// STUDIO_TEST_CLOCK_OFFSET. A value that does not parse is a usage error
// naming the variable.
func runClock(getenv func(string) string) (clock.Clock, error) {
	if getenv == nil {
		return nil, nil
	}
	s := getenv(envTestClockOffset)
	if s == "" {
		return nil, nil // host's default: the real clock
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a duration (for example -20s or 45s)", envTestClockOffset, s)
	}
	return clock.Offset{By: d}, nil
}
