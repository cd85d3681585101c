package e2etop

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once.
var studioctlBin *replicaproc.Binary

// TestMain builds studioctl, runs the tests against the harness's
// PostgreSQL, then fails the binary if any goroutine is left behind.
func TestMain(m *testing.M) {
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2e-top", Bin: &studioctlBin}))
}
