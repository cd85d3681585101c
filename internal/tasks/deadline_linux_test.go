//go:build linux

package tasks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/tasks"
)

// deadlineBound is how long past its deadline a run's processes may take
// to go: the shim SIGKILLs them at once and polls /proc every 5 ms, so this
// leaves room only for a loaded machine, not for any grace period.
const deadlineBound = 2 * time.Second

// fakePausedReplicaEnv makes the test binary a fake replica that runs
// fakeReplicaScript with a fixed deadline: the variable holds the
// directory and the deadline in Unix nanoseconds, "dir:nanos". It writes
// the run's error to dir/result and exits 0.
const fakePausedReplicaEnv = "STUDIOCTL_TASKS_FAKE_PAUSED_REPLICA"

func fakePausedReplica(v string) int {
	i := bytes.LastIndexByte([]byte(v), ':')
	if i < 0 {
		fmt.Fprintln(os.Stderr, "usage: "+fakePausedReplicaEnv+"=dir:unixnanos")
		return 2
	}
	dir := v[:i]
	nanos, err := strconv.ParseInt(v[i+1:], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: "+fakePausedReplicaEnv+"=dir:unixnanos")
		return 2
	}
	deadline := time.Unix(0, nanos)
	res := tasks.Command{Argv: sh(fakeReplicaScript, dir)}.Run(context.Background(),
		tasks.Env{JobID: markerFor(dir), ReplicaID: "fake", Deadline: func() time.Time { return deadline }})
	msg := "<nil>"
	if res.Err != nil {
		msg = res.Err.Error()
		if errors.Is(res.Err, tasks.ErrDeadline) {
			msg = "ErrDeadline: " + msg
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "result"), []byte(msg), 0o644); err != nil {
		return 1
	}
	return 0
}

// TestCommandEndsAtItsDeadlineWhileTheReplicaIsStopped is issue 21's
// pause: a fake replica (this test binary started again) runs a command
// with a background sleep, a setsid daemon and a foreground sleep, under a
// deadline 4 s after its start, and is stopped with SIGSTOP once they are
// up. The job shim, which the SIGSTOP does not stop, must end every one of
// them at the deadline, while the replica is still stopped; when the
// replica is continued, its run reports ErrDeadline. Before the deadline
// existed, they ran for as long as the replica stayed stopped.
func TestCommandEndsAtItsDeadlineWhileTheReplicaIsStopped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := markerFor(dir)
	deadline := time.Now().Add(4 * time.Second)
	replica := exec.Command(os.Args[0])
	replica.Env = append(os.Environ(), fakePausedReplicaEnv+"="+dir+":"+strconv.FormatInt(deadline.UnixNano(), 10))
	var stderr bytes.Buffer
	replica.Stderr = &stderr
	if err := replica.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after a failure: leave nothing running
		replica.Process.Signal(syscall.SIGCONT)
		replica.Process.Kill()
		replica.Wait()
		for _, pid := range jobProcesses(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	waitForFile(t, filepath.Join(dir, "ready"))
	if err := replica.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pids := jobProcesses(marker)
	if time.Until(deadline) < time.Second {
		t.Fatalf("the job was up only %v before its deadline: too late to tell an early kill from one at the deadline", time.Until(deadline))
	}
	if len(pids) < 4 {
		t.Fatalf("only %d processes of the job found: %v", len(pids), pids)
	}
	daemon := readPid(t, dir, "daemon")

	// Nothing is killed before the deadline.
	for time.Until(deadline) > 200*time.Millisecond {
		if !processAlive(daemon) {
			t.Fatalf("the daemon was gone %v before the deadline", time.Until(deadline))
		}
		time.Sleep(50 * time.Millisecond) // polling for an early kill, no synchronisation
	}
	// Everything is gone soon after it, the replica still stopped.
	for left := jobProcesses(marker); len(left) > 0; left = jobProcesses(marker) {
		if time.Since(deadline) > deadlineBound+3*time.Second {
			t.Fatalf("processes of the job still running %v after the deadline, the replica stopped: %v", time.Since(deadline).Round(time.Millisecond), left)
		}
		time.Sleep(time.Millisecond)
	}
	gone := time.Since(deadline)
	if state, _, _ := procStat(replica.Process.Pid); state != "T" {
		t.Errorf("the replica's state is %q, want T (stopped) while its job was ended", state)
	}
	t.Logf("%d job processes gone %v after the deadline, the replica stopped", len(pids), gone.Round(time.Millisecond))
	if gone > deadlineBound {
		t.Errorf("the job's processes took %v past the deadline to go, want at most %v", gone, deadlineBound)
	}

	if err := replica.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := replica.Wait(); err != nil {
		t.Fatalf("fake replica: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "result"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("ErrDeadline: ")) {
		t.Errorf("the continued replica's run ended with %q, want an error wrapping ErrDeadline", b)
	}
	t.Logf("the continued replica's run: %s", b)
}

func TestCommandEndsAtItsDeadlineWhenItIsNotMoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := markerFor(dir)
	deadline := time.Now().Add(1500 * time.Millisecond)
	start := time.Now()
	res := tasks.Command{Argv: sh(daemonScript, dir, "wait")}.Run(context.Background(),
		tasks.Env{JobID: marker, Deadline: func() time.Time { return deadline }})
	elapsed := time.Since(start)
	var killed *tasks.ErrKilled
	if !errors.As(res.Err, &killed) || !killed.Deadline || !killed.SIGKILL || !errors.Is(res.Err, tasks.ErrDeadline) {
		t.Fatalf("error = %v, want an *ErrKilled at the deadline, with SIGKILL, wrapping ErrDeadline", res.Err)
	}
	t.Logf("error after %v: %v", elapsed.Round(time.Millisecond), res.Err)
	if past := time.Since(deadline); past > deadlineBound {
		t.Errorf("Run returned %v after the deadline", past)
	}
	if res.Output != "up\n" {
		t.Errorf("output %q, want the command's up", res.Output)
	}
	for _, name := range []string{"bg", "daemon", "double"} {
		if pid := readPid(t, dir, name); processAlive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the %s process %d outlived the deadline", name, pid)
		}
	}
	if left := jobProcesses(marker); len(left) > 0 {
		t.Errorf("processes of the run still running: %v", left)
	}
}

// A deadline that moves on, as a renewed lease moves it, lets the command
// run well past the first one.
func TestCommandRunsPastItsFirstDeadlineWhileItMoves(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	moving := func() time.Time {
		calls.Add(1)
		return time.Now().Add(time.Second)
	}
	start := time.Now()
	res := tasks.Command{Argv: sh(`sleep 2.5; echo done`)}.Run(context.Background(), tasks.Env{JobID: "moving", Deadline: moving})
	if res.Err != nil || res.Output != "done\n" {
		t.Fatalf("Run = %q, %v after %v; want done, success", res.Output, res.Err, time.Since(start).Round(time.Millisecond))
	}
	if n := calls.Load(); n < 5 {
		t.Errorf("the deadline was read %d times in %v, want about every %v", n, time.Since(start).Round(time.Millisecond), tasks.DeadlineRefreshEvery)
	}
}

func TestCommandIsNotStartedPastItsDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	past := time.Now().Add(-time.Second)
	res := tasks.Command{Argv: sh(`touch "$1/started"`, dir)}.Run(context.Background(),
		tasks.Env{JobID: "late", Deadline: func() time.Time { return past }})
	if !errors.Is(res.Err, tasks.ErrDeadline) {
		t.Errorf("error = %v, want one wrapping ErrDeadline", res.Err)
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
		t.Errorf("the command ran although its deadline had passed")
	}
}

// A deadline that passes during the grace period after a stop cuts the
// grace short: a command that ignores SIGTERM does not get to run into the
// next owner's time.
func TestCommandDeadlineCutsTheGracePeriodShort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := `trap "" TERM
sleep 300 & echo $! > "$1/child"
touch "$1/ready"
wait`
	const grace = 20 * time.Second
	deadline := time.Now().Add(2 * time.Second)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan tasks.Result, 1)
	go func() {
		done <- tasks.Command{Argv: sh(script, dir), KillGrace: grace}.Run(ctx,
			tasks.Env{JobID: "grace", Deadline: func() time.Time { return deadline }})
	}()
	waitForFile(t, filepath.Join(dir, "ready"))
	leaseLost := errors.New("cluster lease lost")
	cancel(leaseLost)
	res := <-done
	if past := time.Since(deadline); past > deadlineBound {
		t.Errorf("Run returned %v after the deadline (the grace period is %v)", past.Round(time.Millisecond), grace)
	}
	var killed *tasks.ErrKilled
	if !errors.As(res.Err, &killed) || !killed.Deadline || !errors.Is(res.Err, leaseLost) || !errors.Is(res.Err, tasks.ErrDeadline) {
		t.Fatalf("error = %v, want an *ErrKilled at the deadline wrapping the cause and ErrDeadline", res.Err)
	}
	t.Logf("error: %v", res.Err)
	if pid := readPid(t, dir, "child"); processAlive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("child %d is still running", pid)
	}
}
