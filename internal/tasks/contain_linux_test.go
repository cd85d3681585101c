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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/tasks"
)

// fakeReplicaEnv makes the test binary a fake replica: it runs
// fakeReplicaScript under Command.Run with the directory named by the
// variable, and blocks until it is killed.
const fakeReplicaEnv = "STUDIOCTL_TASKS_FAKE_REPLICA"

// fakeReplicaScript starts a background sleep, a setsid daemon and a
// foreground sleep, as in issue 7, and marks when all are up.
const fakeReplicaScript = `sleep 150 & echo $! > "$1/bg"
setsid sh -c 'echo $$ > "$1/daemon.tmp"; mv "$1/daemon.tmp" "$1/daemon"; exec sleep 150' sh "$1" &
while [ ! -e "$1/daemon" ]; do sleep 0.01; done
touch "$1/ready"
sleep 150`

// fakeReplica is the main of a fake replica: the job id is the marker
// that the test finds the job's processes by.
func fakeReplica(dir string) int {
	marker := markerFor(dir)
	res := tasks.Command{Argv: sh(fakeReplicaScript, dir)}.Run(context.Background(), tasks.Env{JobID: marker, ReplicaID: "fake"})
	fmt.Fprintf(os.Stderr, "fake replica: the job ended: %v\n", res.Err)
	return 1
}

// daemonScript leaves behind a background sleep, a setsid daemon and a
// double-forked setsid daemon, then exits 0 (or sleeps with "wait").
const daemonScript = `sleep 150 & echo $! > "$1/bg"
setsid sh -c 'echo $$ > "$1/daemon.tmp"; mv "$1/daemon.tmp" "$1/daemon"; exec sleep 150' sh "$1" &
( setsid sh -c 'echo $$ > "$1/double.tmp"; mv "$1/double.tmp" "$1/double"; exec sleep 150' sh "$1" & )
while [ ! -e "$1/daemon" ] || [ ! -e "$1/double" ]; do sleep 0.01; done
echo up
if [ "$2" = wait ]; then touch "$1/ready"; sleep 150; fi`

func TestCommandLeavesNoDaemonBehindWhenItSucceeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := markerFor(dir)
	start := time.Now()
	res := tasks.Command{Argv: sh(daemonScript, dir, "exit")}.Run(context.Background(), tasks.Env{JobID: marker})
	elapsed := time.Since(start)
	if res.Err != nil || res.Output != "up\n" {
		t.Fatalf("Run = %q, %v; want up, success", res.Output, res.Err)
	}
	if elapsed > slack {
		t.Errorf("Run returned after %v", elapsed)
	}
	for _, name := range []string{"bg", "daemon", "double"} {
		if pid := readPid(t, dir, name); processAlive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the %s process %d outlived the run", name, pid)
		}
	}
	if left := jobProcesses(marker); len(left) > 0 {
		t.Errorf("processes of the run still running: %v", left)
	}
}

func TestCommandLeavesNoDaemonBehindWhenItTimesOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := markerFor(dir)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan tasks.Result, 1)
	go func() {
		done <- tasks.Command{Argv: sh(daemonScript, dir, "wait")}.Run(ctx, tasks.Env{JobID: marker})
	}()
	waitForFile(t, filepath.Join(dir, "ready"))
	pids := jobProcesses(marker)
	cancel(context.DeadlineExceeded)
	res := <-done
	var killed *tasks.ErrKilled
	if !errors.As(res.Err, &killed) || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want an *ErrKilled for the deadline", res.Err)
	} else if killed.SIGKILL {
		t.Errorf("SIGKILL was needed for processes that die on SIGTERM: %v", res.Err)
	}
	t.Logf("error: %v; %d processes of the run were up", res.Err, len(pids))
	for _, name := range []string{"bg", "daemon", "double"} {
		if pid := readPid(t, dir, name); processAlive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the %s process %d outlived the run", name, pid)
		}
	}
	if left := jobProcesses(marker); len(left) > 0 {
		t.Errorf("processes of the run still running: %v", left)
	}
}

// TestCommandProcessesDieWithTheReplica kills a fake replica (this test
// binary started again) while its job runs a background sleep, a setsid
// daemon and a foreground sleep, and measures how long the job's
// processes take to go.
// deathBound is how long TestCommandProcessesDieWithTheReplica lets the
// job's processes take to go: the promise is 1 s, the bound leaves room for
// a loaded machine.
const deathBound = 3 * time.Second

func TestCommandProcessesDieWithTheReplica(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			marker := markerFor(dir)
			replica := exec.Command(os.Args[0])
			replica.Env = append(os.Environ(), fakeReplicaEnv+"="+dir)
			var stderr bytes.Buffer
			replica.Stderr = &stderr
			if err := replica.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // after a failure: leave nothing running
				replica.Process.Kill()
				replica.Wait()
				for _, pid := range jobProcesses(marker) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			waitForFile(t, filepath.Join(dir, "ready"))
			// sh, the background sleep, the daemon and the foreground
			// sleep (and the job shim).
			pids := jobProcesses(marker)
			for up := time.Now().Add(10 * time.Second); len(pids) < 4 || !slices.Contains(pids, readPid(t, dir, "daemon")); pids = jobProcesses(marker) {
				if time.Now().After(up) {
					t.Fatalf("only %d processes of the job found: %v", len(pids), pids)
				}
				time.Sleep(5 * time.Millisecond)
			}
			killed := time.Now()
			if err := replica.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			deadline := killed.Add(10 * time.Second)
			for left := jobProcesses(marker); len(left) > 0; left = jobProcesses(marker) {
				if time.Now().After(deadline) {
					for _, pid := range left {
						syscall.Kill(pid, syscall.SIGKILL)
					}
					t.Fatalf("processes of the job still running 10 s after %v of the replica: %v", sig, left)
				}
				time.Sleep(time.Millisecond)
			}
			gone := time.Since(killed)
			t.Logf("%d job processes gone %v after %v of the replica", len(pids), gone.Round(time.Millisecond), sig)
			// The promise is 1 s (measured and logged above, and in
			// docs/jobs-processes.md); the test fails only past 3 s, which
			// no loaded machine explains but the 5 s grace of a SIGTERM
			// path would.
			if gone > deathBound {
				t.Errorf("the job's processes took %v to go after %v of the replica, want at most 1 s (the test allows %v)", gone, sig, deathBound)
			}
		})
	}
}

func TestCommandGetsACleanEnvironment(t *testing.T) {
	// The replica's secrets, which no command may see.
	secrets := map[string]string{
		"STUDIO_DATABASE_URL": "postgres://app:hunter2@db/app",
		"DATABASE_URL":        "postgres://app:hunter2@db/app",
		"PGPASSWORD":          "hunter2",
		"PGHOST":              "db",
		"STUDIO_LOG_LEVEL":    "debug",
		"AWS_SECRET":          "s3cr3t",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("LANG", "C.UTF-8")
	listed := map[string]string{"REPORT_DIR": "/srv/reports", "PGAPPNAME": "nightly", "LANG": "de_DE.UTF-8"}
	res := tasks.Command{Argv: []string{"env"}, Env: listed}.Run(context.Background(), testEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	got := strings.Split(strings.TrimSpace(res.Output), "\n")
	slices.Sort(got)
	want := []string{
		"LANG=de_DE.UTF-8", "PATH=" + os.Getenv("PATH"), "PGAPPNAME=nightly", "REPORT_DIR=/srv/reports",
		"STUDIO_CLUSTER=", "STUDIO_JOB_ID=nightly-report", "STUDIO_REPLICA_ID=replica-7", "STUDIO_RUN_SEQ=42",
		"STUDIO_SCHEDULED_AT=", "STUDIO_OCCURRENCE_KEY=", "STUDIO_TRIGGERED=false", "STUDIO_FENCING_TOKEN=",
	}
	if home, ok := os.LookupEnv("HOME"); ok {
		want = append(want, "HOME="+home)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("environment:\n got %q\nwant %q", got, want)
	}
	if strings.Contains(res.Output, "hunter2") || strings.Contains(res.Output, "s3cr3t") {
		t.Errorf("a secret reached the command:\n%s", res.Output)
	}
}

// markerFor makes a job id, unique to the test, that every process of its
// run carries in its environment.
func markerFor(dir string) string {
	return "contain-" + filepath.Base(filepath.Dir(dir)) + "-" + filepath.Base(dir)
}

// jobProcesses lists the live processes whose environment holds
// STUDIO_JOB_ID=marker.
func jobProcesses(marker string) []int {
	want := []byte("STUDIO_JOB_ID=" + marker + "\x00")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(b, want) {
			continue
		}
		if processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestCommandLeavesNoStoppedProcessBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A stopped process does not act on SIGTERM until it is continued.
	script := `sleep 150 & echo $! > "$1/stopped"; kill -STOP $!; echo done`
	res := tasks.Command{Argv: sh(script, dir)}.Run(context.Background(), testEnv)
	if res.Err != nil || res.Output != "done\n" {
		t.Fatalf("Run = %q, %v; want done, success", res.Output, res.Err)
	}
	if pid := readPid(t, dir, "stopped"); processAlive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the stopped process %d outlived the run", pid)
	}
}

func TestCommandKilledByASignalReportsThatSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGSEGV, syscall.SIGUSR1, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			res := tasks.Command{Argv: sh(`kill -` + strconv.Itoa(int(sig)) + ` $$`)}.Run(context.Background(), testEnv)
			var exitErr *exec.ExitError
			if !errors.As(res.Err, &exitErr) {
				t.Fatalf("error = %v, want an *exec.ExitError", res.Err)
			}
			ws, ok := exitErr.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != sig {
				t.Errorf("status %v, want killed by %v", exitErr, sig)
			}
			if want := "signal: " + sig.String(); !strings.Contains(res.Err.Error(), want) {
				t.Errorf("error %q does not say %q", res.Err, want)
			}
		})
	}
}
