package e2ejobs

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestReplicaDeathEndsItsJobProcesses runs, on a real `studioctl run`, an
// instance job `sh -c 'sleep 150 & setsid sleep 150 & sleep 150'`, then ends
// the replica with SIGKILL, SIGQUIT or SIGHUP. Every process of the job
// (found by its EXP_DIR in /proc/<pid>/environ), the setsid daemon
// included, must be gone within 1 s of the replica's end. Before the job
// shim, kill -9 left all three sleeps running, and the next replica ran the
// job beside them.
func TestReplicaDeathEndsItsJobProcesses(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGQUIT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			script := `sleep 150 & echo $! > "$EXP_DIR/bg"; setsid sleep 150 & echo $! > "$EXP_DIR/daemon"; touch "$EXP_DIR/ready"; sleep 150`
			f := newFixture(t, shJob("hold", "instance", "2s", "", script))
			marker := "EXP_DIR=" + f.dir
			t.Cleanup(func() {
				for _, pid := range processesWith(marker) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			p := f.startReplica("contain-" + strconv.Itoa(int(sig)))
			p.WaitReady(t)
			// The job shim, sh, the background sleep, the daemon, the
			// foreground sleep. The replica has EXP_DIR in its environment
			// too, but it is not dumpable (tasks.ProtectSecrets): only root
			// reads its environ, so it is not counted.
			var pids []int
			replicaproc.Eventually(t, 60*time.Second, "the job's processes up", func() error {
				pids = slices.DeleteFunc(processesWith(marker), func(pid int) bool { return pid == p.PID() })
				if _, err := os.Stat(filepath.Join(f.dir, "ready")); err != nil || len(pids) < 5 {
					return errNotYet(pids)
				}
				return nil
			})
			daemon, _ := readPID(filepath.Join(f.dir, "daemon"))

			signalled := time.Now()
			p.Signal(t, sig)
			p.WaitExit(t, replicaproc.ExitTimeout)
			exited := time.Now()
			gone := replicaproc.Eventually(t, 30*time.Second, "the job's processes gone", func() error {
				if left := processesWith(marker); len(left) > 0 {
					return errNotYet(left)
				}
				return nil
			})
			goneAfterExit := time.Since(exited)
			t.Logf("%d processes of the job and its shim (daemon %d) gone %v after %v of the replica, %v after it exited (%v polling)",
				len(pids), daemon, time.Since(signalled).Round(time.Millisecond), sig, goneAfterExit.Round(time.Millisecond), gone.Round(time.Millisecond))
			// The promise is 1 s (logged above); the test fails only past
			// 4.5 s, which the 5 s grace of a SIGTERM path would pass but a
			// loaded machine does not (4.05 s at load average 26 in CI).
			if goneAfterExit > 4500*time.Millisecond {
				t.Errorf("the job's processes took %v after the replica's end to go, want at most 1 s (the test allows 4.5 s)", goneAfterExit)
			}
		})
	}
}

type errNotYet []int

func (e errNotYet) Error() string { return "processes: " + strconv.Itoa(len(e)) }

// processesWith lists the live processes whose environment holds entry.
func processesWith(entry string) []int {
	want := []byte("\x00" + entry + "\x00")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, b...), want) {
			continue
		}
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
