package e2efleet

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// studioctlBin is the binary TestMain builds once (race-enabled unless
// STUDIO_BENCH_NORACE is set); the measurements may run another
// (STUDIO_FLEET_BIN, measure_test.go).
var studioctlBin *replicaproc.Binary

func TestMain(m *testing.M) {
	os.Exit(replicaproc.Main(m, replicaproc.MainOptions{Name: "e2efleet", Bin: &studioctlBin}))
}
