package tasks_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/tasks"
)

// slack is how late a "prompt" return may be on a loaded machine. The
// commands, statements and handlers of these tests hang for 10 s or more,
// so a Run that waits for them still fails.
const slack = 5 * time.Second

var testEnv = tasks.Env{JobID: "nightly-report", ReplicaID: "replica-7", RunSeq: 42}

func sh(script string, args ...string) []string {
	return append([]string{"sh", "-c", script, "sh"}, args...)
}

func TestCommandKind(t *testing.T) {
	if got := (tasks.Command{}).Kind(); got != "command" {
		t.Errorf("Kind() = %q", got)
	}
}

func TestCommandSucceedsWithCombinedOutput(t *testing.T) {
	t.Parallel()
	res := tasks.Command{Argv: sh(`echo out; echo err >&2; echo again`)}.Run(context.Background(), testEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	if want := "out\nerr\nagain\n"; res.Output != want {
		t.Errorf("output = %q, want %q", res.Output, want)
	}
}

func TestCommandRunsInItsDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := tasks.Command{Argv: []string{"pwd", "-P"}, Dir: dir}.Run(context.Background(), testEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	want, _ := filepath.EvalSymlinks(dir)
	if got := strings.TrimSpace(res.Output); got != want {
		t.Errorf("pwd = %q, want %q", got, want)
	}
}

func TestCommandKeepsOnlyTheLastBytesOfAMegabyte(t *testing.T) {
	t.Parallel()
	// seq prints about 1.2 MB on stdout, then one line goes to stderr.
	res := tasks.Command{Argv: sh(`seq 1 200000; echo last-line >&2`)}.Run(context.Background(), testEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	var all strings.Builder
	for i := 1; i <= 200000; i++ {
		all.WriteString(strconv.Itoa(i))
		all.WriteByte('\n')
	}
	all.WriteString("last-line\n")
	if all.Len() < 1<<20 {
		t.Fatalf("test output is only %d bytes", all.Len())
	}
	want := all.String()[all.Len()-tasks.OutputTailBytes:]
	if len(res.Output) != tasks.OutputTailBytes {
		t.Fatalf("kept %d bytes, want %d", len(res.Output), tasks.OutputTailBytes)
	}
	if res.Output != want {
		t.Errorf("kept output differs from the last %d bytes:\n got %q...\nwant %q...", tasks.OutputTailBytes, res.Output[:40], want[:40])
	}
}

func TestCommandFailsWithItsExitStatus(t *testing.T) {
	t.Parallel()
	res := tasks.Command{Argv: sh(`echo bye; exit 3`)}.Run(context.Background(), testEnv)
	if res.Err == nil {
		t.Fatal("Run succeeded, want exit status 3")
	}
	if !strings.Contains(res.Err.Error(), "exit status 3") {
		t.Errorf("error %q does not name the exit status", res.Err)
	}
	var exitErr *exec.ExitError
	if !errors.As(res.Err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("error %v does not wrap an exit code 3", res.Err)
	}
	var killed *tasks.ErrKilled
	if errors.As(res.Err, &killed) {
		t.Errorf("a command that exited on its own reports ErrKilled: %v", res.Err)
	}
	if res.Output != "bye\n" {
		t.Errorf("output = %q", res.Output)
	}
}

func TestCommandReportsAMissingExecutable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cmd  tasks.Command
		is   error
	}{
		{"a name not in PATH", tasks.Command{Argv: []string{"studioctl-no-such-program"}}, exec.ErrNotFound},
		{"a path that does not exist", tasks.Command{Argv: []string{"./no-such-program"}, Dir: t.TempDir()}, fs.ErrNotExist},
		{"a working directory that does not exist", tasks.Command{Argv: []string{"true"}, Dir: "/no/such/dir"}, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.cmd.Run(context.Background(), testEnv)
			if !errors.Is(res.Err, tt.is) {
				t.Fatalf("error = %v, want one wrapping %v", res.Err, tt.is)
			}
			t.Logf("error: %v", res.Err)
		})
	}
	if res := (tasks.Command{}).Run(context.Background(), testEnv); res.Err == nil {
		t.Error("an empty argv ran")
	}
}

func TestCommandGetsTheStudioVariables(t *testing.T) {
	t.Parallel()
	script := `printf '%s|%s|%s|%s|%s' "$STUDIO_JOB_ID" "$STUDIO_REPLICA_ID" "$STUDIO_RUN_SEQ" "${STUDIO_CLUSTER-unset}" "$PATH"`
	tests := []struct {
		name    string
		cluster string
		want    string
	}{
		{"a run without a cluster has STUDIO_CLUSTER set and empty", "", "nightly-report|replica-7|42||"},
		{"a run for a cluster has its name", "kafka-eu-1", "nightly-report|replica-7|42|kafka-eu-1|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv
			env.Cluster = tt.cluster
			res := tasks.Command{Argv: sh(script)}.Run(context.Background(), env)
			if res.Err != nil {
				t.Fatalf("Run: %v", res.Err)
			}
			if want := tt.want + os.Getenv("PATH"); res.Output != want {
				t.Errorf("environment = %q, want %q", res.Output, want)
			}
		})
	}
}

func TestCommandIsNotStartedWhenCtxIsAlreadyDone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("replica shutting down")
	cancel(stop)
	res := tasks.Command{Argv: sh(`touch "$1/ran"`, dir)}.Run(ctx, testEnv)
	if !errors.Is(res.Err, stop) {
		t.Errorf("error = %v, want the cause", res.Err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran")
	}
}

func TestCommandTimeoutStopsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	// The leader starts a child shell, which starts a grandchild; the
	// leader also sleeps in the foreground. Each writes its pid, and the
	// child marks when all are up.
	script := `echo $$ > "$1/leader"
sh -c 'sleep 300 & echo $! > "$1/grandchild"; echo $$ > "$1/child"; touch "$1/ready"; wait' child "$1" &
sleep 300
wait`
	// On a loaded machine the deadline may come before the processes are
	// all up, which proves nothing: then try again with a longer one.
	for timeout := 500 * time.Millisecond; ; timeout *= 2 {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		res := tasks.Command{Argv: sh(script, dir)}.Run(ctx, testEnv)
		elapsed := time.Since(start)
		cancel()
		if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
			if timeout >= 8*time.Second {
				t.Fatalf("the script never got its processes up before the deadline: %v", res.Err)
			}
			t.Logf("processes not up within %v; trying again", timeout)
			continue
		}

		if elapsed > timeout+slack {
			t.Errorf("Run returned %v after a deadline of %v", elapsed, timeout)
		}
		if !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Errorf("error = %v, want one wrapping context.DeadlineExceeded", res.Err)
		}
		var killed *tasks.ErrKilled
		if !errors.As(res.Err, &killed) {
			t.Fatalf("error = %v, want an *ErrKilled", res.Err)
		}
		if killed.SIGKILL {
			t.Errorf("SIGKILL was needed for processes that die on SIGTERM: %v", res.Err)
		}
		t.Logf("error: %v", res.Err)

		leader := readPid(t, dir, "leader")
		for _, pid := range []int{leader, readPid(t, dir, "child"), readPid(t, dir, "grandchild")} {
			if processAlive(pid) {
				t.Errorf("process %d is still running", pid)
			}
		}
		if left := groupMembers(leader); len(left) > 0 {
			t.Errorf("processes of group %d still running: %v", leader, left)
		}
		return
	}
}

func TestCommandIgnoringSIGTERMIsKilledAfterTheGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Ignored signals stay ignored in children, so the background sleep
	// ignores SIGTERM too and holds the output pipe open.
	script := `trap "" TERM
sleep 300 & echo $! > "$1/child"
touch "$1/ready"
wait`
	const grace = 300 * time.Millisecond
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan tasks.Result, 1)
	go func() {
		done <- tasks.Command{Argv: sh(script, dir), KillGrace: grace}.Run(ctx, testEnv)
	}()
	waitForFile(t, filepath.Join(dir, "ready"))
	lockLost := errors.New("lock lost")
	stopped := time.Now()
	cancel(lockLost)
	res := <-done
	elapsed := time.Since(stopped)

	if elapsed < grace {
		t.Errorf("Run returned %v after the cancel, before the grace period of %v", elapsed, grace)
	}
	if elapsed > grace+slack {
		t.Errorf("Run returned %v after the cancel", elapsed)
	}
	var killed *tasks.ErrKilled
	if !errors.As(res.Err, &killed) || !killed.SIGKILL {
		t.Fatalf("error = %v, want an *ErrKilled with SIGKILL", res.Err)
	}
	if !errors.Is(res.Err, lockLost) {
		t.Errorf("error = %v, want one wrapping the cause", res.Err)
	}
	t.Logf("error: %v", res.Err)
	if pid := readPid(t, dir, "child"); processAlive(pid) {
		t.Errorf("child %d is still running", pid)
	}
}

func TestCommandLeavesNoBackgroundProcessBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The leader exits at once; its background child holds the output pipe.
	script := `sleep 300 & echo $! > "$1/child"; echo done`
	start := time.Now()
	res := tasks.Command{Argv: sh(script, dir)}.Run(context.Background(), testEnv)
	if elapsed := time.Since(start); elapsed > slack {
		t.Errorf("Run returned after %v", elapsed)
	}
	if res.Err != nil || res.Output != "done\n" {
		t.Errorf("Run = %q, %v; want done, success", res.Output, res.Err)
	}
	if pid := readPid(t, dir, "child"); processAlive(pid) {
		t.Errorf("background child %d is still running", pid)
	}
}

func TestCommandDoesNotWaitForAProcessThatLeftTheGroupWithThePipe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// setsid puts the sleep into a session of its own, out of reach of the
	// group's signals, still holding the output pipe.
	script := `setsid sh -c 'echo $$ > "$1/escapee.tmp"; mv "$1/escapee.tmp" "$1/escapee"; exec sleep 300' sh "$1" &
while [ ! -e "$1/escapee" ]; do sleep 0.01; done
echo done`
	start := time.Now()
	res := tasks.Command{Argv: sh(script, dir)}.Run(context.Background(), testEnv)
	elapsed := time.Since(start)
	pid := readPid(t, dir, "escapee")
	syscall.Kill(pid, syscall.SIGKILL) // ours to clean up: it left the group

	if elapsed > slack {
		t.Errorf("Run returned after %v", elapsed)
	}
	if res.Err != nil || res.Output != "done\n" {
		t.Errorf("Run = %q, %v; want done, success", res.Output, res.Err)
	}
}

// readPid reads a pid that a test script wrote to dir/name.
func readPid(t *testing.T, dir, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("the script did not write its %s pid: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s pid: %v", name, err)
	}
	return pid
}

// waitForFile polls until path exists.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processAlive reports whether pid runs. A zombie does not count: in a
// container whose PID 1 does not reap, an orphan stays a zombie forever.
func processAlive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// groupMembers lists the processes of group pgid that are not zombies.
func groupMembers(pgid int) []int {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, pgrp, ok := procStat(pid); ok && pgrp == pgid && state != "Z" && state != "X" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat reads the state and process group of pid.
func procStat(pid int) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0], pgrp, true
}
