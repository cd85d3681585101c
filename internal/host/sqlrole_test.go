package host_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Issue 21, item 3, end to end: the hostile sql: job, run by a
// replica with database.sql_url on a login of studio_sql_job (docs/roles.sql),
// can neither call the event writer nor hold its lock: each run fails at
// once with permission denied, and no forged event is written; nor can a
// job insert a run row of its own. A job of the
// same replica that does what such a role is for (a table granted to it)
// runs, as that login.
func TestSQLJobsRunAsTheRoleOfSQLURL(t *testing.T) {
	owner := pgtest.NewDB(t)
	ctx := context.Background()
	check, err := db.Open(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	roles, err := os.ReadFile("../../docs/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := check.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.Conn().PgConn().Exec(ctx, string(roles)+`;
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sqlrole_jobs') THEN
        CREATE ROLE sqlrole_jobs LOGIN PASSWORD 'jobs-S3cret' IN ROLE studio_sql_job;
    END IF;
END $$;
CREATE TABLE job_probe (who text NOT NULL);
GRANT INSERT ON job_probe TO studio_sql_job;`).Close()
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(owner)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("sqlrole_jobs", "jobs-S3cret")

	list, err := jobs.Parse("test.yaml", []byte(`
jobs:
  - id: hostile
    scope: installation
    every: 1s
    timeout: 50s
    run:
      sql: "select studio_event_runs(array['{\"job_id\":\"forged-payments\",\"outcome\":\"succeeded\",\"seq\":424242,\"replica_id\":\"r1\"}'::jsonb]); select pg_sleep(45)"
  - id: probe
    scope: installation
    every: 1s
    run:
      sql: "INSERT INTO job_probe SELECT current_user"
  - id: forger
    scope: instance
    every: 1s
    run:
      sql: "INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('forged-payments', 'r1', now(), 'succeeded')"
`))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	h, err := host.New(host.Options{
		ConnString: owner, SQLConnString: u.String(), ID: "sql-role", Version: "test", DrainDelay: -1, NoHousekeeping: true,
		OnReady: func(addr string) { ready <- addr }, Jobs: list,
	})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, ctx, sigs) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("host not ready after 30s")
	}
	defer func() {
		sigs <- os.Interrupt
		<-done
	}()

	var hostileErr, forgerErr string
	waitUntil(t, 30*time.Second, "a finished run of each job", func() bool {
		var probes int
		check.QueryRow(ctx, `SELECT count(*) FROM job_probe`).Scan(&probes)
		check.QueryRow(ctx, `SELECT coalesce(max(error), '') FROM studio_job_run WHERE job_id = 'hostile' AND outcome <> 'running'`).Scan(&hostileErr)
		check.QueryRow(ctx, `SELECT coalesce(max(error), '') FROM studio_job_run WHERE job_id = 'forger' AND outcome <> 'running'`).Scan(&forgerErr)
		return probes > 0 && hostileErr != "" && forgerErr != ""
	})
	if !strings.Contains(forgerErr, "permission denied for table studio_job_run") {
		t.Errorf("the forger's run failed with %q, want permission denied", forgerErr)
	}
	var forgedRuns int
	if err := check.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE job_id = 'forged-payments'`).Scan(&forgedRuns); err != nil || forgedRuns != 0 {
		t.Errorf("forged run rows: %d (%v), want none", forgedRuns, err)
	}
	if !strings.Contains(hostileErr, "permission denied for function studio_event_runs") {
		t.Errorf("the hostile job's run failed with %q, want permission denied", hostileErr)
	}
	if strings.Contains(hostileErr, "jobs-S3cret") {
		t.Errorf("the run's error shows the sql_url password: %q", hostileErr)
	}
	var who string
	if err := check.QueryRow(ctx, `SELECT min(who) FROM job_probe`).Scan(&who); err != nil || who != "sqlrole_jobs" {
		t.Errorf("the probe job ran as %q (%v), want sqlrole_jobs", who, err)
	}
	var forged int
	if err := check.QueryRow(ctx, `SELECT count(*) FROM studio_event WHERE data->>'job_id' = 'forged-payments'`).Scan(&forged); err != nil || forged != 0 {
		t.Fatalf("forged events: %d (%v), want none", forged, err)
	}
}
