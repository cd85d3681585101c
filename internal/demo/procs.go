package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// stopWait is how long a replica told to stop (SIGTERM: a drain) may
	// take before it is killed.
	stopWait = 15 * time.Second
	// commandTimeout bounds one operator command the demo runs.
	commandTimeout = 30 * time.Second
	// logTail is how much of a child's stderr is kept, for errors.
	logTail = 16 << 10
)

// children starts and stops the demo's processes: every one of them is
// stopped and reaped on every exit path (stopAll), and on Linux the kernel
// kills them if the demo itself dies (Pdeathsig, procattr_linux.go).
type children struct {
	exe  string
	env  []string // the base environment of every child
	args []string // global flags before the verb (--config, --database-url)

	mu    sync.Mutex
	procs []*proc

	// spawn starts processes from one goroutine locked to its OS thread:
	// Pdeathsig fires when the thread that started a child ends, and Go
	// may end the threads of ordinary goroutines.
	spawn chan spawnReq
	quit  chan struct{}
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func newChildren(exe string, env, args []string) *children {
	c := &children{exe: exe, env: env, args: args, spawn: make(chan spawnReq), quit: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		for {
			select {
			case r := <-c.spawn:
				r.err <- r.cmd.Start()
			case <-c.quit:
				// The thread ends with the goroutine (still locked): every
				// child is reaped by now.
				return
			}
		}
	}()
	return c
}

// start starts cmd from the spawning thread.
func (c *children) start(cmd *exec.Cmd) error {
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	c.spawn <- r
	return <-r.err
}

// proc is one child process.
type proc struct {
	id     string
	cmd    *exec.Cmd
	stderr *tail
	done   chan struct{} // closed once reaped
	// expected: the demo killed or drained it, so its end is no failure.
	expected atomic.Bool
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail keeps the last logTail bytes written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > logTail {
		t.b = t.b[len(t.b)-logTail:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// childEnv is environ without anything that could carry a password or
// another database to a child (STUDIO_*, PGPASSWORD, PGPASSFILE,
// PGDATABASE, PGSERVICE*), plus extra.
func childEnv(environ []string, extra ...string) []string {
	drop := []string{"STUDIO_", "PGPASSWORD=", "PGPASSFILE=", "PGDATABASE=", "PGSERVICE", "NO_COLOR="}
	var env []string
	for _, kv := range environ {
		skip := false
		for _, p := range drop {
			skip = skip || strings.HasPrefix(kv, p)
		}
		if !skip {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startReplica starts the binary with args (`--config F run`) and the
// environment extra, which names the replica (STUDIO_REPLICA_ID).
func (c *children) startReplica(args []string, extra ...string) (*proc, error) {
	id := ""
	for _, kv := range extra {
		if v, ok := strings.CutPrefix(kv, "STUDIO_REPLICA_ID="); ok {
			id = v
		}
	}
	cmd := exec.Command(c.exe, args...)
	cmd.Env = append(append([]string{}, c.env...), extra...)
	cmd.Env = append(cmd.Env, "STUDIO_REPLICA_LISTEN=127.0.0.1:0")
	cmd.Stdin = nil
	cmd.Stdout = io.Discard
	p := &proc{id: id, cmd: cmd, stderr: &tail{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = procAttr()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.start(cmd); err != nil {
		return nil, fmt.Errorf("start replica %s: %w", id, err)
	}
	c.procs = append(c.procs, p)
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// command runs one operator command (`studioctl locks release ...`) and
// returns its stdout and stderr together.
func (c *children) command(ctx context.Context, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.exe, append(append([]string{}, c.args...), args...)...)
	cmd.Env = append(append([]string{}, c.env...), env...)
	cmd.SysProcAttr = procAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := c.start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), fmt.Errorf("studioctl %s: exit %d", strings.Join(args, " "), ee.ExitCode())
	}
	return out.String(), err
}

// kill sends SIGKILL to p and waits until it is reaped.
func (c *children) kill(p *proc) {
	p.expected.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stopAll stops every child still running: SIGTERM (the replica drains
// and exits), then SIGKILL for any still there after stopWait, and waits
// until every one is reaped.
func (c *children) stopAll() {
	c.mu.Lock()
	procs := append([]*proc{}, c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(stopWait)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	// Whatever a child left in its process group goes with it.
	for _, p := range procs {
		killGroup(p.cmd.Process.Pid)
	}
}

// close stops every child and the spawning goroutine.
func (c *children) close() {
	c.stopAll()
	close(c.quit)
}

// exitedEarly returns the first child that ended without the demo asking
// it to, and its log's last lines.
func (c *children) exitedEarly() (*proc, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.exited() && !p.expected.Load() {
			return p, lastLines(p.stderr.String(), 5)
		}
	}
	return nil, ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pids lists the process ids of the children (for the test's leak check).
func (c *children) pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, p := range c.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}
