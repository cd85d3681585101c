package replicaproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// httpClient bounds every probe of a replica's HTTP server.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// Get fetches http://addr/path and returns the status and the body,
// trimmed.
func Get(addr, path string) (int, string, error) {
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// Metric reads one sample without labels from the replica's /metrics.
func Metric(addr, name string) (float64, error) {
	code, body, err := Get(addr, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// Run runs the binary with args against dbURL, in a folder of its own with
// the children's environment, and returns stdout, stderr and the exit code.
func (b *Binary) Run(t testing.TB, dbURL string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return b.RunEnv(t, []string{"STUDIO_DATABASE_URL=" + dbURL}, args...)
}

// RunEnv is Run with the environment settings env (STUDIO_DATABASE_URL
// and any other) instead of a URL.
func (b *Binary) RunEnv(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), ExitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.Path, args...)
	cmd.Dir = dir
	cmd.Env = b.Env(dir, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("studioctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// CPU is the user and system CPU time of process pid so far (0 once it is
// gone), from /proc.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	// After the command: state, ppid, pgrp, session, tty, tpgid, flags,
	// minflt, cminflt, majflt, cmajflt, utime, stime (fields 3 to 15).
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// RSS is the resident memory of process pid in MiB (0 once it is gone).
func RSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}
