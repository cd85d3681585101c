package locks_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL and then checks
// that no goroutine (a fuzz worker, a pool's health check) outlived them.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
