package e2efailover

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once. The folder
// of the installation's psql goes first on its children's PATH, so job
// commands do not go through Debian's Perl wrapper.
var studioctlBin *replicaproc.Binary

// TestMain builds studioctl and runs the tests. Each test makes its own
// primary and standby; pgtest.Main is there for the job shim and for the
// "PostgreSQL unavailable" rule (a failure under CI). The binary fails if
// a goroutine is left behind.
func TestMain(m *testing.M) {
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2efailover", DropEnv: []string{"EXP_"}, PsqlFirst: true, Bin: &studioctlBin}))
}
