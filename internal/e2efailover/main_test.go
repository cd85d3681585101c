package e2efailover

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicaproc"
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "studioctl-e2efailover-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2efailover: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	studioctlBin, err = replicaproc.Build(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2efailover: %v\n", err)
		return 1
	}
	studioctlBin.DropEnv = []string{"EXP_"}
	if dir, err := pgcluster.FindBinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "psql")); err == nil {
			studioctlBin.PathDir = dir
		}
	}
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}
