package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
)

// Deadlines of the helpers. They are generous: the binary is built with
// -race and several replicas run at once.
const (
	readyTimeout = 60 * time.Second // start to "replica ready"
	exitTimeout  = 30 * time.Second // a process that should end
	pollEvery    = 100 * time.Millisecond
	// testAppName marks the test's own sessions in pg_stat_activity, so
	// that they are never mistaken for a replica's (application_name
	// "studioctl").
	testAppName = "studioctl-e2e"
	// drainDelay keeps graceful stops short.
	drainDelay = "100ms"
)

// syncBuffer is a bytes.Buffer safe for a writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLine is one JSON log record of a replica.
type logLine map[string]any

func (l logLine) msg() string { s, _ := l["msg"].(string); return s }

// proc is one `studioctl run` process.
type proc struct {
	id     string
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{} // closed once Wait has returned
	state  *os.ProcessState
}

// childEnv is the environment of a studioctl child: the test's, without
// any STUDIO_* or XDG_* setting that could leak in, plus a private config
// and data home so no config file of the machine is read.
func childEnv(dir string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "STUDIO_") || strings.HasPrefix(kv, "XDG_") || strings.HasPrefix(kv, "NO_COLOR=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"), "XDG_DATA_HOME="+filepath.Join(dir, ".local", "share"))
	return append(env, extra...)
}

// startReplica starts `studioctl run` with replica id against dbURL. The
// process is killed (after a SIGCONT, in case it is stopped) when the test
// ends, and its log is shown if the test failed.
func startReplica(t *testing.T, dbURL, id string) *proc {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(studioctlBin, "run")
	cmd.Dir = dir
	cmd.Env = childEnv(dir,
		"STUDIO_DATABASE_URL="+dbURL,
		"STUDIO_REPLICA_ID="+id,
		"STUDIO_REPLICA_LISTEN=127.0.0.1:0",
		"STUDIO_DRAIN_DELAY="+drainDelay,
	)
	p := &proc{id: id, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout = io.Discard
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start replica %s: %v", id, err)
	}
	go func() {
		cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.hasExited() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("stderr of replica %s (pid %d):\n%s", id, cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to replica %s: %v", sig, p.id, err)
	}
}

// logs parses the JSON lines of stderr; other lines are skipped.
func (p *proc) logs() []logLine {
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// logged reports whether a log message contains text.
func (p *proc) logged(text string) bool {
	for _, l := range p.logs() {
		if strings.Contains(l.msg(), text) {
			return true
		}
	}
	return false
}

// waitReady waits for the "replica ready" log line and returns its HTTP
// address.
func (p *proc) waitReady(t *testing.T) string {
	t.Helper()
	var addr string
	eventually(t, readyTimeout, "replica "+p.id+" ready", func() error {
		for _, l := range p.logs() {
			if l.msg() == "replica ready" {
				if s, _ := l["listen"].(string); s != "" {
					addr = s
					return nil
				}
			}
		}
		if p.hasExited() {
			t.Fatalf("replica %s exited before it was ready (%v):\n%s", p.id, p.state, p.stderr.String())
		}
		return errors.New("no \"replica ready\" line yet")
	})
	return addr
}

// waitExit waits for the process to end and returns its exit code (-1 when
// a signal killed it).
func (p *proc) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-time.After(d):
		t.Fatalf("replica %s still running after %s", p.id, d)
		return 0
	}
}

// eventually polls cond until it returns nil; past d it fails the test
// with the last error. It returns how long it took.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
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
		time.Sleep(pollEvery)
	}
}

// withAppName sets application_name on a URL.
func withAppName(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// testPool opens the test's own pool on dbURL, marked with testAppName.
func testPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, withAppName(t, dbURL, testAppName))
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// row is the part of a studio_replica row the tests judge, with the
// database's now() of the same read.
type row struct {
	Incarnation string
	PID         int
	State       string
	HeartbeatAt time.Time
	Now         time.Time
}

func readRow(ctx context.Context, pool *pgxpool.Pool, id string) (row, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var r row
	err := pool.QueryRow(ctx, `SELECT incarnation::text, pid, state, heartbeat_at, now() FROM studio_replica WHERE id = $1`, id).
		Scan(&r.Incarnation, &r.PID, &r.State, &r.HeartbeatAt, &r.Now)
	if err != nil {
		return row{}, fmt.Errorf("read studio_replica %q: %w", id, err)
	}
	return r, nil
}

// dbNow is the database's clock.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatalf("read now(): %v", err)
	}
	return now
}

// waitHeartbeatAfter waits until the replica's heartbeat_at is later than
// after (database time) and returns the row.
func waitHeartbeatAfter(t *testing.T, pool *pgxpool.Pool, id string, after time.Time, d time.Duration) row {
	t.Helper()
	var r row
	eventually(t, d, fmt.Sprintf("a heartbeat of %s after %s", id, after.Format(time.RFC3339Nano)), func() error {
		var err error
		r, err = readRow(context.Background(), pool, id)
		if err != nil {
			return err
		}
		if !r.HeartbeatAt.After(after) {
			return fmt.Errorf("heartbeat_at %s", r.HeartbeatAt.Format(time.RFC3339Nano))
		}
		return nil
	})
	return r
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// get fetches http://addr/path and returns the status and body.
func get(addr, path string) (int, string, error) {
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// waitReadyz waits until /readyz answers 200 and returns how long it took.
func waitReadyz(t *testing.T, addr string, d time.Duration) time.Duration {
	t.Helper()
	return eventually(t, d, "/readyz 200 on "+addr, func() error {
		code, body, err := get(addr, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})
}

// metric reads one sample without labels from /metrics.
func metric(addr, name string) (float64, error) {
	code, body, err := get(addr, "/metrics")
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

// studioctl runs the binary with args against dbURL and returns stdout,
// stderr and the exit code.
func studioctl(t *testing.T, dbURL string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, studioctlBin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv(dir, "STUDIO_DATABASE_URL="+dbURL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("studioctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}
