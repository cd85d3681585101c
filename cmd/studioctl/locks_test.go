package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/locks"
)

// The exit codes `locks release` documents for each answer.
func TestLocksReleaseErrorsMapToTheDocumentedExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"a lock that changed since it was read is refused (3)", fmt.Errorf("release lock %q: %w: now held by b", "x", locks.ErrChanged), exitRefused},
		{"a live lock without --force is refused (3)", fmt.Errorf("%w: lock is held", locks.ErrRefused), exitRefused},
		{"a lock row that is gone is not found (4)", fmt.Errorf("release lock %q: %w", "x", locks.ErrNotFound), exitNotFound},
		{"a name over 64 characters is a usage error (2)", locks.ValidateName(strings.Repeat("ä", 65)), exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := exitCode(tt.err); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}
