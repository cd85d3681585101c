package bus_test

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL, then fails the
// binary if any goroutine is left behind.
func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }
