package e2edeploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/tasks"
)

// stopStateMargin is what a stop grace period must leave on top of the
// drain budget: the final state write (5 s at most) and the HTTP server's
// close (2 s), rounded up.
const stopStateMargin = 8 * time.Second

// drainBudget is the longest a clean stop takes with drain.delay delay:
// the delay, the runner's wait for runs in progress, then a job command's
// kill grace after SIGTERM. A supervisor's stop grace period must exceed
// it by stopStateMargin, or a rollout turns into a crash.
func drainBudget(delay time.Duration) time.Duration {
	return delay + runner.DefaultShutdownWait + tasks.DefaultKillGrace
}

// deployPath is the path of a file under deploy/.
func deployPath(parts ...string) string {
	return filepath.Join(append([]string{repoRoot, "deploy"}, parts...)...)
}

// readDeploy reads a file under deploy/.
func readDeploy(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(deployPath(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkArgs fails the test unless the binary accepts args (a command and
// its flags, as a unit or a manifest runs it): cobra parses every flag of
// `args --help` and refuses an unknown one.
func checkArgs(t testing.TB, where string, args []string) {
	t.Helper()
	out, errOut, code := studioctlBin.RunEnv(t, nil, append(slices.Clone(args), "--help")...)
	if code != 0 {
		t.Errorf("%s: studioctl %s is refused by the binary (exit %d): %s%s", where, strings.Join(args, " "), code, errOut, out)
	}
}

// checkEnv fails the test for a STUDIO_* variable that is no configuration
// key of the binary, runs `studioctl config show` with env (and args, such
// as --config FILE) to check that the binary accepts the values, and
// returns the drain.delay it reads.
func checkEnv(t testing.TB, where string, env map[string]string, args ...string) time.Duration {
	t.Helper()
	known := map[string]bool{}
	for _, k := range config.Keys() {
		known[config.EnvName(k)] = true
	}
	var list []string
	for k, v := range env {
		if strings.HasPrefix(k, config.EnvPrefix+"_") && !known[k] {
			t.Errorf("%s: %s is not a configuration variable of the binary", where, k)
		}
		list = append(list, k+"="+v)
	}
	out, errOut, code := studioctlBin.RunEnv(t, list, append(slices.Clone(args), "config", "show", "-o", "json")...)
	if code != 0 {
		t.Fatalf("%s: studioctl config show refuses the environment (exit %d): %s", where, code, errOut)
	}
	var shown struct {
		Drain struct {
			Delay string `json:"delay"`
		} `json:"drain"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("%s: config show -o json: %v\n%s", where, err, out)
	}
	d, err := config.ParseDuration(shown.Drain.Delay)
	if err != nil {
		t.Fatalf("%s: drain.delay %q: %v", where, shown.Drain.Delay, err)
	}
	return d
}

// checkGrace fails the test unless grace covers the drain with delay.
func checkGrace(t testing.TB, where string, grace, delay time.Duration) {
	t.Helper()
	if need := drainBudget(delay) + stopStateMargin; grace < need {
		t.Errorf("%s: stop grace period %s does not cover the drain: drain.delay %s + the runner's wait %s + the kill grace %s + %s for the state write = %s",
			where, grace, delay, runner.DefaultShutdownWait, tasks.DefaultKillGrace, stopStateMargin, need)
	}
}
