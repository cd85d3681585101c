//go:build !linux

package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// groupPollEvery is how often Run looks whether a process group is empty.
// It lives here, the only file that uses it: in command.go, a Linux
// staticcheck found it unused and it was removed, which broke every other
// system's build.
const groupPollEvery = 10 * time.Millisecond

// run starts the command in a new process group and stops that group. There
// is no child subreaper here: a process that leaves the group (setsid)
// escapes, a replica killed with SIGKILL leaves the group running, and the
// deadline is not enforced: nothing outlives a paused replica to do it
// (docs/jobs-processes.md).
func (c Command) run(ctx context.Context, name string, grace time.Duration, environ []string, deadline func() time.Time) Result {
	// One pipe for stdout and stderr, read by our own goroutine: cmd.Wait
	// then returns when the process exits, whoever else holds the pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{Err: fmt.Errorf("command %q: create output pipe: %w", name, err)}
	}
	defer pr.Close()
	cmd := exec.Command(name, c.Argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return Result{Err: fmt.Errorf("start command %q: %w", name, err)}
	}
	pgid := cmd.Process.Pid // the leader of its own new group

	out := newTailBuffer(OutputTailBytes)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(out, pr) // ends at EOF, or with an error once pr is closed
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		waitErr  error
		stopped  bool      // ctx was done before the command ended
		sigkill  bool      // SIGTERM was not enough
		graceEnd time.Time // when the group gets SIGKILL
	)
	select {
	case waitErr = <-exited:
	case <-ctx.Done():
		stopped = true
		signalGroup(pgid, syscall.SIGTERM)
		graceEnd = time.Now().Add(grace)
		timer := time.NewTimer(grace)
		select {
		case waitErr = <-exited:
		case <-timer.C:
			signalGroup(pgid, syscall.SIGKILL)
			sigkill = true
			waitErr = <-exited
		}
		timer.Stop()
	}

	// The leader is reaped; the rest of its group must go too.
	if groupAlive(pgid) {
		if !stopped {
			signalGroup(pgid, syscall.SIGTERM)
			graceEnd = time.Now().Add(grace)
		}
		if !waitGroupGone(pgid, graceEnd) {
			signalGroup(pgid, syscall.SIGKILL)
			sigkill = sigkill || stopped
			waitGroupGone(pgid, time.Now().Add(killWaitMax))
		}
	}

	timer := time.NewTimer(drainWaitMax)
	select {
	case <-drained:
	case <-timer.C:
		pr.Close() // a process outside the group still holds the pipe
		<-drained
	}
	timer.Stop()

	res := Result{Output: out.String()}
	switch {
	case stopped:
		res.Err = fmt.Errorf("command %q: %w", name, &ErrKilled{
			Cause: context.Cause(ctx), SIGKILL: sigkill, Grace: grace, Err: waitErr,
		})
	case waitErr != nil:
		res.Err = fmt.Errorf("command %q: %w", name, waitErr)
	}
	return res
}

// signalGroup sends sig to every process of group pgid. A group that is
// already gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) {
	syscall.Kill(-pgid, sig)
}

// waitGroupGone polls until group pgid has no live process or until is
// reached, and reports whether the group is gone.
func waitGroupGone(pgid int, until time.Time) bool {
	for {
		if !groupAlive(pgid) {
			return true
		}
		if !time.Now().Before(until) {
			return false
		}
		time.Sleep(groupPollEvery)
	}
}

// groupAlive reports whether group pgid has a process that is not a zombie.
//
// kill(-pgid, 0) alone is not enough: it also finds zombies, and an orphan
// whose new parent never reaps (PID 1 of many containers is not an init)
// stays a zombie forever. Where /proc exists, a group whose members are
// all zombies counts as gone.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, group, ok := procState(pid)
		if ok && group == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procState reads the state and process group of pid from /proc/<pid>/stat.
func procState(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pgrp, true
}
