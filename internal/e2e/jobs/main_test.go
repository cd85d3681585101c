package e2ejobs

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
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
	flag.Parse()
	raiseParallel()
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2ejobs", DropEnv: []string{"EXP_"}, PsqlFirst: true, Bin: &studioctlBin}))
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
