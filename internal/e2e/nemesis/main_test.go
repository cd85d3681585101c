package e2enemesis

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once.
var studioctlBin *replicaproc.Binary

// TestMain builds studioctl and runs the tests. The nemesis makes its own
// primary and standby; pgtest.Main is there for the "PostgreSQL
// unavailable" rule. The binary fails if a goroutine is left behind.
func TestMain(m *testing.M) {
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2enemesis", DropEnv: []string{"EXP_"}, Bin: &studioctlBin}))
}
