package e2e

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the race-enabled binary that TestMain builds once for
// every test of the package.
var studioctlBin *replicaproc.Binary

// TestMain builds studioctl, runs the tests against the harness's
// PostgreSQL, then fails the binary if any goroutine is left behind.
func TestMain(m *testing.M) {
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2e", Bin: &studioctlBin}))
}
