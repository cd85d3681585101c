//go:build linux

package tasks

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// How a run is contained on Linux (docs/jobs-processes.md).
//
// The replica starts its own executable again as a job shim (IsShim), in a
// process group of its own, with three extra pipes: the command's output
// (its stdout and stderr), a report from the shim (fd 3) and a control pipe
// to the shim (fd 4). The shim makes itself a child subreaper, so every
// process the command starts stays its descendant even after its parent
// exits or it calls setsid. It runs the command in its own group, and when
// the command exits, when the replica asks it to stop, or when the replica
// dies, it kills every descendant until none is left, then reports and
// exits with the command's own status.
//
// The shim learns that the replica is gone in two ways, either of which is
// enough: the control pipe reads end of file (the kernel closes the
// replica's end when the replica exits, however it dies), and the parent
// death signal (SIGTERM) arrives with getppid no longer the replica.
//
// A replica that is paused (SIGSTOP) is neither: its shim would wait for
// it while another replica takes the lease or the lock over. So a run with
// a deadline (Env.Deadline) gives it to the shim, first on its command
// line, then on the control pipe each time it moves; when the deadline
// passes, the shim SIGKILLs every descendant at once, whatever the replica
// does. Deadlines are read on CLOCK_BOOTTIME, which both processes share
// and which also counts a suspend of the host.

const (
	// shimStop is the byte the replica writes on the control pipe to stop
	// the run: SIGTERM, then SIGKILL after the grace period.
	shimStop = 't'
	// shimDeadline starts a message on the control pipe that moves the
	// run's deadline: 8 more bytes, the new deadline on CLOCK_BOOTTIME in
	// nanoseconds, big-endian. One write of 9 bytes, so it never
	// interleaves with a stop byte.
	shimDeadline = 'd'
	// controlWriteMax bounds one write on the control pipe: a shim that is
	// stopped (kill -STOP) does not read it, and the pipe may fill.
	controlWriteMax = time.Second
	// clockBoottime is CLOCK_BOOTTIME of clock_gettime(2).
	clockBoottime = 7
	// shimStopSlack is how long past the grace period the replica waits for
	// a stopping shim before it SIGKILLs the shim's process group.
	shimStopSlack = killWaitMax + time.Second
	// descendantPollEvery is how often the shim looks whether the processes
	// it signalled are gone.
	descendantPollEvery = 5 * time.Millisecond
	// shimReapEvery reaps orphans even if a SIGCHLD was lost.
	shimReapEvery = 500 * time.Millisecond
	// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
	prSetChildSubreaper = 36
)

// shimReport is what the shim writes on fd 3 before it exits.
type shimReport struct {
	StartErr *startError `json:"start_error,omitempty"`
	// SIGKILL: SIGTERM was not enough, some process of the run got SIGKILL.
	SIGKILL bool `json:"sigkill"`
	// Left lists processes still there after SIGKILL and killWaitMax (a
	// process in uninterruptible sleep dies only when it wakes up).
	Left []int `json:"left,omitempty"`
	// Deadline: the deadline passed while the command ran, and every
	// process of the run got SIGKILL.
	Deadline bool `json:"deadline,omitempty"`
}

// startError carries a failure to start the command from the shim, so the
// replica's error wraps exec.ErrNotFound or fs.ErrNotExist as before.
type startError struct {
	Kind  string `json:"kind"` // "lookup" (an *exec.Error), "path" (an *fs.PathError), "deadline" (ErrDeadline) or "other"
	Name  string `json:"name,omitempty"`
	Op    string `json:"op,omitempty"`
	Path  string `json:"path,omitempty"`
	Errno int    `json:"errno,omitempty"`
	Msg   string `json:"msg,omitempty"`
}

func newStartError(err error) *startError {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return &startError{Kind: "lookup", Name: ee.Name, Msg: ee.Err.Error()}
	}
	var pe *fs.PathError
	var errno syscall.Errno
	if errors.As(err, &pe) && errors.As(pe.Err, &errno) {
		return &startError{Kind: "path", Op: pe.Op, Path: pe.Path, Errno: int(errno)}
	}
	return &startError{Kind: "other", Msg: err.Error()}
}

func (e *startError) err() error {
	switch e.Kind {
	case "lookup":
		inner := errors.New(e.Msg)
		for _, known := range []error{exec.ErrNotFound, exec.ErrDot, fs.ErrPermission, fs.ErrNotExist} {
			if e.Msg == known.Error() {
				inner = known
			}
		}
		return &exec.Error{Name: e.Name, Err: inner}
	case "path":
		return &fs.PathError{Op: e.Op, Path: e.Path, Err: syscall.Errno(e.Errno)}
	case "deadline":
		return ErrDeadline
	}
	return errors.New(e.Msg)
}

// run starts the command under a job shim.
func (c Command) run(ctx context.Context, name string, grace time.Duration, environ []string, deadline func() time.Time) Result {
	if os.Getenv(shimEnv) != "" {
		return Result{Err: fmt.Errorf("command %q not started: this process is a job shim whose binary does not dispatch %s (call tasks.IsShim first in main or TestMain)", name, shimArg)}
	}
	// Before the first command of this process: a command runs as the
	// replica's user and must not read its secrets through /proc. A
	// failure leaves the process as it was; the run goes on.
	ProtectSecrets()
	var err error
	var pipes [6]*os.File // out r/w, report r/w, control r/w
	for i := 0; i < len(pipes); i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			for _, f := range pipes[:i] {
				f.Close()
			}
			return Result{Err: fmt.Errorf("command %q: create pipe: %w", name, err)}
		}
	}
	outR, outW, repR, repW, ctlR, ctlW := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]
	defer outR.Close()

	var first time.Time // the deadline the shim starts with; zero: none
	if deadline != nil {
		first = deadline()
	}
	args := append([]string{shimArg, strconv.Itoa(os.Getpid()), strconv.FormatInt(int64(grace), 10), strconv.FormatInt(bootDeadline(first), 10), name}, c.Argv[1:]...)
	// /proc/self/exe is the replica's own binary even after it was
	// replaced or deleted on disk (an upgrade), so shim and replica always
	// speak the same protocol. argv[0] names the binary for ps.
	cmd := exec.Command("/proc/self/exe", args...)
	if exe, err := os.Executable(); err == nil {
		cmd.Args[0] = exe
	}
	cmd.Dir = c.Dir
	cmd.Env = shimEnviron(environ)
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{repW, ctlR} // fd 3, fd 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// The parent death signal fires when the thread that started the child
	// ends, not the process: keep this goroutine on its thread until the
	// shim is reaped, so the thread outlives the shim.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err = cmd.Start()
	outW.Close()
	repW.Close()
	ctlR.Close()
	if err != nil {
		repR.Close()
		ctlW.Close()
		return Result{Err: fmt.Errorf("start command %q: job shim: %w", name, err)}
	}
	pgid := cmd.Process.Pid // the shim leads its group; the command stays in it
	ctl := startControl(ctlW, deadline, first)

	out := newTailBuffer(OutputTailBytes)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(out, outR) // ends at EOF, or with an error once outR is closed
	}()
	reported := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(repR) // EOF when the shim exits: no other process has fd 3
		repR.Close()
		reported <- b
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		waitErr  error
		stopped  bool // ctx was done before the shim ended
		fallback bool // the shim did not stop in time and got SIGKILL
	)
	select {
	case waitErr = <-exited:
	case <-ctx.Done():
		stopped = true
		ctl.stop()
		// A stopped shim (kill -STOP of the job's group, or of the shim
		// by its own job) would not read the byte, and the fallback
		// below would kill only its group: wake it so that it ends every
		// descendant, daemons that left the group included.
		syscall.Kill(pgid, syscall.SIGCONT)
		timer := time.NewTimer(grace + shimStopSlack)
		select {
		case waitErr = <-exited:
		case <-timer.C:
			syscall.Kill(-pgid, syscall.SIGKILL)
			fallback = true
			waitErr = <-exited
		}
		timer.Stop()
	}
	ctl.close() // only now: end of file tells the shim the replica is gone
	raw := <-reported
	if len(raw) == 0 && !fallback {
		// The shim died without its report: something killed it (a job
		// runs as the replica's user and may kill its own shim). Its
		// descendants are orphans of PID 1 now, out of any subreaper's
		// reach; those still in the shim's process group are not. While
		// the group has members, its id is not given to a new process.
		syscall.Kill(-pgid, syscall.SIGKILL)
	}

	timer := time.NewTimer(drainWaitMax)
	select {
	case <-drained:
	case <-timer.C:
		outR.Close() // a process that escaped the shim still holds the pipe
		<-drained
	}
	timer.Stop()

	var rep shimReport
	reportOK := len(raw) > 0 && json.Unmarshal(raw, &rep) == nil
	res := Result{Output: out.String()}
	switch {
	case reportOK && rep.StartErr != nil:
		res.Err = fmt.Errorf("start command %q: %w", name, rep.StartErr.err())
	case stopped:
		res.Err = fmt.Errorf("command %q: %w", name, &ErrKilled{
			Cause: context.Cause(ctx), SIGKILL: fallback || rep.SIGKILL, Deadline: rep.Deadline, Grace: grace, Err: waitErr,
		})
	case reportOK && rep.Deadline:
		res.Err = fmt.Errorf("command %q: %w", name, &ErrKilled{
			Cause: ErrDeadline, SIGKILL: rep.SIGKILL, Deadline: true, Grace: grace, Err: waitErr,
		})
	case !reportOK:
		res.Err = fmt.Errorf("command %q: the job shim ended without a report (%v)", name, waitErr)
	case waitErr != nil:
		res.Err = fmt.Errorf("command %q: %w", name, waitErr)
	}
	return res
}

// control is the replica's end of a shim's control pipe. One goroutine
// writes on it: the stop byte when asked, and the run's deadline each time
// it moves. Each write is bounded (controlWriteMax), so a stopped shim
// that no longer reads cannot block the run; a deadline whose write failed
// is sent again at the next refresh, a stop byte at once.
type control struct {
	w      *os.File
	stopCh chan struct{} // closed by stop
	once   sync.Once
	quit   chan struct{} // closed by close
	done   chan struct{} // closed when the goroutine has returned
}

// startControl starts the writer of w. deadline, when not nil, is read
// every DeadlineRefreshEvery; last is the deadline the shim already has.
func startControl(w *os.File, deadline func() time.Time, last time.Time) *control {
	c := &control{w: w, stopCh: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	go c.loop(deadline, last)
	return c
}

func (c *control) loop(deadline func() time.Time, last time.Time) {
	defer close(c.done)
	var refresh <-chan time.Time
	if deadline != nil {
		t := time.NewTicker(DeadlineRefreshEvery)
		defer t.Stop()
		refresh = t.C
	}
	stop := c.stopCh
	for {
		select {
		case <-c.quit:
			return
		case <-stop:
			if c.write([]byte{shimStop}) {
				stop = nil
			}
		case <-refresh:
			d := deadline()
			if d.IsZero() || d.Equal(last) {
				continue
			}
			var msg [9]byte
			msg[0] = shimDeadline
			binary.BigEndian.PutUint64(msg[1:], uint64(bootDeadline(d)))
			if c.write(msg[:]) {
				last = d
			}
		}
	}
}

// write writes b in one write(2) (at most 9 bytes: atomic on a pipe), or
// not at all if the pipe stays full for controlWriteMax.
func (c *control) write(b []byte) bool {
	c.w.SetWriteDeadline(time.Now().Add(controlWriteMax))
	_, err := c.w.Write(b)
	return err == nil
}

// stop asks the shim to stop the run. It does not block.
func (c *control) stop() { c.once.Do(func() { close(c.stopCh) }) }

// close ends the writer and closes the pipe.
func (c *control) close() {
	close(c.quit)
	<-c.done
	c.w.Close()
}

// bootNow reads CLOCK_BOOTTIME in nanoseconds: a clock every process of the
// host shares, which keeps counting while the host is suspended.
func bootNow() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		// Linux before 2.6.39: the monotonic clock (1), which stops
		// during a suspend.
		syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	}
	return ts.Nano()
}

// bootDeadline converts t to CLOCK_BOOTTIME nanoseconds; 0 for the zero
// time (no deadline). Both clocks are read at once, so a pause of this
// process does not make the value stale.
func bootDeadline(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(1, bootNow()+int64(time.Until(t)))
}

// shimEnviron is the environment of a shim that runs a command with
// environ: environ and the shim's marker. A binary built with -race sleeps
// 1 s at exit (GORACE atexit_sleep_ms), which would add a second to every
// run: the shim gets GORACE=atexit_sleep_ms=0 and removes it for the
// command, unless the job's env: sets GORACE itself.
func shimEnviron(environ []string) []string {
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GORACE=") {
			return append(environ, shimEnv+"="+shimEnvKeep)
		}
	}
	return append(environ, shimEnv+"=1", "GORACE=atexit_sleep_ms=0")
}

// shimEnvKeep is the marker's value when the shim's GORACE is the job's own.
const shimEnvKeep = "keep-gorace"

// ShimMain is the job shim: os.Args are [exe, shimArg, replica pid, grace
// in nanoseconds, deadline on CLOCK_BOOTTIME in nanoseconds (0: none),
// argv...], fd 3 the report pipe and fd 4 the control pipe.
// It returns the exit code (or dies by the signal) of the command.
func ShimMain() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "studioctl: "+shimArg+": "+format+"\n", args...)
		return 2
	}
	if len(os.Args) < 6 {
		return fail("is internal: a replica starts it to run one job command")
	}
	replica, err := strconv.Atoi(os.Args[2])
	if err != nil {
		return fail("bad replica pid %q", os.Args[2])
	}
	grace, err := strconv.ParseInt(os.Args[3], 10, 64)
	if err != nil || grace <= 0 {
		return fail("bad grace period %q", os.Args[3])
	}
	deadline, err := strconv.ParseInt(os.Args[4], 10, 64)
	if err != nil || deadline < 0 {
		return fail("bad deadline %q", os.Args[4])
	}
	var st syscall.Stat_t
	if syscall.Fstat(3, &st) != nil || syscall.Fstat(4, &st) != nil {
		return fail("no report and control pipes (fd 3 and 4)")
	}
	// The command must not inherit them: fd 3 must read end of file
	// when the shim exits.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	if os.Getenv(shimEnv) != shimEnvKeep {
		os.Unsetenv("GORACE")
	}
	os.Unsetenv(shimEnv)
	s := &shim{self: os.Getpid(), replica: replica, grace: time.Duration(grace), killWait: killWaitMax, deadline: deadline}
	return s.main(os.Args[5:], os.NewFile(3, "report"), os.NewFile(4, "control"))
}

// shim is the state of a job shim.
type shim struct {
	self, replica int
	grace         time.Duration
	job           int                 // the command's pid; 0 before it starts
	status        *syscall.WaitStatus // the command's, once reaped
	sigkill       bool
	killWait      time.Duration // killWaitMax; a test sets it
	sigs          chan os.Signal
	stop, gone    chan struct{}
	// deadline is the run's deadline on CLOCK_BOOTTIME, 0 for none;
	// deadlines brings the ones the replica sends (the latest only).
	deadline    int64
	deadlines   chan int64
	deadlineHit bool // the deadline passed while the command ran
}

// stopMode says why the shim ends the run.
type stopMode int

const (
	stopExited   stopMode = iota // the command exited: its leftovers get SIGTERM, grace, SIGKILL
	stopAsked                    // the replica asked: everything gets SIGTERM, grace, SIGKILL
	stopOrphans                  // the replica is gone: SIGKILL at once
	stopDeadline                 // the deadline passed: SIGKILL at once
)

func (s *shim) main(argv []string, report, control *os.File) int {
	s.sigs = make(chan os.Signal, 64)
	signal.Notify(s.sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	s.stop, s.gone = make(chan struct{}, 1), make(chan struct{})
	s.deadlines = make(chan int64, 1)
	go s.readControl(control)
	rep := shimReport{}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		rep.StartErr = &startError{Kind: "other", Msg: "job shim: become a child subreaper: " + errno.Error()}
		return s.finish(report, rep)
	}
	// The replica may have died before the parent death signal was set.
	if os.Getppid() != s.replica {
		return 1
	}
	if s.pastDeadline() {
		rep.StartErr = &startError{Kind: "deadline"}
		return s.finish(report, rep)
	}
	if err := s.start(argv); err != nil {
		rep.StartErr = newStartError(err)
		return s.finish(report, rep)
	}

	mode := stopExited
	reapTick := time.NewTicker(shimReapEvery)
	// The deadline is checked on CLOCK_BOOTTIME at every turn: the timer
	// runs on the monotonic clock, which stops while the host is
	// suspended, and the reap tick catches up then.
	deadlineTimer := time.NewTimer(s.untilDeadline())
wait:
	for s.reap(); s.status == nil; s.reap() {
		if s.pastDeadline() {
			mode, s.deadlineHit = stopDeadline, true
			break wait
		}
		select {
		case d := <-s.deadlines:
			s.deadline = d
			deadlineTimer.Reset(s.untilDeadline())
		case <-deadlineTimer.C:
			deadlineTimer.Reset(s.untilDeadline())
		case sig := <-s.sigs:
			if sig == syscall.SIGCHLD {
				continue
			}
			mode = stopAsked
			if s.replicaGone() {
				mode = stopOrphans
			}
			break wait
		case <-s.stop:
			mode = stopAsked
			break wait
		case <-s.gone:
			mode = stopOrphans
			break wait
		case <-reapTick.C:
		}
	}
	reapTick.Stop()
	deadlineTimer.Stop()
	s.reap()
	left := s.descendants()
	if mode != stopOrphans && mode != stopDeadline {
		left = s.terminate(left)
	}
	if len(left) > 0 || s.status == nil {
		rep.Left = s.kill()
	}
	rep.SIGKILL = s.sigkill
	rep.Deadline = s.deadlineHit
	return s.finish(report, rep)
}

// readControl reads the control pipe until end of file: stop bytes and
// deadline messages.
func (s *shim) readControl(control *os.File) {
	defer close(s.gone) // the replica closed it, or died
	r := bufio.NewReader(control)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return
		}
		switch b {
		case shimStop:
			select {
			case s.stop <- struct{}{}:
			default:
			}
		case shimDeadline:
			var msg [8]byte
			if _, err := io.ReadFull(r, msg[:]); err != nil {
				return
			}
			select { // only the latest counts; this is the only sender
			case <-s.deadlines:
			default:
			}
			s.deadlines <- int64(binary.BigEndian.Uint64(msg[:]))
		}
	}
}

// pastDeadline reports whether the run has a deadline and it has passed.
func (s *shim) pastDeadline() bool {
	return s.deadline > 0 && bootNow() >= s.deadline
}

// untilDeadline is how long until the deadline; a day when there is none
// (the timer is then only re-armed).
func (s *shim) untilDeadline() time.Duration {
	if s.deadline <= 0 {
		return 24 * time.Hour
	}
	return max(0, time.Duration(s.deadline-bootNow()))
}

// start starts the command, in the shim's process group, with the shim's
// stdin, stdout, stderr, working directory and environment.
func (s *shim) start(argv []string) error {
	path := argv[0]
	if filepath.Base(path) == path {
		lp, err := exec.LookPath(path)
		if err != nil {
			return err
		}
		path = lp
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		return err
	}
	s.job = p.Pid
	p.Release() // reaped by reap, with wait4(-1)
	return nil
}

// replicaGone reports whether the replica that started the shim is no
// longer its parent.
func (s *shim) replicaGone() bool {
	select {
	case <-s.gone:
		return true
	default:
	}
	return os.Getppid() != s.replica
}

// terminate sends SIGTERM (and SIGCONT, for stopped processes) to the
// descendants left, then waits until they are all gone, the grace period
// ends, the deadline passes or the replica goes away, and returns the
// descendants still there.
// Processes started after the SIGTERM (a trap's cleanup) are not signalled:
// they get until the end of the grace period.
func (s *shim) terminate(left []int) []int {
	if len(left) == 0 && s.status != nil {
		return nil
	}
	graceEnd := time.Now().Add(s.grace)
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGTERM)
		syscall.Kill(pid, syscall.SIGCONT)
	}
	tick := time.NewTicker(descendantPollEvery)
	defer tick.Stop()
	for {
		s.reap()
		left = s.descendants()
		if s.status != nil && len(left) == 0 {
			return nil
		}
		if s.pastDeadline() {
			s.deadlineHit = s.deadlineHit || s.status == nil
			return left
		}
		if !time.Now().Before(graceEnd) || s.replicaGone() {
			return left
		}
		select {
		case <-tick.C:
		case <-s.sigs:
		case <-s.gone:
		case s.deadline = <-s.deadlines:
		}
	}
}

// kill SIGKILLs every descendant, again and again (the subreaper keeps
// receiving orphans, and a process may fork before its SIGKILL lands),
// until none is left or killWait has passed. It returns what is left.
//
// The command gets its SIGKILL first, before any walk of /proc, and every
// process a walk finds gets one before the deadline is looked at: on a
// loaded host (hundreds of runs, load 130 on 2 cores) one walk of /proc
// by a starved shim took longer than killWait, and the shim used to give
// up after that walk without a single SIGKILL, leaving its command to
// PID 1 (issue 21: a duty command still running 51 s after kill -9 of its
// replica).
func (s *shim) kill() []int {
	deadline := time.Now().Add(s.killWait)
	if s.job != 0 && s.status == nil { // not reaped: the pid is still the command's
		syscall.Kill(s.job, syscall.SIGKILL)
		s.sigkill = true
	}
	for {
		s.reap()
		left := s.descendants()
		if len(left) == 0 && (s.status != nil || s.job == 0) {
			return nil
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
			s.sigkill = true
		}
		if !time.Now().Before(deadline) {
			return left
		}
		time.Sleep(descendantPollEvery) // polling a kill in progress, no synchronisation to wait for
	}
}

// reap collects every exited child (the command, and orphans reparented to
// the shim), keeping the command's status.
func (s *shim) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if pid == s.job && s.status == nil {
			s.status = &ws
		}
	}
}

// descendants lists the shim's descendants that are not zombies, from /proc.
func (s *shim) descendants() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	live := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, ppid, ok := procParent(pid)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		live[pid] = state != 'Z' && state != 'X'
	}
	var out []int
	queue := []int{s.self}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if live[c] {
				out = append(out, c)
			}
			queue = append(queue, c)
		}
	}
	return out
}

// procParent reads the state and parent of pid from /proc/<pid>/stat.
func procParent(pid int) (state byte, ppid int, ok bool) {
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
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}

// finish writes the report and ends the shim the way the command ended.
func (s *shim) finish(report *os.File, rep shimReport) int {
	json.NewEncoder(report).Encode(rep) // the replica may be gone: nothing to do then
	report.Close()
	switch {
	case rep.StartErr != nil:
		return 127
	case s.status == nil:
		return 1 // the command never exited (uninterruptible sleep)
	case s.status.Signaled():
		return dieBy(s.status.Signal())
	}
	return s.status.ExitStatus()
}

// dieBy ends the shim by sig, so the replica sees the status of the command
// ("signal: terminated"). Go's runtime handles most signals itself, so the
// default action is restored with the raw system call first; no core file
// is written for the shim.
func dieBy(sig syscall.Signal) int {
	runtime.LockOSThread()
	signal.Reset()
	syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	var act [4]uint64 // struct sigaction, all zero: SIG_DFL, no flags, empty mask
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	set := uint64(1) << (uint(sig) - 1)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 1 /* SIG_UNBLOCK */, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0)
	syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
	return 128 + int(sig) // a signal whose default is not to terminate
}
