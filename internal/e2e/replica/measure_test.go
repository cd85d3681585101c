package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Measurements are not part of the required suite: they take minutes and
// report numbers rather than pass or fail. STUDIO_MEASURE=1 runs them.
const (
	envMeasure = "STUDIO_MEASURE"
	// idleWindow is how long the idle replica is watched.
	idleWindow = 60 * time.Second
	// idleTargetPerMinute is the statement budget of one idle replica.
	idleTargetPerMinute = 30
	// measuredPoolHold is M2's pool exhaustion.
	measuredPoolHold = 60 * time.Second
	// maxQueryChars shortens the statements of M1's breakdown.
	maxQueryChars = 110
)

func measuring(t *testing.T) {
	t.Helper()
	if os.Getenv(envMeasure) != "1" {
		t.Skipf("a measurement, not a test: set %s=1 to run it", envMeasure)
	}
}

// TestMeasureStatementsOfAnIdleReplica (M1) counts, with
// pg_stat_statements, the statements one idle replica sends in a minute.
func TestMeasureStatementsOfAnIdleReplica(t *testing.T) {
	measuring(t)
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), 3*idleWindow)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatalf("pg_stat_statements (the harness preloads it): %v", err)
	}
	r := startReplica(t, dbURL, "idle")
	r.WaitReady(t)
	if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(idleWindow) // the measurement window itself, not synchronisation
	elapsed := time.Since(start)
	if r.Exited() {
		t.Fatalf("replica exited: %v", r.State())
	}
	// The test's own statements all name pg_stat_statements and are left out.
	rows, err := pool.Query(ctx, `
SELECT calls, regexp_replace(query, '\s+', ' ', 'g')
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '%pg_stat_statements%'
ORDER BY calls DESC, query`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var total int64
	var lines []string
	for rows.Next() {
		var calls int64
		var query string
		if err := rows.Scan(&calls, &query); err != nil {
			t.Fatal(err)
		}
		total += calls
		if len(query) > maxQueryChars {
			query = query[:maxQueryChars] + "…"
		}
		lines = append(lines, fmt.Sprintf("%7d %7.1f  %s", calls, perMinute(calls, elapsed), query))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	verdict := "within"
	if perMinute(total, elapsed) > idleTargetPerMinute {
		verdict = "OVER"
	}
	t.Logf("M1: one idle replica sent %d statements in %s = %.1f per minute (%s the target of %d per minute)\n  calls per_min  query\n%s",
		total, elapsed.Round(time.Millisecond), perMinute(total, elapsed), verdict, idleTargetPerMinute, strings.Join(lines, "\n"))
}

// TestMeasureHeartbeatGapWhilePoolExhausted (M2) is the pool-exhaustion
// fault held for a minute.
func TestMeasureHeartbeatGapWhilePoolExhausted(t *testing.T) {
	measuring(t)
	res := exhaustPool(t, measuredPoolHold)
	t.Logf("M2: pool exhausted for %s: %d heartbeats, longest gap %s from heartbeat_at, %s from the replica's own clock (limit %s)",
		measuredPoolHold, res.beats, res.maxGap.Round(time.Millisecond), res.registryMaxGap.Round(time.Millisecond), heartbeatGapLimit)
	if res.maxGap > heartbeatGapLimit {
		t.Errorf("heartbeat gap %s, want at most %s", res.maxGap, heartbeatGapLimit)
	}
}

func perMinute(n int64, d time.Duration) float64 {
	return float64(n) * float64(time.Minute) / float64(d)
}
