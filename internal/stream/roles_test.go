package stream

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// applyRoles runs docs/roles.sql, as the owner does after a migration.
func applyRoles(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	sql, err := os.ReadFile("../../docs/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := conn.Conn().PgConn().Exec(context.Background(), string(sql)).Close(); err != nil {
		t.Fatalf("docs/roles.sql: %v", err)
	}
}

// The order of ids is kept by one lock that every event writer takes. A
// role that may only read (the inspector of docs/roles.sql) must not be
// able to take it: an advisory lock needs no privilege, so with one an
// inspector's session could stall every audited command, every replica
// state change and every run store flush of the installation.
func TestAReadOnlyRoleCannotStallEventWriters(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	insp, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer insp.Release()
	if _, err := insp.Exec(ctx, `SET ROLE studio_inspector`); err != nil {
		t.Fatal(err)
	}
	// Whatever an inspector can lock, it tries: the advisory key of the
	// first version, and the table.
	if _, err := insp.Exec(ctx, `SELECT pg_advisory_lock(1937012068)`); err != nil {
		t.Fatal(err)
	}
	defer insp.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	if _, err := insp.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	defer insp.Exec(ctx, `ROLLBACK`)
	if _, err := insp.Exec(ctx, `LOCK TABLE studio_event IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`SELECT pg_advisory_xact_lock(1937012068)`, `SELECT 1 FROM studio_event FOR UPDATE`} {
		if _, err := insp.Exec(ctx, `SAVEPOINT s`); err != nil {
			t.Fatal(err)
		}
		_, err := insp.Exec(ctx, stmt)
		if err != nil && !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("%s: %v", stmt, err)
		}
		if _, err := insp.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
			t.Fatal(err)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := pool.Exec(wctx, `INSERT INTO studio_audit (actor, action, target, reason) VALUES ('alice', 'jobs.pause', 'j', 'r')`); err != nil {
		t.Fatalf("an audited action while an inspector holds what it can: %v", err)
	}
	if _, err := pool.Exec(wctx, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('r1', gen_random_uuid(), 'h', 1, 'v', 'starting')`); err != nil {
		t.Fatalf("a replica state change while an inspector holds what it can: %v", err)
	}
}

// The functions that write events are not callable by the roles, except
// studio_event_runs by the replica, and an event's data is always one JSON
// object (docs/events.md), whatever the caller passes.
func TestRolesCannotForgeEvents(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	for _, role := range []string{"studio_inspector", "studio_operator", "studio_replica"} {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SET ROLE `+role); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{
			`SELECT studio_event_add('audit', '{"actor":"forged"}')`,
			`INSERT INTO studio_event (event, data) VALUES ('audit', '{"actor":"forged"}')`,
			`UPDATE studio_event SET data = '{"actor":"forged"}'`,
		} {
			if _, err := conn.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s: %s: %v, want permission denied", role, stmt, err)
			}
		}
		if role == "studio_replica" {
			for _, bad := range []string{`'"just a string"'`, `'[1, 2]'`, `'null'`} {
				_, err := conn.Exec(ctx, `SELECT studio_event_runs(ARRAY[`+bad+`::jsonb])`)
				if err == nil {
					t.Errorf("%s: a run event with data %s was written, want it refused", role, bad)
				}
			}
		}
		conn.Exec(ctx, `RESET ROLE`)
		conn.Release()
	}
	if evs := events(t, pool, 0); len(evs) != 0 {
		t.Fatalf("forged events were written: %v", evs)
	}
}

// The event functions run as the table's owner (SECURITY DEFINER). A
// caller's temporary tables come first in any search_path that does not
// name pg_temp last, so an operator could have shadowed studio_event with
// a temporary table of its own, hiding the event of its own audited
// action, or shadowed the table whose row orders the ids.
func TestATemporaryTableCannotShadowTheEventTables(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(ctx, `RESET ROLE`)
	for _, stmt := range []string{
		`SET ROLE studio_operator`,
		`CREATE TEMP TABLE studio_event (id bigint GENERATED ALWAYS AS IDENTITY, at timestamptz DEFAULT now(), event text, data jsonb)`,
		`CREATE TEMP TABLE studio_event_writer (one boolean)`,
		`INSERT INTO studio_audit (actor, action, target, reason) VALUES ('mallory', 'locks.release', 'nightly', 'hidden?')`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var hidden int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_temp.studio_event`).Scan(&hidden); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events(t, pool, 0) {
		got = append(got, e.Name)
	}
	if hidden != 0 || strings.Join(got, ",") != "audit,lock" {
		t.Fatalf("the operator's audited action: events %v in studio_event and %d in its temporary table, want audit and lock in studio_event", got, hidden)
	}
}

// The same hole in the request guard of migration 00005 (a trigger that
// runs as the caller): an operator's temporary studio_audit passed the
// check that a request has its own audit row from the same transaction, so
// a drain could point at an old audit row of another action. Migration
// 00006 pins the guard's search_path too.
func TestATemporaryTableCannotPassTheRequestGuard(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	var old int64
	if err := pool.QueryRow(ctx, `INSERT INTO studio_audit (actor, action, target) VALUES ('alice', 'jobs.pause', 'j') RETURNING seq`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(ctx, `RESET ROLE`)
	for _, stmt := range []string{
		`SET ROLE studio_operator`,
		`CREATE TEMP TABLE studio_audit (seq bigint, at timestamptz DEFAULT now(), actor text, action text, target text, reason text DEFAULT '', detail jsonb DEFAULT '{}')`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO pg_temp.studio_audit (seq, actor, action, target) VALUES ($1, 'mallory', 'replicas.drain', 'web-1')`, old); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO studio_request (kind, target, requested_by, audit_seq, expires_at) VALUES ('replica.drain', 'web-1', 'mallory', $1, now() + interval '1 minute')`, old)
	if err == nil {
		t.Fatal("a drain request pointing at an old audit row of another action was written through a temporary studio_audit")
	}
	if !strings.Contains(err.Error(), "needs its own studio_audit row") {
		t.Fatalf("want the guard's refusal, got %v", err)
	}
}

// The run store's flush takes the lock that orders ids in its next to
// last statement, then commits. A replica that stops right there (kill
// -STOP, a paused VM) would hold it, and stall every event writer of the
// installation (every audited command, every state change, every other
// replica's flush), for as long as it stays stopped: the replica's
// sessions pin idle_in_transaction_session_timeout to 0. studio_event_runs
// sets it, for its own transaction only, so the server ends such a
// session (5 s idle) and the others go on: within the 10 s the others wait
// for the lock (migration 00009), so none of them fails.
func TestAStoppedFlushDoesNotStallEventWritersForever(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	ctx := context.Background()
	stopped, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Release()
	if _, err := stopped.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := stopped.Exec(ctx, `WITH r AS (INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome)
VALUES ('frozen', 'r1', now(), 'running') RETURNING *) SELECT studio_event_runs(ARRAY[studio_event_run_data(r)]) FROM r`); err != nil {
		t.Fatal(err)
	}
	// ... and the replica stops sending.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(wctx, `INSERT INTO studio_audit (actor, action, target, reason) VALUES ('alice', 'jobs.pause', 'j', 'r')`); err != nil {
		t.Fatalf("an audited action behind a stopped flush: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("an audited action behind a stopped flush went through after %s", time.Since(start).Round(time.Millisecond))
	var got []string
	for _, e := range events(t, pool, 0) {
		got = append(got, e.Name)
	}
	if strings.Join(got, ",") != "audit" {
		t.Fatalf("events %v: want the audit event only (the stopped flush rolled back)", got)
	}
}

// The triggers are deferred, so they take the lock at commit, but any
// writer may SET CONSTRAINTS ALL IMMEDIATE: an operator in psql that
// writes an audit row that way and then sits in its transaction held the
// lock, and stalled every event writer, until it ended.
func TestAnImmediateTriggerDoesNotStallEventWritersForever(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	op, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Release()
	for _, stmt := range []string{
		`SET ROLE studio_operator`, `BEGIN`, `SET CONSTRAINTS ALL IMMEDIATE`,
		`INSERT INTO studio_audit (actor, action, target, reason) VALUES ('bob', 'jobs.pause', 'j', 'in psql')`,
	} {
		if _, err := op.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// ... and bob goes for coffee.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(wctx, `INSERT INTO studio_audit (actor, action, target, reason) VALUES ('alice', 'jobs.pause', 'j', 'r')`); err != nil {
		t.Fatalf("an audited action behind an idle immediate trigger: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("went through after %s", time.Since(start).Round(time.Millisecond))
}

// The forged event of issue 21, as a sql: job under the replica role sent
// it: a run that no replica ran, "succeeded", to every /v1/events client.
// studio_event_runs now writes only events that describe run rows the
// calling transaction wrote (migration 00009), so neither the issue's
// event nor one that names a real run with another outcome, nor one of a
// run an earlier transaction wrote, is written.
func TestTheReplicaRoleCannotForgeARunEvent(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	var earlier int64
	if err := pool.QueryRow(ctx, `INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome)
VALUES ('payments', 'r1', now(), 'running') RETURNING seq`).Scan(&earlier); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(ctx, `RESET ROLE`)
	if _, err := conn.Exec(ctx, `SET ROLE studio_replica`); err != nil {
		t.Fatal(err)
	}
	for name, stmt := range map[string]string{
		"the issue's event":                    `SELECT studio_event_runs(array['{"job_id":"forged-payments","outcome":"succeeded","seq":424242,"replica_id":"r1"}'::jsonb])`,
		"a real run of an earlier transaction": fmt.Sprintf(`SELECT studio_event_runs(array['{"job_id":"payments","outcome":"running","seq":%d,"replica_id":"r1","cluster":""}'::jsonb])`, earlier),
		"a run of this transaction with another outcome": `WITH r AS (INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('payments', 'r1', now(), 'running') RETURNING *)
SELECT studio_event_runs(ARRAY[jsonb_set(studio_event_run_data(r), '{outcome}', '"succeeded"')]) FROM r`,
		"a run of this transaction under another replica": `WITH r AS (INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('payments', 'r1', now(), 'running') RETURNING *)
SELECT studio_event_runs(ARRAY[jsonb_set(studio_event_run_data(r), '{replica_id}', '"r2"')]) FROM r`,
		"a seq that is no number": `SELECT studio_event_runs(array['{"job_id":"payments","outcome":"running","seq":"1 OR true","replica_id":"r1"}'::jsonb])`,
	} {
		_, err := conn.Exec(ctx, stmt)
		if err == nil || !strings.Contains(err.Error(), "describes no run row this transaction wrote") {
			t.Errorf("%s: %v, want it refused", name, err)
		}
	}
	// The run store's own way still writes its event.
	if _, err := conn.Exec(ctx, `WITH r AS (INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('payments', 'r1', now(), 'running') RETURNING *)
SELECT studio_event_runs(ARRAY[studio_event_run_data(r)]) FROM r`); err != nil {
		t.Fatalf("a run and its event in one transaction: %v", err)
	}
	evs := events(t, pool, 0)
	if len(evs) != 1 || data(t, evs[0])["job_id"] != "payments" || data(t, evs[0])["outcome"] != "running" {
		t.Fatalf("events %v: want the one event of the run written with it", evs)
	}
}

// The issue's hostile sql: job, `select studio_event_runs(...); select
// pg_sleep(45)`, held the lock that orders event ids for 45 s: `jobs
// resume` took 42 s. The event is refused now, so the job fails at once;
// and a writer that does hold the lock in a long statement (a replica's
// session; sql jobs run as studio_sql_job, which may not call the writer)
// makes the others wait at most 10 s (lock_timeout, migration 00009), after
// which their statement fails and changes nothing.
func TestAHostileSQLJobNeitherStallsNorForges(t *testing.T) {
	pool, _ := openPool(t)
	applyRoles(t, pool)
	ctx := context.Background()
	asRole := func(role string) *pgxpool.Conn {
		t.Helper()
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Exec(context.Background(), `RESET ROLE`); c.Release() })
		if _, err := c.Exec(ctx, `SET ROLE `+role); err != nil {
			t.Fatal(err)
		}
		return c
	}
	hostile := `select studio_event_runs(array['{"job_id":"forged-payments","outcome":"succeeded","seq":424242,"replica_id":"r1"}'::jsonb]); select pg_sleep(45)`

	// Under the role sql jobs run as: no call at all.
	sqlJob := asRole("studio_sql_job")
	start := time.Now()
	err := sqlJob.Conn().PgConn().Exec(ctx, hostile).Close()
	if err == nil || !strings.Contains(err.Error(), "permission denied for function studio_event_runs") {
		t.Fatalf("the hostile job as studio_sql_job: %v, want permission denied", err)
	}
	for _, stmt := range []string{
		`INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('forged-payments', 'r1', now(), 'succeeded')`,
		`LOCK TABLE studio_job_run IN ACCESS EXCLUSIVE MODE`,
		`SELECT 1 FROM studio_job_status FOR UPDATE`,
	} {
		err := sqlJob.Conn().PgConn().Exec(ctx, `BEGIN; `+stmt+`; ROLLBACK`).Close()
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("studio_sql_job: %s: %v, want permission denied", stmt, err)
		}
		sqlJob.Exec(ctx, `ROLLBACK`)
	}
	// Under the replica role (a job without database.sql_url): refused,
	// and the sleep never runs.
	if err := asRole("studio_replica").Conn().PgConn().Exec(ctx, hostile).Close(); err == nil || !strings.Contains(err.Error(), "describes no run row") {
		t.Fatalf("the hostile job as studio_replica: %v, want the event refused", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the hostile jobs took %s, want them refused at once", d)
	}
	if evs := events(t, pool, 0); len(evs) != 0 {
		t.Fatalf("events %v: want none", evs)
	}

	// A replica session that holds the lock in a long statement.
	holder := asRole("studio_replica")
	if _, err := holder.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `WITH r AS (INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ('slow', 'r1', now(), 'running') RETURNING *)
SELECT studio_event_runs(ARRAY[studio_event_run_data(r)]) FROM r`); err != nil {
		t.Fatal(err)
	}
	sleeping := make(chan error, 1)
	go func() { _, err := holder.Exec(ctx, `SELECT pg_sleep(40)`); sleeping <- err }()
	defer func() {
		holder.Conn().PgConn().CancelRequest(context.Background())
		<-sleeping
		holder.Exec(context.Background(), `ROLLBACK`)
	}()
	op := asRole("studio_operator")
	start = time.Now()
	wctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	defer cancel()
	_, err = op.Exec(wctx, `INSERT INTO studio_audit (actor, action, target, reason) VALUES ('alice', 'jobs.resume', 'j', 'r')`)
	waited := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("an audited write behind a writer in a 40 s statement: %v after %s, want a lock timeout", err, waited.Round(time.Millisecond))
	}
	if waited < 9*time.Second || waited > 15*time.Second {
		t.Fatalf("it waited %s, want the 10 s bound", waited.Round(time.Millisecond))
	}
	t.Logf("an audited write behind a writer in a long statement failed after %s", waited.Round(time.Millisecond))
	var audits int
	if err := op.QueryRow(ctx, `SELECT count(*) FROM studio_audit`).Scan(&audits); err != nil || audits != 0 {
		t.Fatalf("audit rows %d (%v): want none, the write failed whole", audits, err)
	}
}
