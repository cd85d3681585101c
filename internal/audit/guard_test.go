package audit_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }

// rolesPool is a database migrated to the tree's latest, with docs/roles.sql
// applied as the owner applies it, and a gone replica's rows for an operator
// to change.
func rolesPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sql, err := os.ReadFile("../../docs/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := conn.Conn().PgConn().Exec(ctx, string(sql)).Close(); err != nil {
		t.Fatalf("docs/roles.sql: %v", err)
	}
	for _, stmt := range []string{
		`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES ('gone-1', gen_random_uuid(), 'h', 1, 'dev', 'ready', now() - interval '1 hour')`,
		`INSERT INTO studio_job_status (replica_id, job_id, scope) VALUES ('gone-1', 'retired', 'instance'), ('gone-1', 'retired@c1', 'instance')`,
		`INSERT INTO studio_job_setting (job_id, paused) VALUES ('payments', false)`,
		`INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation) VALUES ('c1', 'gone-1', now(), now(), 3)`,
		`INSERT INTO shedlock VALUES ('nightly', timezone('utc', now()) + interval '10 minutes', timezone('utc', now()), 'gone-1')`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return pool
}

// inRole runs stmts in one transaction under role and returns the first
// error, the commit's included (the checks run at commit).
func inRole(pool *pgxpool.Pool, role string, stmts ...string) error {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func auditRow(action, target string) string {
	return `INSERT INTO studio_audit (actor, action, target) VALUES ('mallory', '` + action + `', '` + target + `')`
}

// Issue 21: the operator role changed state without an audit row, though
// docs/roles.md promises one for each change: a paused job through
// studio_job_setting, a lock held until infinity through its UPDATE on
// lock_until, a forgotten job's status rows. Each write of the operator
// now needs the audit row of the command that makes it, written in the
// same transaction (migration 00009); the command's own path passes.
func TestOperatorWritesNeedTheirAuditRow(t *testing.T) {
	pool := rolesPool(t)
	refused := []struct {
		name  string
		stmts []string
	}{
		{"a pause without an audit row", []string{`UPDATE studio_job_setting SET paused = true WHERE job_id = 'payments'`}},
		{"a new setting without an audit row", []string{`INSERT INTO studio_job_setting (job_id, paused) VALUES ('billing', true)`}},
		{"a pause with another job's audit row", []string{auditRow("jobs.pause", "billing"), `UPDATE studio_job_setting SET paused = true WHERE job_id = 'payments'`}},
		{"a pause with a drain's audit row", []string{auditRow("replicas.drain", "payments"), `UPDATE studio_job_setting SET paused = true WHERE job_id = 'payments'`}},
		{"a setting removed without an audit row", []string{`DELETE FROM studio_job_setting WHERE job_id = 'payments'`}},
		{"status rows removed without an audit row", []string{`DELETE FROM studio_job_status WHERE job_id = 'retired'`}},
		{"a duty's status row removed without an audit row", []string{`DELETE FROM studio_job_status WHERE job_id = 'retired@c1'`}},
		{"a replica forgotten without an audit row", []string{`DELETE FROM studio_replica WHERE id = 'gone-1'`}},
		{"a lock held until infinity", []string{`UPDATE shedlock SET lock_until = 'infinity' WHERE name = 'nightly'`}},
		{"a lock held until infinity, with a release's audit row", []string{auditRow("locks.release", "nightly"), `UPDATE shedlock SET lock_until = 'infinity' WHERE name = 'nightly'`}},
		{"a lock released without an audit row", []string{`UPDATE shedlock SET lock_until = timezone('utc', now()) WHERE name = 'nightly'`}},
		{"a cluster added without an audit row", []string{`INSERT INTO cluster_lease (cluster) VALUES ('c2')`}},
		{"a cluster removed without an audit row", []string{`DELETE FROM cluster_lease WHERE cluster = 'c1'`}},
		{"a lease given to a replica, with a release's audit row", []string{auditRow("leases.release", "c1"),
			`UPDATE cluster_lease SET owner = 'mallory', generation = generation + 1 WHERE cluster = 'c1'`}},
		{"a lease released without an audit row", []string{`UPDATE cluster_lease SET owner = NULL, acquired_at = NULL, renewed_at = NULL, generation = generation + 1 WHERE cluster = 'c1'`}},
	}
	for _, tc := range refused {
		err := inRole(pool, "studio_operator", tc.stmts...)
		if err == nil || !strings.Contains(err.Error(), "needs its own studio_audit row") {
			t.Errorf("%s: %v, want it refused", tc.name, err)
		}
	}
	// An audit row of an earlier transaction does not do either.
	if err := inRole(pool, "studio_operator", auditRow("jobs.pause", "payments")); err != nil {
		t.Fatal(err)
	}
	if err := inRole(pool, "studio_operator", `UPDATE studio_job_setting SET paused = true WHERE job_id = 'payments'`); err == nil {
		t.Error("a pause with an audit row of an earlier transaction was written")
	}
	var paused bool
	var lockUntilFuture bool
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT paused FROM studio_job_setting WHERE job_id = 'payments'),
(SELECT lock_until > timezone('utc', now()) FROM shedlock WHERE name = 'nightly')`).Scan(&paused, &lockUntilFuture); err != nil {
		t.Fatal(err)
	}
	if paused || !lockUntilFuture {
		t.Fatalf("after the refused writes: paused %v, lock still held %v; want nothing changed", paused, lockUntilFuture)
	}

	// What the commands do passes: each change with its audit row.
	for _, tc := range []struct {
		name  string
		stmts []string
	}{
		{"jobs pause", []string{`UPDATE studio_job_setting SET paused = true WHERE job_id = 'payments'`, auditRow("jobs.pause", "payments")}},
		{"jobs set of a job without a setting", []string{`INSERT INTO studio_job_setting (job_id, schedule) VALUES ('billing', 'every 2s')`, auditRow("jobs.set", "billing")}},
		{"jobs forget", []string{`DELETE FROM studio_job_status WHERE job_id IN ('retired', 'retired@c1')`, auditRow("jobs.forget", "retired")}},
		{"locks release", []string{`UPDATE shedlock SET lock_until = timezone('utc', now()) WHERE name = 'nightly'`, auditRow("locks.release", "nightly")}},
		{"leases add", []string{`INSERT INTO cluster_lease (cluster) VALUES ('c2')`, auditRow("leases.add", "c2")}},
		{"leases release", []string{`UPDATE cluster_lease SET owner = NULL, acquired_at = NULL, renewed_at = NULL, generation = generation + 1 WHERE cluster = 'c1'`, auditRow("leases.release", "c1")}},
		{"leases remove", []string{`DELETE FROM cluster_lease WHERE cluster = 'c2'`, auditRow("leases.remove", "c2")}},
		{"replicas forget", []string{`DELETE FROM studio_replica WHERE id = 'gone-1'`, auditRow("replicas.forget", "gone-1")}},
	} {
		if err := inRole(pool, "studio_operator", tc.stmts...); err != nil {
			t.Errorf("%s with its audit row: %v", tc.name, err)
		}
	}
}

// The checks bind roles that may not register a replica. The replica role
// writes these tables in its own work (lease renewals, housekeeping's
// deletes, ShedLock's extend) without audit rows, and must go on doing so.
func TestReplicaWritesNeedNoAuditRow(t *testing.T) {
	pool := rolesPool(t)
	for _, stmt := range []string{
		`UPDATE shedlock SET lock_until = timezone('utc', now()) + interval '1 hour' WHERE name = 'nightly'`,
		`UPDATE cluster_lease SET owner = 'web-1', acquired_at = now(), renewed_at = now(), generation = generation + 1 WHERE cluster = 'c1'`,
		`INSERT INTO cluster_lease (cluster) VALUES ('c2')`,
		`DELETE FROM studio_job_status WHERE replica_id = 'gone-1'`,
		`DELETE FROM studio_replica WHERE id = 'gone-1'`,
	} {
		if err := inRole(pool, "studio_replica", stmt); err != nil {
			t.Errorf("%s: %v", stmt, err)
		}
	}
}

// studio_audit's actor is whatever the command was told (--actor); the row
// now also records the database role that wrote it, whatever the insert
// says (issue 21).
func TestTheAuditRowRecordsTheDatabaseRole(t *testing.T) {
	pool := rolesPool(t)
	ctx := context.Background()
	if err := inRole(pool, "studio_operator",
		`INSERT INTO studio_audit (actor, action, target, db_user) VALUES ('root', 'jobs.pause', 'payments', 'postgres')`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE studio_operator`); err != nil {
		t.Fatal(err)
	}
	if err := audit.Write(ctx, tx, audit.Entry{Actor: "alice", Action: "jobs.resume", Target: "payments"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT actor || ' as ' || db_user FROM studio_audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ", ") != "root as studio_operator, alice as studio_operator" {
		t.Fatalf("audit rows %q: want each to record the role that wrote it", got)
	}
}
