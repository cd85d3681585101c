package e2eleases

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"testing"

	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once. The folder
// of the harness's psql goes first on the children's PATH (Debian's
// /usr/bin/psql is a Perl wrapper that costs about 0.3 s a call).
var studioctlBin *replicaproc.Binary

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "studioctl-e2eleases-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2eleases: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if studioctlBin, err = replicaproc.Build(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2eleases: %v\n", err)
		return 1
	}
	studioctlBin.DropEnv = []string{"EXP_"}
	if dir, err := pgcluster.FindBinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "psql")); err == nil {
			studioctlBin.PathDir = dir
		}
	}
	return pgtest.Main(m)
}
