package e2efailover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/replicaproc"
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

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

// readyz returns /readyz's status and body (0 and the error when it does
// not answer).
func readyz(addr string) (int, string) {
	code, body, err := get(addr, "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

// waitReadyz waits until /readyz answers 200 and returns how long it took.
func waitReadyz(t *testing.T, addr string, d time.Duration) time.Duration {
	t.Helper()
	return replicaproc.Eventually(t, d, "/readyz 200 on "+addr, func() error {
		if code, body := readyz(addr); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})
}

// waitUnready waits until /readyz answers something other than 200 and
// returns the body.
func waitUnready(t *testing.T, addr string, d time.Duration) string {
	t.Helper()
	var why string
	replicaproc.Eventually(t, d, "/readyz to fail on "+addr, func() error {
		code, body := readyz(addr)
		if code == http.StatusOK {
			return fmt.Errorf("/readyz 200 %s", body)
		}
		why = fmt.Sprintf("%d %s", code, body)
		return nil
	})
	return why
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
	ctx, cancel := context.WithTimeout(context.Background(), replicaproc.ExitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, studioctlBin.Path, args...)
	cmd.Dir = dir
	cmd.Env = studioctlBin.Env(dir, "STUDIO_DATABASE_URL="+dbURL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("studioctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// dbNow is the database's clock.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatalf("read clock_timestamp(): %v", err)
	}
	return now
}

// countLogged counts a replica's log lines whose message contains text.
func countLogged(p *replicaproc.Proc, text string) int {
	n := 0
	for _, l := range p.Logs() {
		if strings.Contains(l.Msg(), text) {
			n++
		}
	}
	return n
}
