package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/pgtest"
)

// studioctlBin is the race-enabled binary that TestMain builds once for
// every test of the package.
var studioctlBin string

// TestMain builds studioctl, runs the tests against the harness's
// PostgreSQL, then fails the binary if any goroutine is left behind.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "studioctl-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	studioctlBin, err = buildStudioctl(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
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
