package e2epooler

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the race-enabled binary TestMain builds once.
var studioctlBin *replicaproc.Binary

func TestMain(m *testing.M) {
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2epooler", Bin: &studioctlBin}))
}
