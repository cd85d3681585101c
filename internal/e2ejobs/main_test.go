package e2ejobs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicaproc"
)

// studioctlBin is the race-enabled binary that TestMain builds once for
// every test of the package. Its children never see an EXP_* setting of
// the test, and the folder of the psql binary of the PostgreSQL
// installation the harness uses goes first on their PATH, so job commands
// do not go through a wrapper script (Debian's /usr/bin/psql is a Perl
// script that costs about 0.3 s a call).
var studioctlBin *replicaproc.Binary

// minParallel is how many tests run at once unless -parallel is given. The
// tests spend almost all their time waiting for a lock to expire in
// database time (60 s), not on a CPU, so the default of GOMAXPROCS would
// only serialise the waits.
const minParallel = 6

// TestMain builds studioctl, runs the tests against the harness's
// PostgreSQL, then fails the binary if any goroutine is left behind.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	raiseParallel()
	dir, err := os.MkdirTemp("", "studioctl-e2ejobs-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2ejobs: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	studioctlBin, err = replicaproc.Build(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2ejobs: %v\n", err)
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

// raiseParallel sets -test.parallel to minParallel when the command line
// did not set it and it is lower.
func raiseParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	f := flag.Lookup("test.parallel")
	if set || f == nil {
		return
	}
	if n, err := strconv.Atoi(f.Value.String()); err == nil && n < minParallel {
		f.Value.Set(strconv.Itoa(minParallel))
	}
}
