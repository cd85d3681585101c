package demo

import (
	"fmt"
	"strings"
	"time"
)

// The demo's jobs (docs/demo.md). The installation jobs record their own
// executions in demo_execution: a row with the start and the replica
// (application_name, which the demo sets to the replica id), committed at
// once so the row is visible while the job runs; then the work (a sleep);
// then the end, on the same session (lastval()).
const (
	// MainJob is the installation job the report and the faults are about.
	MainJob = "ledger"
	// mainEvery and mainRun: every 2s, each execution 1 s.
	mainEvery = 2 * time.Second
	mainRun   = 1 * time.Second
	// secondJob is a second installation job, counted for overlaps too.
	secondJob   = "digest"
	secondEvery = 5 * time.Second
	secondRun   = 500 * time.Millisecond

	instanceJob = "cache-refresh"
	failingJob  = "broken-import"
	timeoutJob  = "slow-export"
	clusterJob  = "cluster-sync"
)

// installationJobs are the jobs whose executions must never overlap.
var installationJobs = []string{MainJob, secondJob}

// demoClusters are the clusters of the clusters: owned job.
var demoClusters = []string{"c1", "c2", "c3", "c4", "c5", "c6"}

// schemaSQL is the demo's own table, in the demo database.
const schemaSQL = `
CREATE TABLE demo_execution (
    id         bigserial   PRIMARY KEY,
    job_id     text        NOT NULL,
    replica    text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NULL
);
CREATE INDEX demo_execution_job ON demo_execution (job_id, started_at);`

// recordSQL is the text of an installation job that records its execution
// and works for run.
func recordSQL(job string, run time.Duration) string {
	return fmt.Sprintf("INSERT INTO demo_execution (job_id, replica, started_at) VALUES ('%s', current_setting('application_name'), clock_timestamp()); "+
		"COMMIT; SELECT pg_sleep(%.3f); UPDATE demo_execution SET ended_at = clock_timestamp() WHERE id = lastval()", job, run.Seconds())
}

// grantSQL gives studio_sql_job what the jobs need of demo_execution, when
// they run as a login of it (Options.SQLJobUser).
const grantSQL = `
GRANT SELECT, INSERT, UPDATE ON demo_execution TO studio_sql_job;
GRANT USAGE, SELECT ON SEQUENCE demo_execution_id_seq TO studio_sql_job;`

// drainDelay is drain.delay of the demo's replicas: long enough to see the
// state draining in replicas list, short enough not to wait.
const drainDelay = "1s"

// configYAML is the configuration file of the demo's replicas. The
// database is not in it: each replica gets STUDIO_DATABASE_URL (without
// the password), with a login for the sql: jobs STUDIO_DATABASE_SQL_URL
// (also without), and PGPASSFILE. asReplica: there is no such login, and
// the jobs run as the replica's role.
func configYAML(asReplica bool) string {
	var b strings.Builder
	b.WriteString(`# Written by studioctl demo; removed when the demo ends.
database:
  migrate: "off"   # the demo applied the schema itself
`)
	if asReplica {
		b.WriteString(`  # No login of studio_sql_job here: the demo's own jobs, on its
  # throwaway database, run as the replica's role (it says so with a WARN
  # at start; docs/jobs-sql.md).
  sql_as_replica: true
`)
	}
	fmt.Fprintf(&b, `drain:
  delay: %s
clusters: [%s]
jobs:
  # Installation jobs: one replica per tick, through the lock table. Each
  # records its own executions in demo_execution.
  - id: %s
    scope: installation
    every: %s
    run:
      sql: %q
  - id: %s
    scope: installation
    every: %s
    run:
      sql: %q
  # An instance job: every replica runs it.
  - id: %s
    scope: instance
    every: 3s
    run:
      sql: "INSERT INTO demo_execution (job_id, replica, started_at, ended_at) VALUES ('%s', current_setting('application_name'), clock_timestamp(), clock_timestamp())"
  # Always fails.
  - id: %s
    scope: instance
    every: 7s
    run:
      sql: "DO $$ BEGIN RAISE EXCEPTION 'import: upstream refused the connection'; END $$"
  # Always times out: cancelled on the server after 1 s.
  - id: %s
    scope: installation
    every: 8s
    timeout: 1s
    run:
      sql: "SELECT pg_sleep(30)"
  # One duty per cluster, on the replica that owns the cluster's lease.
  - id: %s
    scope: instance
    clusters: owned
    every: 3s
    run:
      sql: "SELECT 1"
`, drainDelay, strings.Join(demoClusters, ", "),
		MainJob, mainEvery, recordSQL(MainJob, mainRun),
		secondJob, secondEvery, recordSQL(secondJob, secondRun),
		instanceJob, instanceJob,
		failingJob, timeoutJob, clusterJob)
	return b.String()
}
