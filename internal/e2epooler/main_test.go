package e2epooler

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once.
var studioctlBin *replicaproc.Binary

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "studioctl-e2epooler-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2epooler: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if studioctlBin, err = replicaproc.Build(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2epooler: %v\n", err)
		return 1
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
