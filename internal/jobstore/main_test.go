package jobstore_test

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL (a database per
// test, cloned from a migrated template), then fails the binary if any
// goroutine (a Store's writer, a pool's health check) outlived them.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A child process of runInChild: one test, no database.
		os.Exit(m.Run())
	}
	os.Exit(pgtest.MainNoLeaks(m))
}
