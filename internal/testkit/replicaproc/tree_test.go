package replicaproc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPostmasterPIDReadsTheFirstLineOfPostmasterPid(t *testing.T) {
	dir := t.TempDir()
	if got := PostmasterPID(dir); got != 0 {
		t.Fatalf("PostmasterPID of a folder without postmaster.pid = %d; want 0", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte("4242\n/var/lib/pg\n1700000000\n5432\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := PostmasterPID(dir); got != 4242 {
		t.Fatalf("PostmasterPID = %d; want 4242", got)
	}
}

func TestTreeCPUCountsTheProcessItself(t *testing.T) {
	if TreeCPU(0) != 0 {
		t.Fatal("TreeCPU(0) is not 0")
	}
	pid := os.Getpid()
	// Burn CPU until /proc shows some (its unit is 10 ms), within a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for CPU(pid) < 50*time.Millisecond && time.Now().Before(deadline) {
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
	own := CPU(pid)
	if own == 0 {
		t.Fatal("no CPU time of this process in /proc after 10s of work")
	}
	if tree := TreeCPU(pid); tree < own {
		t.Fatalf("TreeCPU(self) = %v; want at least the process's own %v", tree, own)
	}
}
