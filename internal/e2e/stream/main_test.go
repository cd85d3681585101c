package e2estream

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the binary TestMain builds once (-race unless
// STUDIO_BENCH_NORACE=1).
var studioctlBin *replicaproc.Binary

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if os.Getenv(benchEnv) != "1" {
		return m.Run() // the measurements skip; nothing to build
	}
	dir, err := os.MkdirTemp("", "studioctl-e2estream-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2estream: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if studioctlBin, err = replicaproc.Build(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2estream: %v\n", err)
		return 1
	}
	return pgtest.Main(m)
}
