package locks_test

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL and then checks
// that no goroutine (a fuzz worker, a pool's health check) outlived them.
func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }
