package main

import "testing"

// jobs overdue pages through its exit code: 1 when a job is overdue. Its
// flag (--grace) is parsed in TestJobsVerbsParseTheirFlags.
func TestAnOverdueJobExitsOne(t *testing.T) {
	t.Parallel()
	if exitCode(errOverdue) != exitFailure {
		t.Fatalf("an overdue job exits %d, want 1", exitCode(errOverdue))
	}
}
