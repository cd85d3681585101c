package e2efailover

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// readyz returns /readyz's status and body (0 and the error when it does
// not answer).
func readyz(addr string) (int, string) {
	code, body, err := replicaproc.Get(addr, "/readyz")
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
