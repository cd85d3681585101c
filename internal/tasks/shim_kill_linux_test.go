package tasks

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A shim whose kill deadline has passed by the time its first walk of
// /proc ends (a starved shim on a loaded host: issue 21, a duty command
// still running 51 s after kill -9 of its replica, re-parented to PID 1)
// still SIGKILLs its command and what the walk found. Before, it checked
// the deadline first and gave up without a single SIGKILL.
//
// Not parallel: the shim's reap waits for any child of this process.
func TestAShimPastItsKillDeadlineStillKillsItsCommand(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// The shim is the sleep's parent here (this process), its walk finds
	// nothing of its own (self is the sleep, which has no children), and
	// its deadline is already over: killWait 0.
	s := &shim{self: cmd.Process.Pid, job: cmd.Process.Pid, killWait: 0}
	s.kill()
	if s.status == nil {
		// Not reaped yet: look whether it is dying.
		deadline := time.Now().Add(10 * time.Second)
		for s.status == nil && time.Now().Before(deadline) {
			s.reap()
			time.Sleep(5 * time.Millisecond) // polling the kernel's reaping, nothing to synchronise on
		}
	}
	if s.status == nil {
		t.Fatal("the command is still running: the shim gave up at its deadline without SIGKILL")
	}
	if !s.status.Signaled() || s.status.Signal() != syscall.SIGKILL {
		t.Fatalf("the command ended with %v; want SIGKILL", *s.status)
	}
}
