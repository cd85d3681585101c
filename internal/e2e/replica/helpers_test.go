package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// testAppName marks the test's own sessions in pg_stat_activity, so that
// they are never mistaken for a replica's (application_name "studioctl").
const testAppName = "studioctl-e2e"

// startReplica starts `studioctl run` with replica id against dbURL; see
// replicaproc.Binary.Start.
func startReplica(t *testing.T, dbURL, id string) *replicaproc.Proc {
	t.Helper()
	return studioctlBin.Start(t, replicaproc.Options{ID: id, DatabaseURL: dbURL})
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
	replicaproc.Eventually(t, d, fmt.Sprintf("a heartbeat of %s after %s", id, after.Format(time.RFC3339Nano)), func() error {
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

// waitReadyz waits until /readyz answers 200 and returns how long it took.
func waitReadyz(t *testing.T, addr string, d time.Duration) time.Duration {
	t.Helper()
	return replicaproc.Eventually(t, d, "/readyz 200 on "+addr, func() error {
		code, body, err := replicaproc.Get(addr, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})
}
