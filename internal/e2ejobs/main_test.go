package e2ejobs

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/pgtest"
)

// studioctlBin is the race-enabled binary that TestMain builds once for
// every test of the package.
var studioctlBin string

// psqlDir holds the psql binary of the PostgreSQL installation the harness
// uses; it goes first on the replicas' PATH, so job commands do not go
// through a wrapper script (Debian's /usr/bin/psql is a Perl script that
// costs about 0.3 s a call).
var psqlDir string

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
	studioctlBin, err = buildStudioctl(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2ejobs: %v\n", err)
		return 1
	}
	if dir, err := pgcluster.FindBinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "psql")); err == nil {
			psqlDir = dir
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

// buildStudioctl runs `go build -race` on ./cmd/studioctl from the module
// root and returns the binary's path.
func buildStudioctl(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module")
	}
	bin := filepath.Join(dir, "studioctl")
	cmd := exec.Command("go", "build", "-race", "-o", bin, "./cmd/studioctl")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build studioctl: %w\n%s", err, out)
	}
	return bin, nil
}
