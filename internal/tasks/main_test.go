package tasks_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL, then fails the
// binary if any goroutine is left behind.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
