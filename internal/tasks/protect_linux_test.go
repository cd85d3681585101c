//go:build linux

package tasks_test

import (
	"context"
	"fmt"
	"io"
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

// fakeSecretReplicaEnv makes the test binary a fake replica that holds a
// database password in its environment and runs one command that reads
// the replica's /proc/<pid>/environ.
const fakeSecretReplicaEnv = "STUDIOCTL_TASKS_FAKE_SECRET_REPLICA"

// fakeSecret is the password in the fake replica's environment.
const fakeSecret = "hunter2-in-environ"

// fakeSecretReplica is the main of that fake replica. It prints what the
// command read, then whether the replica itself still has its password.
func fakeSecretReplica() int {
	script := `tr '\0' '\n' < /proc/$1/environ 2>&1 || echo "read failed"`
	res := tasks.Command{Argv: sh(script, strconv.Itoa(os.Getpid()))}.Run(context.Background(), tasks.Env{JobID: "snoop"})
	fmt.Print(res.Output)
	fmt.Printf("run error: %v\n", res.Err)
	fmt.Printf("replica getenv PGPASSWORD=%s\n", os.Getenv("PGPASSWORD"))
	return 0
}

// runSecretReplica starts the fake replica, as uid when it is not -1, and
// returns its output.
func runSecretReplica(t *testing.T, uid int) string {
	t.Helper()
	bin := os.Args[0]
	dir := ""
	if uid >= 0 {
		// The test binary sits in a folder only root may enter: copy it
		// where the other user may run it.
		var err error
		if dir, err = os.MkdirTemp("", "tasks-protect-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(dir, "tasks.test")
		copyFile(t, os.Args[0], bin)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		fakeSecretReplicaEnv+"=1",
		"PGPASSWORD="+fakeSecret,
		"STUDIO_DATABASE_URL=postgres://app:"+fakeSecret+"@db/app",
		"API_PASSWORD="+fakeSecret,
		"STUDIO_NOT_SECRET=visible")
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fake replica: %v\n%s", err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCommandCannotReadTheReplicaSecretsThroughProc: a command runs as the
// replica's user, and /proc/<replica>/environ showed it STUDIO_DATABASE_URL
// and PGPASSWORD in full, whatever its own clean environment held. The
// replica is not dumpable now, so a command of a non-root replica cannot
// open it at all; a root command with CAP_SYS_PTRACE still can, but finds
// the secret values overwritten. The replica's own os.Getenv still has them.
func TestCommandCannotReadTheReplicaSecretsThroughProc(t *testing.T) {
	t.Parallel()
	// readable: "no" for a command that must not open the replica's
	// environ, "maybe" for root.
	check := func(t *testing.T, out string, readable string) {
		t.Helper()
		read, _, _ := strings.Cut(out, "run error: ") // what the command printed
		if strings.Contains(read, fakeSecret) {
			t.Errorf("the command read the replica's secrets:\n%s", out)
		}
		if !strings.Contains(out, "replica getenv PGPASSWORD="+fakeSecret+"\n") {
			t.Errorf("the replica lost its own password:\n%s", out)
		}
		if readable == "maybe" {
			// Root reads it only with CAP_SYS_PTRACE, which a container
			// may not give.
			readable = "yes"
			if strings.Contains(read, "Permission denied") {
				readable = "no"
			}
		}
		if readable == "yes" {
			for _, want := range []string{"\nPGPASSWORD=xxxxxxxxxxxxxxxxxx\n", "\nSTUDIO_NOT_SECRET=visible\n", "\nSTUDIO_DATABASE_URL=xxxxxxxx"} {
				if !strings.Contains(out, want) {
					t.Errorf("the environment read as root lacks %q:\n%s", want, out)
				}
			}
		} else if !strings.Contains(out, "Permission denied") {
			t.Errorf("a command of the replica's own user could open its environ:\n%s", out)
		}
	}
	if os.Getuid() != 0 {
		check(t, runSecretReplica(t, -1), "no")
		return
	}
	t.Run("as root", func(t *testing.T) {
		t.Parallel()
		check(t, runSecretReplica(t, -1), "maybe")
	})
	t.Run("as an unprivileged user", func(t *testing.T) {
		t.Parallel()
		check(t, runSecretReplica(t, 65534), "no")
	})
}

// TestCommandThatKillsItsShimLeavesNothingBehind: a command may kill its
// own job shim (it runs as the same user). Its processes were then
// orphans of PID 1 and ran on after the run; those still in the shim's
// process group are killed now.
func TestCommandThatKillsItsShimLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := `sleep 150 & echo $! > "$1/bg"; kill -9 $PPID; sleep 150`
	start := time.Now()
	res := tasks.Command{Argv: sh(script, dir)}.Run(context.Background(), testEnv)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "without a report") {
		t.Errorf("error = %v, want the shim's missing report", res.Err)
	}
	if elapsed := time.Since(start); elapsed > slack {
		t.Errorf("Run returned after %v", elapsed)
	}
	pid := readPid(t, dir, "bg")
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the background process %d outlived the run whose shim was killed", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeArgsEnv makes the test binary call HideArgSecrets and print its
// os.Args and its /proc/self/cmdline.
const fakeArgsEnv = "STUDIOCTL_TASKS_FAKE_ARGS"

func fakeArgs() int {
	if err := tasks.HideArgSecrets(); err != nil {
		fmt.Println("error:", err)
	}
	fmt.Printf("args: %q\n", os.Args[1:])
	b, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		fmt.Println("error:", err)
	}
	fmt.Printf("cmdline: %q\n", strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")[1:])
	return 0
}

// TestHideArgSecretsHidesTheDatabasePasswordFromPs: /proc/<pid>/cmdline is
// readable by every local user, and `studioctl run --database-url
// postgres://app:pw@db/app` showed the password to all of them in ps.
func TestHideArgSecretsHidesTheDatabasePasswordFromPs(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "run", "--database-url", "postgres://app:s3cr%40t@db/app",
		"--database-url=host=db password='two words' user=app", "--actor", "s3cr%40t-not-a-url")
	cmd.Env = append(os.Environ(), fakeArgsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := `args: ["run" "--database-url" "postgres://app:s3cr%40t@db/app" "--database-url=host=db password='two words' user=app" "--actor" "s3cr%40t-not-a-url"]
cmdline: ["run" "--database-url" "postgres://app:xxxxxxxx@db/app" "--database-url=host=db password='xxxxxxxxx' user=app" "--actor" "s3cr%40t-not-a-url"]
`
	if string(out) != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

// TestCommandThatStopsItsShimLeavesNoDaemonBehind: a stopped shim (kill
// -STOP of the job's group, or of the shim by its own job) did not act on
// the replica's stop; the fallback SIGKILL of its group then left a setsid
// daemon of the run running. The replica wakes the shim now.
func TestCommandThatStopsItsShimLeavesNoDaemonBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := `setsid sh -c 'echo $$ > "$1/daemon.tmp"; mv "$1/daemon.tmp" "$1/daemon"; exec sleep 150' sh "$1" &
while [ ! -e "$1/daemon" ]; do sleep 0.01; done
kill -STOP $PPID; touch "$1/ready"; sleep 150`
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan tasks.Result, 1)
	go func() { done <- tasks.Command{Argv: sh(script, dir), KillGrace: time.Second}.Run(ctx, testEnv) }()
	waitForFile(t, filepath.Join(dir, "ready"))
	cancel()
	res := <-done
	if res.Err == nil {
		t.Errorf("Run succeeded; want the run stopped")
	}
	pid := readPid(t, dir, "daemon")
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the setsid daemon %d outlived the run whose shim was stopped (%v)", pid, res.Err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
