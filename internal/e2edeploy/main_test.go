package e2edeploy

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicaproc"
)

// Stamped into the test's binary as the release does (.goreleaser.yaml),
// so the tests see what `studioctl version` prints.
const (
	stampVersion = "0.0.0-e2edeploy"
	stampCommit  = "e2edeploy0commit"
	stampDate    = "2026-12-05T00:00:00Z"
)

// studioctlBin is the static release binary (CGO_ENABLED=0, no -race: the
// image is FROM scratch) that TestMain builds once; repoRoot is the
// module's root, where the Containerfile and deploy/ are.
var (
	studioctlBin *replicaproc.Binary
	repoRoot     string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "studioctl-e2edeploy-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2edeploy: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "e2edeploy: %v\n", err)
		return 1
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2edeploy: go env GOMOD: %v\n", err)
		return 1
	}
	repoRoot = filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "studioctl")
	if err := buildStatic(bin); err != nil {
		fmt.Fprintf(os.Stderr, "e2edeploy: %v\n", err)
		return 1
	}
	studioctlBin = &replicaproc.Binary{Path: bin}
	return pgtest.MainNoLeaks(m)
}

// ldflags are the release's (.goreleaser.yaml) with the test's stamps.
func ldflags() string {
	return fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s -X main.date=%s", stampVersion, stampCommit, stampDate)
}

// buildStatic builds ./cmd/studioctl as the release does: static, without
// cgo, trimmed paths, stamped.
func buildStatic(bin string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags(), "-o", bin, "./cmd/studioctl")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the static studioctl: %w\n%s", err, out)
	}
	return nil
}
