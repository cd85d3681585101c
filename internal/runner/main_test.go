package runner_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL, then fails the
// binary if any goroutine (a timer loop, a tick, a keep-alive, a store
// writer, a pool's health check) outlived them.
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
