// Package replicaproc is for tests that drive real studioctl processes: it
// builds the race-enabled binary once, starts `studioctl run` replicas with
// a clean environment, captures their stderr, parses their JSON log (the
// "replica ready" line and its listen address), signals them, waits for
// them to end and kills what is left when the test ends. It also holds the
// polling helper such tests wait with.
//
// It holds no package-level state: a test package's TestMain builds a
// Binary and its tests reach it through a variable of their own.
package replicaproc

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Deadlines of the helpers. They are generous: the binary is built with
// -race and several replicas run at once.
const (
	ReadyTimeout = 60 * time.Second // start to "replica ready"
	ExitTimeout  = 30 * time.Second // a process that should end
	PollEvery    = 100 * time.Millisecond
	// DrainDelay is the STUDIO_DRAIN_DELAY of every replica: it keeps
	// graceful stops short.
	DrainDelay = "100ms"
)

// Binary is a built studioctl and how to set up the environment of its
// processes.
type Binary struct {
	// Path is the binary's path.
	Path string
	// DropEnv lists more prefixes of environment settings that must not
	// leak from the test into a child, on top of STUDIO_, XDG_ and
	// NO_COLOR=.
	DropEnv []string
	// PathDir, when set, goes first on the children's PATH.
	PathDir string
}

// EnvNoRace makes Build leave out -race: for measurements, where the race
// detector's cost would be measured too (docs/benchmarks.md).
const EnvNoRace = "STUDIO_BENCH_NORACE"

// Build runs `go build -race` on ./cmd/studioctl from the module root and
// returns the binary (without -race when EnvNoRace is set). The binary is
// kept in a folder of the system's temporary folder named by a hash of
// everything it is built from (BuildKey), so the end-to-end packages that
// `go test ./...` runs at the same time share one build and one link
// instead of each making its own: a race-enabled link of studioctl is
// seconds of CPU, and CI runs a dozen such packages on 2 cores. A file
// lock makes the packages that start together wait for the one that
// builds. dir is used when the shared folder cannot be.
func Build(dir string) (*Binary, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return nil, fmt.Errorf("go env GOMOD: not inside a module")
	}
	root := filepath.Dir(gomod)
	race := os.Getenv(EnvNoRace) == ""
	if key, err := BuildKey(root, race); err == nil {
		if bin, err := buildShared(root, key, race); err == nil {
			return bin, nil
		}
	}
	bin := filepath.Join(dir, "studioctl")
	if err := goBuild(root, bin, race); err != nil {
		return nil, err
	}
	return &Binary{Path: bin}, nil
}

// goBuild builds ./cmd/studioctl of the module at root into bin.
func goBuild(root, bin string, race bool) error {
	args := []string{"build", "-o", bin, "./cmd/studioctl"}
	if race {
		args = []string{"build", "-race", "-o", bin, "./cmd/studioctl"}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build studioctl: %w\n%s", err, out)
	}
	return nil
}

// buildShared returns the binary of key from the shared folder, building
// it there first under the folder's lock when it is missing.
func buildShared(root, key string, race bool) (*Binary, error) {
	base := filepath.Join(os.TempDir(), "studioctl-e2e-bin")
	keyDir := filepath.Join(base, key)
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(keyDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	bin := filepath.Join(keyDir, "studioctl")
	if _, err := os.Stat(bin); err == nil {
		return &Binary{Path: bin}, nil
	}
	tmp := bin + ".building"
	if err := goBuild(root, tmp, race); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return nil, err
	}
	pruneShared(base, key)
	return &Binary{Path: bin}, nil
}

// pruneShared removes the shared builds other than keep that were made
// more than a day ago (a test of that tree may still run for hours).
func pruneShared(base, keep string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == keep || !e.IsDir() {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// BuildKey is a hash of what the binary is built from: the Go version, the
// race flag, go.mod and go.sum, and every file under cmd/, internal/ and
// migrations/ but tests (*_test.go and testdata/), with their paths.
func BuildKey(root string, race bool) (string, error) {
	h := sha256.New()
	ver, err := exec.Command("go", "version").Output()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "%s race=%t GOFLAGS=%s\n", ver, race, os.Getenv("GOFLAGS"))
	add := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := add(filepath.Join(root, f)); err != nil {
			return "", err
		}
	}
	for _, d := range []string{"cmd", "internal", "migrations"} {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist) && path == filepath.Join(root, d):
				return filepath.SkipDir // a tree without that folder
			case err != nil:
				return err
			case e.IsDir() && e.Name() == "testdata":
				return filepath.SkipDir
			case e.IsDir() || strings.HasSuffix(e.Name(), "_test.go"):
				return nil
			}
			return add(path)
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// Env is the environment of a studioctl child: the test's, without any
// STUDIO_*, XDG_*, NO_COLOR or DropEnv setting that could leak in, plus a
// private config and data home below dir so no config file of the machine
// is read, PathDir first on PATH when set, and extra.
func (b *Binary) Env(dir string, extra ...string) []string {
	drop := append([]string{"STUDIO_", "XDG_", "NO_COLOR="}, b.DropEnv...)
	var env []string
	for _, kv := range os.Environ() {
		if hasAnyPrefix(kv, drop) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"), "XDG_DATA_HOME="+filepath.Join(dir, ".local", "share"))
	if b.PathDir != "" {
		env = append(env, "PATH="+b.PathDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return append(env, extra...)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Options says which replica Start runs.
type Options struct {
	ID          string   // STUDIO_REPLICA_ID
	DatabaseURL string   // STUDIO_DATABASE_URL
	Args        []string // more arguments after "run"
	Env         []string // more environment, after the STUDIO_* settings
	// FailOnRace fails the test when the replica's stderr holds a race
	// report (the binary is built with -race for this).
	FailOnRace bool
}

// Start starts `studioctl run` for o, listening on a free port of
// 127.0.0.1. The process is killed (after a SIGCONT, in case it is stopped)
// when the test ends, and its log is shown if the test failed.
func (b *Binary) Start(t testing.TB, o Options) *Proc {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(b.Path, append([]string{"run"}, o.Args...)...)
	cmd.Dir = dir
	cmd.Env = b.Env(dir, append([]string{
		"STUDIO_DATABASE_URL=" + o.DatabaseURL,
		"STUDIO_REPLICA_ID=" + o.ID,
		"STUDIO_REPLICA_LISTEN=127.0.0.1:0",
		"STUDIO_DRAIN_DELAY=" + DrainDelay,
	}, o.Env...)...)
	p := &Proc{id: o.ID, cmd: cmd, stderr: &SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout = io.Discard
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start replica %s: %v", o.ID, err)
	}
	go func() {
		cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			<-p.exited
		}
		if o.FailOnRace {
			if out := p.stderr.String(); strings.Contains(out, "WARNING: DATA RACE") {
				t.Errorf("replica %s reported a data race:\n%s", o.ID, raceReport(out))
			}
		}
		if t.Failed() {
			t.Logf("stderr of replica %s (pid %d):\n%s", o.ID, cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// raceReport cuts the first race report out of a replica's stderr.
func raceReport(out string) string {
	i := strings.Index(out, "WARNING: DATA RACE")
	if i < 0 {
		return ""
	}
	out = out[i:]
	if j := strings.Index(out, "\n=================="); j >= 0 {
		out = out[:j]
	}
	return out
}

// SyncBuffer is a bytes.Buffer safe for a writer and concurrent readers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// LogLine is one JSON log record of a replica.
type LogLine map[string]any

// Msg is the record's message.
func (l LogLine) Msg() string { s, _ := l["msg"].(string); return s }

// Proc is one `studioctl run` process.
type Proc struct {
	id     string
	cmd    *exec.Cmd
	stderr *SyncBuffer
	exited chan struct{} // closed once Wait has returned
	state  *os.ProcessState
}

// ID is the replica id the process was started with.
func (p *Proc) ID() string { return p.id }

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Stderr is what the process wrote to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// State is the state of the ended process, nil while it runs.
func (p *Proc) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.state
}

// Signal sends sig to the process and fails the test if it cannot.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to replica %s: %v", sig, p.id, err)
	}
}

// SignalErr sends sig to the process and returns the error: for callers
// outside the test's goroutine, which must not fail the test themselves.
func (p *Proc) SignalErr(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to replica %s: %w", sig, p.id, err)
	}
	return nil
}

// Kill sends SIGKILL (after a SIGCONT, in case the process is stopped) and
// returns the error, like SignalErr.
func (p *Proc) Kill() error {
	p.cmd.Process.Signal(syscall.SIGCONT)
	return p.SignalErr(syscall.SIGKILL)
}

// Logs parses the JSON lines of stderr; other lines are skipped.
func (p *Proc) Logs() []LogLine {
	var out []LogLine
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l LogLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// Logged reports whether a log message contains text.
func (p *Proc) Logged(text string) bool {
	for _, l := range p.Logs() {
		if strings.Contains(l.Msg(), text) {
			return true
		}
	}
	return false
}

// WaitReady waits for the {"msg":"replica ready","listen":...} log line
// and returns its HTTP address.
func (p *Proc) WaitReady(t testing.TB) string {
	t.Helper()
	var addr string
	Eventually(t, ReadyTimeout, "replica "+p.id+" ready", func() error {
		for _, l := range p.Logs() {
			if s, _ := l["listen"].(string); l.Msg() == "replica ready" && s != "" {
				addr = s
				return nil
			}
		}
		if p.Exited() {
			t.Fatalf("replica %s exited before it was ready (%v):\n%s", p.id, p.state, p.stderr.String())
		}
		return errors.New(`no "replica ready" line yet`)
	})
	return addr
}

// WaitExit waits for the process to end and returns its exit code (-1 when
// a signal killed it).
func (p *Proc) WaitExit(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-time.After(d):
		t.Fatalf("replica %s still running after %s", p.id, d)
		return 0
	}
}

// Eventually polls cond every PollEvery until it returns nil; past d it
// fails the test with the last error. It returns how long it took.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
		}
		time.Sleep(PollEvery)
	}
}
