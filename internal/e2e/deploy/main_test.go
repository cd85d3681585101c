package e2edeploy

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Stamped into the test's binary through the release's ldflags
// (.goreleaser.yaml), so the tests see what `studioctl version` prints.
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

// releaseBuild is the build of .goreleaser.yaml.
type releaseBuild struct {
	Main    string   `yaml:"main"`
	Env     []string `yaml:"env"`
	Flags   []string `yaml:"flags"`
	Ldflags []string `yaml:"ldflags"`
}

// readReleaseBuild reads the first build of .goreleaser.yaml.
func readReleaseBuild() (releaseBuild, error) {
	var cfg struct {
		Builds []releaseBuild `yaml:"builds"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yaml"))
	if err != nil {
		return releaseBuild{}, err
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return releaseBuild{}, fmt.Errorf(".goreleaser.yaml: %w", err)
	}
	if len(cfg.Builds) == 0 {
		return releaseBuild{}, fmt.Errorf(".goreleaser.yaml: no builds")
	}
	return cfg.Builds[0], nil
}

// ldflags are the release's (.goreleaser.yaml) with the test's stamps in
// place of goreleaser's templates.
func (r releaseBuild) ldflags() string {
	return strings.NewReplacer("{{.Version}}", stampVersion, "{{.FullCommit}}", stampCommit, "{{.Date}}", stampDate).
		Replace(strings.Join(r.Ldflags, " "))
}

// buildStatic builds the release's main package as the release does
// (.goreleaser.yaml: its env, flags and ldflags), static.
func buildStatic(bin string) error {
	r, err := readReleaseBuild()
	if err != nil {
		return err
	}
	args := append([]string{"build"}, r.Flags...)
	args = append(args, "-ldflags", r.ldflags(), "-o", bin, r.Main)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), r.Env...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the static studioctl: %w\n%s", err, out)
	}
	return nil
}
