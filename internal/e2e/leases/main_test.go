package e2eleases

import (
	"flag"
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once. The folder
// of the harness's psql goes first on the children's PATH (Debian's
// /usr/bin/psql is a Perl wrapper that costs about 0.3 s a call).
var studioctlBin *replicaproc.Binary

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2eleases", DropEnv: []string{"EXP_"}, PsqlFirst: true, NoLeakCheck: true, Bin: &studioctlBin}))
}
