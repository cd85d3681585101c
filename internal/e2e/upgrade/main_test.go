package e2eupgrade

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// newBin is the race-enabled studioctl of the working tree, built once by
// TestMain through replicaproc.Main.
var newBin *replicaproc.Binary

// old is the studioctl of the earlier commit, built by TestMain beside the
// new one; the test fails with old.err when it could not be built.
var old struct {
	done   chan struct{} // closed when the build has ended
	bin    *replicaproc.Binary
	commit string
	took   time.Duration
	err    error
}

// TestMain builds the old binary (in the background) and the new one, then
// runs the tests against the harness's PostgreSQL.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "studioctl-e2eupgrade-old-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2eupgrade: %v\n", err)
		os.Exit(1)
	}
	old.done = make(chan struct{})
	go func() {
		defer close(old.done)
		start := time.Now()
		old.commit, old.bin, old.err = buildOld(dir)
		old.took = time.Since(start)
	}()
	code := replicaproc.Main(waitOld{m}, replicaproc.MainOptions{Name: "e2eupgrade", Bin: &newBin})
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitOld runs the tests, then waits for the old build to end (when no
// test waited for it), so the goroutine leak check after them finds none.
type waitOld struct{ m *testing.M }

func (w waitOld) Run() int {
	code := w.m.Run()
	<-old.done
	return code
}

// oldMigration is the migration the new binary has and the old one lacks:
// the old binary is built from the parent of the commit that added it.
const oldMigration = "migrations/00007_*"

// buildOld finds the commit before oldMigration was added, extracts it
// (git archive) into dir and builds its studioctl there, without -race (its
// race reports are not this test's business, and it builds faster). The
// module and build caches are the go command's usual ones, shared with the
// new build: the old go.mod's modules come from the module cache or proxy.
func buildOld(dir string) (commit string, bin *replicaproc.Binary, err error) {
	root, err := gitOut("", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", nil, fmt.Errorf("find the repository (this test builds studioctl from an earlier commit and needs a git clone): %w", err)
	}
	shallow, err := gitOut(root, "rev-parse", "--is-shallow-repository")
	if err != nil {
		return "", nil, err
	}
	if shallow == "true" {
		return "", nil, errors.New("the repository is a shallow clone: this test builds studioctl from an earlier commit and needs the full history (git fetch --unshallow)")
	}
	// The commits that added a 00007 migration, newest first: its name
	// changed once, so the oldest is the one that first added 00007.
	added, err := gitOut(root, "log", "--diff-filter=A", "--format=%H", "--", oldMigration)
	if err != nil {
		return "", nil, err
	}
	lines := strings.Fields(added)
	if len(lines) == 0 {
		return "", nil, fmt.Errorf("no commit in the history adds %s", oldMigration)
	}
	commit, err = gitOut(root, "rev-parse", lines[len(lines)-1]+"^")
	if err != nil {
		return "", nil, err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", nil, err
	}
	archive := exec.Command("git", "-C", root, "archive", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", nil, err
	}
	if err := untar.Start(); err != nil {
		return "", nil, fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return "", nil, fmt.Errorf("git archive %s: %w\n%s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", nil, fmt.Errorf("tar -x of git archive %s: %w\n%s", commit, err, untarErr.String())
	}
	path := filepath.Join(dir, "studioctl-old")
	build := exec.Command("go", "build", "-o", path, "./cmd/studioctl")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("build studioctl of commit %s: %w\n%s", commit, err, out)
	}
	return commit, &replicaproc.Binary{Path: path}, nil
}

// gitOut runs git in dir ("" for the current folder) and returns its
// trimmed output.
func gitOut(dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.Command("git", args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
