package e2epooler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/pgbouncer"
	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicaproc"
)

// poisonKey is the session advisory lock a job takes and never releases.
const poisonKey = 424242

// TestSQLJobSessionStateStaysOffThePooledSessions: docs/jobs-sql.md
// promises that whatever a sql job's text does to its session (SET, SET
// ROLE, session advisory locks, a COMMIT followed by more) ends with the
// run. Behind a transaction pooler, closing the job's client connection
// does not end the server session: PgBouncer hands it, with the job's
// settings and locks, to the next client, the replica's own pool first.
// With one server connection every client shares it, so a job that sets
// default_transaction_read_only made every later lock call, history write
// and lease renewal of the replica fail ("cannot execute INSERT in a
// read-only transaction"), and the setting outlived the replica on the
// pooler. The jobs' sessions must be their own.
func TestSQLJobSessionStateStaysOffThePooledSessions(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 1)
	pooled := b.Through(t, direct)
	pool := testPool(t, direct)
	conf := fmt.Sprintf(`jobs:
  - id: read-only
    scope: installation
    every: 1s
    run:
      sql: SET default_transaction_read_only = on
  - id: after-commit
    scope: installation
    every: 1s
    run:
      sql: COMMIT; SET search_path = nowhere; SELECT pg_advisory_lock(%d)
  - id: victim
    scope: installation
    every: 1s
    run:
      sql: SELECT 1
`, poisonKey)
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := studioctlBin.Start(t, replicaproc.Options{
		ID: "poisoned", DatabaseURL: withPassword(pooled), Args: []string{"--config", path}, FailOnRace: true,
		Env: []string{"STUDIO_DATABASE_LISTEN_URL=" + withPassword(direct)},
	})
	p.WaitReady(t)
	replicaproc.Eventually(t, runsWithin, "three succeeded runs of each job, recorded", func() error {
		n := count(t, pool, `SELECT count(*) FROM (SELECT job_id FROM studio_job_run
WHERE job_id IN ('read-only', 'after-commit', 'victim') AND outcome = 'succeeded' GROUP BY job_id HAVING count(*) >= 3) s`)
		if n < 3 {
			return fmt.Errorf("%d of 3 jobs have three succeeded runs recorded", n)
		}
		return nil
	})
	if f := failedRuns(t, pool); len(f) > 0 {
		t.Errorf("runs that did not succeed:\n%s", strings.Join(f, "\n"))
	}
	for _, bad := range []string{"read-only transaction", "does not exist"} {
		if strings.Contains(p.Stderr(), bad) {
			t.Errorf("the replica logged %q:\n%s", bad, lastLines(p.Stderr(), 10))
			break
		}
	}
	// Nothing a job did stayed on the pooler's server session.
	pooledPool := testPool(t, pooled)
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var ro, sp string
	if err := pooledPool.QueryRow(ctx, `SELECT current_setting('default_transaction_read_only'), current_setting('search_path')`).Scan(&ro, &sp); err != nil {
		t.Fatal(err)
	}
	if ro != "off" || sp == "nowhere" {
		t.Errorf("the pooler's server session has default_transaction_read_only=%s search_path=%s after the jobs", ro, sp)
	}
	replicaproc.Eventually(t, 15*time.Second, "no advisory lock left by a job", func() error {
		if n := count(t, pool, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, poisonKey); n != 0 {
			return fmt.Errorf("%d sessions still hold the job's advisory lock", n)
		}
		return nil
	})
}
