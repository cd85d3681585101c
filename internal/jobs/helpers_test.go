package jobs_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// childEnv names the test that a child process of runInChild runs.
const childEnv = "STUDIO_JOBS_TEST_CHILD"

// runInChild reruns the calling top-level test alone in a new process of
// this test binary, with env added and without the database harness, so the
// test may change process-wide state (time.Local) that other goroutines read.
// It returns true in the child, where the test goes on, and false in the
// parent, after it has relayed the child's result.
func runInChild(t *testing.T, env ...string) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+t.Name()), env...)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("in a child process with %q: %v\n%s", env, err, out)
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		t.Fatalf("in a child process with %q: the test did not run\n%s", env, out)
	}
	return false
}

func ptr[T any](v T) *T { return &v }
