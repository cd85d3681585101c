package jobs_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain: the job model needs no database; goroutines must not outlive
// the tests.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A child process of runInChild: one test.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
