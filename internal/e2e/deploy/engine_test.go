package e2edeploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containersConf is the podman configuration the tests run with
// (CONTAINERS_CONF), for a host like CI's: runc under the cgroupfs cgroup
// manager (no systemd to ask for cgroups), logs to files, and rlimits below
// the host's, since podman's defaults (nofile 1048576 and a high nproc)
// need CAP_SYS_RESOURCE, which a sandboxed root may lack ("error setting
// rlimits for ready process: operation not permitted"). deploy/README.md
// shows the same settings for a host of one's own.
const containersConf = `[containers]
default_ulimits = ["nofile=8192:8192", "nproc=4096:4096"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`

// engineTimeout bounds one podman or docker command.
const engineTimeout = 2 * time.Minute

// engine is a container runtime that works here: podman (preferred) or
// docker.
type engine struct {
	name string
	path string
	env  []string
}

// findEngine returns a working container runtime, or fails the test with
// the reason each one does not work: the deployment tests are never
// skipped (.ci/run installs podman and runc).
func findEngine(t testing.TB) *engine {
	t.Helper()
	var why []string
	if p, err := exec.LookPath("podman"); err != nil {
		why = append(why, "podman: not on PATH (apt-get install podman runc)")
	} else {
		conf := filepath.Join(t.TempDir(), "containers.conf")
		if err := os.WriteFile(conf, []byte(containersConf), 0o644); err != nil {
			t.Fatal(err)
		}
		e := &engine{name: "podman", path: p, env: append(os.Environ(), "CONTAINERS_CONF="+conf)}
		if _, err := e.run("info", "--format", "{{.Host.OCIRuntime.Name}}"); err != nil {
			why = append(why, "podman: "+err.Error())
		} else {
			return e
		}
	}
	if p, err := exec.LookPath("docker"); err != nil {
		why = append(why, "docker: not on PATH")
	} else {
		e := &engine{name: "docker", path: p, env: os.Environ()}
		if _, err := e.run("info", "--format", "{{.ServerVersion}}"); err != nil {
			why = append(why, "docker: "+err.Error())
		} else {
			return e
		}
	}
	t.Fatalf("no container runtime works here, and this test is never skipped:\n  %s", strings.Join(why, "\n  "))
	return nil
}

// run runs the engine with args and returns its stdout; an error carries
// its stderr.
func (e *engine) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.path, args...)
	cmd.Env = e.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", e.name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// must is run that fails the test on an error.
func (e *engine) must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// buildImage builds the repository's Containerfile from a context that
// holds only the static binary, as the release does, and removes the image
// when the test ends. It returns the image's name and how long the build
// took.
func (e *engine) buildImage(t testing.TB) (string, time.Duration) {
	t.Helper()
	ctxDir := t.TempDir()
	b, err := os.ReadFile(studioctlBin.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "studioctl"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	image := "localhost/studioctl:e2e-" + randomHex(4)
	start := time.Now()
	e.must(t, "build", "--pull=never", "-q", "-f", filepath.Join(repoRoot, "Containerfile"), "-t", image, ctxDir)
	took := time.Since(start)
	t.Cleanup(func() { e.run("rmi", "-f", image) })
	return image, took
}

// container is one running container the test started.
type container struct {
	e    *engine
	name string
}

// start runs image detached with args (after the image) and options
// (before it), and removes the container when the test ends, showing its
// log if the test failed.
func (e *engine) start(t testing.TB, name, image string, opts, args []string) *container {
	t.Helper()
	c := &container{e: e, name: name}
	full := append([]string{"run", "-d", "--pull=never", "--name", name}, opts...)
	full = append(full, image)
	full = append(full, args...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.run("logs", name)
			t.Logf("log of container %s:\n%s", name, out)
		}
		e.run("rm", "-f", "-t", "0", name)
	})
	e.must(t, full...)
	return c
}

// kill sends SIGKILL to the container's main process (kill -9).
func (c *container) kill(t testing.TB) {
	t.Helper()
	c.e.must(t, "kill", "-s", "KILL", c.name)
}

// inspect returns a field of the container's inspect output, by template.
func (c *container) inspect(t testing.TB, format string) string {
	t.Helper()
	return strings.TrimSpace(c.e.must(t, "inspect", "--format", format, c.name))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
