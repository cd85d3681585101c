package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// The connections of one replica (docs/connections.md), idle and busy,
// counted in pg_stat_activity. A measurement, opt-in:
//
//	STUDIO_BENCH_CONNS=1 go test -count=1 -v -run TestMeasureConnections ./internal/e2e/replica
func TestMeasureConnections(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_CONNS") != "1" {
		t.Skip("a measurement: set STUDIO_BENCH_CONNS=1")
	}
	idle := "# the jobs' own trusted text, on a test database: the replica's role (issue 21, item 3)\ndatabase:\n  sql_as_replica: true\nclusters: [c1, c2, c3]\njobs:\n  - id: hourly\n    scope: installation\n    every: 1h\n    run:\n      sql: SELECT 1\n"
	var busy strings.Builder
	busy.WriteString("# the jobs' own trusted text, on a test database: the replica's role (issue 21, item 3)\ndatabase:\n  sql_as_replica: true\nclusters: [c1, c2, c3, c4, c5, c6]\njobs:\n")
	for i := range 20 {
		fmt.Fprintf(&busy, "  - id: sql-%02d\n    scope: instance\n    every: 1s\n    run:\n      sql: SELECT pg_sleep(0.5)\n", i)
	}
	for i := range 5 {
		fmt.Fprintf(&busy, "  - id: cmd-%02d\n    scope: installation\n    every: 1s\n    run:\n      command: [\"sleep\", \"0.5\"]\n", i)
	}
	busy.WriteString("  - id: duty\n    scope: instance\n    clusters: owned\n    every: 1s\n    run:\n      sql: SELECT pg_sleep(0.2)\n")
	for _, c := range []struct {
		name, conf string
		maxConns   string
	}{
		{"idle", idle, ""},
		{"busy: 20 sql jobs and 6 duties every second", busy.String(), ""},
		{"busy, database.max_conns 16", busy.String(), "16"},
	} {
		dbURL := pgtest.NewDB(t)
		path := filepath.Join(t.TempDir(), "studio.yaml")
		if err := os.WriteFile(path, []byte(c.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		var env []string
		if c.maxConns != "" {
			env = append(env, "STUDIO_DATABASE_MAX_CONNS="+c.maxConns)
		}
		p := studioctlBin.Start(t, replicaproc.Options{ID: "conns", DatabaseURL: dbURL, Args: []string{"--config", path}, Env: env})
		p.WaitReady(t)
		pool := testPool(t, dbURL)
		time.Sleep(5 * time.Second) // past the start-up work, a measurement's warm-up
		most, sum, n := 0, 0, 0
		var byKind map[string]int
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			rows, err := pool.Query(t.Context(), `SELECT coalesce(nullif(query, ''), '(none)'), coalesce(state, '') FROM pg_stat_activity
WHERE datname = current_database() AND application_name <> $1 AND backend_type = 'client backend'`, testAppName)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			total := 0
			for rows.Next() {
				var q, state string
				if err := rows.Scan(&q, &state); err != nil {
					t.Fatal(err)
				}
				total++
				switch {
				case strings.HasPrefix(q, "LISTEN") || strings.Contains(q, "ping") || q == ";":
					kinds["bus"]++
				case strings.Contains(q, "pg_sleep"):
					kinds["sql task"]++
				case strings.Contains(q, "cluster_lease"):
					kinds["lease loop"]++
				default:
					kinds["pool and heartbeat"]++
				}
			}
			rows.Close()
			if total > most {
				most, byKind = total, kinds
			}
			sum, n = sum+total, n+1
			time.Sleep(200 * time.Millisecond) // sampling, not synchronisation
		}
		t.Logf("%s: connections of one replica: mean %.1f, max %d (at the max: %v)", c.name, float64(sum)/float64(n), most, byKind)
		p.Signal(t, syscall.SIGTERM)
		p.WaitExit(t, replicaproc.ExitTimeout)
	}
}
