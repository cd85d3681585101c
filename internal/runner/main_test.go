package runner_test

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL, then fails the
// binary if any goroutine (a timer loop, a tick, a keep-alive, a store
// writer, a pool's health check) outlived them.
func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }
