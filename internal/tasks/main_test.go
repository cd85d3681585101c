package tasks_test

import (
	"os"
	"testing"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestMain runs the tests against the harness's PostgreSQL, then fails the
// binary if any goroutine is left behind. Started with fakeReplicaEnv set,
// the binary is a fake replica instead (see contain_linux_test.go).
func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeReplicaEnv); dir != "" {
		os.Exit(fakeReplica(dir))
	}
	if v := os.Getenv(fakePausedReplicaEnv); v != "" {
		os.Exit(fakePausedReplica(v))
	}
	if os.Getenv(fakeArgsEnv) != "" {
		os.Exit(fakeArgs())
	}
	if os.Getenv(fakeSecretReplicaEnv) != "" {
		os.Exit(fakeSecretReplica())
	}
	os.Exit(pgtest.MainNoLeaks(m))
}
