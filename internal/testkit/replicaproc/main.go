package replicaproc

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// MainOptions configure Main.
type MainOptions struct {
	// Name names the package in messages and in the binary's temporary
	// folder.
	Name string
	// DropEnv is the binary's DropEnv.
	DropEnv []string
	// PsqlFirst puts the installation's psql folder first on the
	// children's PATH, so job commands do not go through Debian's Perl
	// wrapper.
	PsqlFirst bool
	// NoLeakCheck leaves out the goroutine leak check after the tests.
	NoLeakCheck bool
	// Bin receives the built binary before the tests run.
	Bin **Binary
}

// Main is the TestMain body of an end-to-end package: it builds studioctl
// once (Build) into a temporary folder, runs the tests through pgtest.Main
// (the throwaway PostgreSQL and its "unavailable" rule) and, when they
// pass, fails the binary if a goroutine is left behind. It returns the
// exit code: TestMain calls os.Exit(replicaproc.Main(m, ...)).
func Main(m pgtest.M, o MainOptions) int {
	dir, err := os.MkdirTemp("", "studioctl-"+o.Name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", o.Name, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := Build(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", o.Name, err)
		return 1
	}
	bin.DropEnv = o.DropEnv
	if o.PsqlFirst {
		if dir, err := pgcluster.FindBinDir(); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "psql")); err == nil {
				bin.PathDir = dir
			}
		}
	}
	*o.Bin = bin
	code := pgtest.Main(m)
	if code == 0 && !o.NoLeakCheck {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}
