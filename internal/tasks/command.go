package tasks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Timing of a command's end.
const (
	// killWaitMax bounds the wait for a SIGKILLed group to disappear (a
	// process in uninterruptible sleep dies only when it wakes up).
	killWaitMax = 2 * time.Second
	// drainWaitMax bounds the wait for the end of the output once the group
	// is gone: a process that left the group (setsid) may still hold the
	// pipe open, and Run does not wait for it.
	drainWaitMax = 500 * time.Millisecond
)

// DeadlineRefreshEvery is how often a running command reads Env.Deadline
// and passes a deadline that moved to its job shim. A caller whose
// deadline moves in steps (a lease renewal) lets it run this much past the
// true end, so that the shim never acts on a value this stale.
const DeadlineRefreshEvery = 250 * time.Millisecond

// ErrDeadline is the cause of a run that its job shim ended because
// Env.Deadline passed: the replica did not move it later in time (it was
// paused, or stalled), so another replica may soon hold the lease or lock.
// errors.Is finds it in the error of such a run.
var ErrDeadline = errors.New("the run's deadline passed: the replica did not renew it in time")

// Command runs a program in its own process group, with a clean
// environment (see Environ). On Linux a job shim (see IsShim) runs it so
// that no process it starts outlives the run or the replica.
type Command struct {
	Argv      []string          // argv[0] is looked up in the job's PATH
	Dir       string            // optional working directory
	KillGrace time.Duration     // 0: DefaultKillGrace
	Env       map[string]string // the job's env: entries, added to the clean environment
}

// Kind returns "command".
func (Command) Kind() string { return KindCommand }

// ErrKilled wraps the error of a command that was stopped because its
// context was done, or ended by its job shim at its deadline (Env.Deadline). Find it with errors.As:
//
//	var killed *tasks.ErrKilled
//	if errors.As(res.Err, &killed) && killed.SIGKILL { ... }
//
// errors.Is on the error also matches the context's cause (for example
// context.DeadlineExceeded) and errors.As finds the *exec.ExitError.
type ErrKilled struct {
	Cause   error // context.Cause of the run's context
	SIGKILL bool  // SIGTERM was not enough: the group was SIGKILLed after the grace period
	// Deadline: Env.Deadline passed before the command ended, and the job
	// shim SIGKILLed every process of the run at once, without (or before
	// the end of) the grace period. Cause is then ErrDeadline, or the
	// context's cause when the replica had asked to stop the run first.
	Deadline bool
	Grace    time.Duration
	Err      error // how the command ended: "signal: terminated", "exit status 143"; nil if it exited 0
}

func (e *ErrKilled) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: ", e.Cause)
	switch {
	case e.Deadline:
		b.WriteString("killed with SIGKILL by its job shim at the deadline")
	case e.SIGKILL:
		fmt.Fprintf(&b, "killed with SIGKILL after SIGTERM and a %v grace period", e.Grace)
	default:
		b.WriteString("stopped with SIGTERM")
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

// Unwrap returns the context's cause, ErrDeadline when the deadline
// passed, and the command's own error.
func (e *ErrKilled) Unwrap() []error {
	errs := []error{e.Cause}
	if e.Deadline && !errors.Is(e.Cause, ErrDeadline) {
		errs = append(errs, ErrDeadline)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Run starts the command with the clean environment of Environ and keeps the
// last OutputTailBytes of its combined stdout and stderr. Stdin is
// /dev/null.
//
// When ctx is done, every process of the run gets SIGTERM, then SIGKILL
// after KillGrace; the error is an *ErrKilled that wraps context.Cause(ctx).
// When the command ends on its own but leaves processes behind, they get the
// same treatment (SIGTERM, grace, SIGKILL) so no job leaves processes
// running; that does not change the result. Run returns once the command is
// reaped and its processes are gone: after ctx is done, within KillGrace
// plus a few seconds at worst.
//
// When env.Deadline is set (Linux only), the job shim also ends every
// process of the run with SIGKILL once the deadline passes, whether or not
// this process is still running; the error is then an *ErrKilled that
// wraps ErrDeadline.
//
// "Every process of the run" is, on Linux, every descendant of the job
// shim, daemons that left the group with setsid included; elsewhere it is
// the command's process group (docs/jobs-processes.md).
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
	return c.run(ctx, name, grace, Environ(env, c.Env), env.Deadline)
}
