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

// Timing of a command's end.
const (
	// groupPollEvery is how often Run looks whether a process group is empty.
	groupPollEvery = 10 * time.Millisecond
	// killWaitMax bounds the wait for a SIGKILLed group to disappear (a
	// process in uninterruptible sleep dies only when it wakes up).
	killWaitMax = 2 * time.Second
	// drainWaitMax bounds the wait for the end of the output once the group
	// is gone: a process that left the group (setsid) may still hold the
	// pipe open, and Run does not wait for it.
	drainWaitMax = 500 * time.Millisecond
)

// Command runs a program in its own process group.
type Command struct {
	Argv      []string      // argv[0] is looked up in PATH
	Dir       string        // optional working directory
	KillGrace time.Duration // 0: DefaultKillGrace
}

// Kind returns "command".
func (Command) Kind() string { return KindCommand }

// ErrKilled wraps the error of a command that was stopped because its
// context was done. Find it with errors.As:
//
//	var killed *tasks.ErrKilled
//	if errors.As(res.Err, &killed) && killed.SIGKILL { ... }
//
// errors.Is on the error also matches the context's cause (for example
// context.DeadlineExceeded) and errors.As finds the *exec.ExitError.
type ErrKilled struct {
	Cause   error // context.Cause of the run's context
	SIGKILL bool  // SIGTERM was not enough: the group was SIGKILLed after the grace period
	Grace   time.Duration
	Err     error // how the command ended: "signal: terminated", "exit status 143"; nil if it exited 0
}

func (e *ErrKilled) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: ", e.Cause)
	if e.SIGKILL {
		fmt.Fprintf(&b, "killed with SIGKILL after SIGTERM and a %v grace period", e.Grace)
	} else {
		b.WriteString("stopped with SIGTERM")
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

// Unwrap returns the context's cause and the command's own error.
func (e *ErrKilled) Unwrap() []error {
	errs := []error{e.Cause}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Run starts the command in a new process group with the STUDIO_* variables
// added to this process's environment, and keeps the last OutputTailBytes of
// its combined stdout and stderr. Stdin is /dev/null.
//
// When ctx is done, the whole group gets SIGTERM, then SIGKILL after
// KillGrace; the error is an *ErrKilled that wraps context.Cause(ctx). When
// the command ends on its own but leaves processes of its group behind,
// they get the same treatment (SIGTERM, grace, SIGKILL) so no job leaves
// processes running; that does not change the result. Run returns once the
// command is reaped and its group is empty: after ctx is done, within
// KillGrace plus a few seconds at worst.
func (c Command) Run(ctx context.Context, env Env) Result {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return Result{Err: errors.New("run command: empty argv")}
	}
	name := c.Argv[0]
	if ctx.Err() != nil {
		return Result{Err: fmt.Errorf("command %q not started: %w", name, context.Cause(ctx))}
	}
	if c.Dir != "" {
		// Checked here: a chdir failing in the child would read as a
		// missing executable.
		if fi, err := os.Stat(c.Dir); err != nil {
			return Result{Err: fmt.Errorf("command %q: working directory: %w", name, err)}
		} else if !fi.IsDir() {
			return Result{Err: fmt.Errorf("command %q: working directory %s is not a directory", name, c.Dir)}
		}
	}
	grace := c.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}

	// One pipe for stdout and stderr, read by our own goroutine: cmd.Wait
	// then returns when the process exits, whoever else holds the pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{Err: fmt.Errorf("command %q: create output pipe: %w", name, err)}
	}
	defer pr.Close()
	cmd := exec.Command(name, c.Argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(),
		"STUDIO_JOB_ID="+env.JobID,
		"STUDIO_REPLICA_ID="+env.ReplicaID,
		"STUDIO_RUN_SEQ="+env.runSeq(),
		"STUDIO_CLUSTER="+env.Cluster,
	)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = procAttr()
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
