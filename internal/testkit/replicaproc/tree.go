package replicaproc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PostmasterPID is the process id of the PostgreSQL server whose data
// directory is dataDir (SHOW data_directory), from its postmaster.pid; 0
// when it cannot be read.
func PostmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// TreeCPU is the CPU time of a PostgreSQL server: the postmaster with its
// reaped children (cutime, cstime) plus every live child. A backend that
// exits between two readings moves into the postmaster's c-times, so the
// difference of two readings counts it once. 0 for pid 0.
func TreeCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	// ticks reads utime+stime (and cutime+cstime with children) and the
	// parent of /proc/<p>/stat.
	ticks := func(p string, withChildren bool) (int64, int, bool) {
		b, err := os.ReadFile(filepath.Join("/proc", p, "stat"))
		if err != nil {
			return 0, 0, false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 > len(s) {
			return 0, 0, false
		}
		f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
		if len(f) < 15 {
			return 0, 0, false
		}
		ppid, _ := strconv.Atoi(f[1])
		last := 12 // utime, stime: fields 14, 15
		if withChildren {
			last = 14 // cutime, cstime: fields 16, 17
		}
		var sum int64
		for _, v := range f[11 : last+1] {
			n, _ := strconv.ParseInt(v, 10, 64)
			sum += n
		}
		return sum, ppid, true
	}
	total, _, _ := ticks(strconv.Itoa(pid), true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if n, ppid, ok := ticks(e.Name(), false); ok && ppid == pid {
			total += n
		}
	}
	return time.Duration(total) * time.Second / 100 // USER_HZ
}
