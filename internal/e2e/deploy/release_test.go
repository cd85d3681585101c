package e2edeploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestReleaseBuildIsStaticAndStamped: the binary built as .goreleaser.yaml
// builds it has no cgo (the image is FROM scratch), and `studioctl
// version` prints the version, commit and date the release stamps.
func TestReleaseBuildIsStaticAndStamped(t *testing.T) {
	r, err := readReleaseBuild()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.Env, "CGO_ENABLED=0") {
		t.Errorf(".goreleaser.yaml env %v: want CGO_ENABLED=0 (the image is FROM scratch)", r.Env)
	}
	out, _, code := studioctlBin.RunEnv(t, nil, "version")
	if code != 0 {
		t.Fatalf("studioctl version: exit %d", code)
	}
	for _, want := range []string{"studioctl " + stampVersion + " ", " commit=" + stampCommit, " built=" + stampDate} {
		if !strings.Contains(out, want) {
			t.Errorf("studioctl version printed %q, want it to contain %q (the release's ldflags)", out, want)
		}
	}
	// The binary runs with no file of the system: the zone database and
	// the CA roots are inside (cmd/studioctl/static.go).
	b, err := os.ReadFile(studioctlBin.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"time/tzdata", "golang.org/x/crypto/x509roots/fallback"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the release binary lacks %s", want)
		}
	}
}

// TestGoreleaserSnapshot runs `goreleaser check` and `goreleaser release
// --snapshot --clean` and checks the binaries, archives, checksums, an
// SBOM per archive, and the image. Opt-in (STUDIO_TEST_GORELEASER=1): it
// builds four platforms and takes minutes; goreleaser comes from the Go
// module proxy (go install github.com/goreleaser/goreleaser/v2@v2.17.0,
// the last that builds with go1.26). The image is built with `docker`,
// which may be podman: a `docker` that runs podman goes first on PATH when
// podman works here.
func TestGoreleaserSnapshot(t *testing.T) {
	if os.Getenv("STUDIO_TEST_GORELEASER") == "" {
		t.Skip("opt-in: set STUDIO_TEST_GORELEASER=1 (minutes; needs goreleaser on PATH)")
	}
	gr, err := exec.LookPath("goreleaser")
	if err != nil {
		t.Fatalf("goreleaser is not on PATH: go install github.com/goreleaser/goreleaser/v2@v2.17.0: %v", err)
	}
	eng := findEngine(t)
	env := os.Environ()
	if eng.name == "podman" {
		shim := t.TempDir()
		script := "#!/bin/sh\nexec " + eng.path + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(shim, "docker"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		env = append(eng.env, "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	dist := filepath.Join(repoRoot, "dist")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(gr, args...)
		cmd.Dir = repoRoot
		cmd.Env = append(env, "PWD="+repoRoot)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("goreleaser %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("goreleaser %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Second))
	}
	run("check")
	run("release", "--snapshot", "--clean")

	var archives, sboms, binaries int
	filepath.Walk(dist, func(p string, fi os.FileInfo, err error) error {
		switch {
		case err != nil:
		case strings.HasSuffix(p, ".tar.gz"):
			archives++
		case strings.HasSuffix(p, ".tar.gz.cdx.json"):
			sboms++
		case !fi.IsDir() && fi.Name() == "studioctl":
			binaries++
		}
		return nil
	})
	if archives != 4 || sboms != archives || binaries != 4 {
		t.Errorf("dist: %d archives, %d SBOMs, %d binaries; want 4, one SBOM per archive, 4", archives, sboms, binaries)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
	if err != nil || strings.Count(string(sums), ".tar.gz\n") != 4 {
		t.Errorf("checksums.txt: %v\n%s", err, sums)
	}
	var meta struct {
		Version string `yaml:"version"`
	}
	b, _ := os.ReadFile(filepath.Join(dist, "metadata.json"))
	yaml.Unmarshal(b, &meta)
	image := "localhost/studioctl:" + meta.Version + "-amd64"
	out := eng.must(t, "run", "--rm", "--pull=never", image, "version")
	if !strings.Contains(out, "studioctl "+meta.Version+" linux/amd64") || strings.Contains(out, "commit=unknown") {
		t.Errorf("the snapshot image's studioctl version printed %q, want version %s with a commit", out, meta.Version)
	}
	eng.run("rmi", "-f", image)
}
