package host_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// yearlyJobs fire once a year: they run only when triggered.
const yearlyJobs = `
jobs:
  - id: manual
    scope: installation
    cron: "0 0 1 1 *"
    run:
      command: ["sh", "-c", "echo ran"]
  - id: each
    scope: instance
    cron: "0 0 1 1 *"
    run:
      command: ["sh", "-c", "echo ran"]
`

// replica is one host running in the test.
type replica struct {
	h    *host.Host
	addr string
	done chan error
	sigs chan os.Signal
}

func startReplica(t *testing.T, url, id string) *replica {
	t.Helper()
	list, err := jobs.Parse("test.yaml", []byte(yearlyJobs))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	h, err := host.New(host.Options{
		ConnString: url, ID: id, Version: "test", DrainDelay: 50 * time.Millisecond, Jobs: list, NoHousekeeping: true,
		// The listener never pings, so its backend's last query stays
		// "LISTEN studio" and the test can find it to cut the bus.
		BusPingEvery: time.Hour,
		OnReady:      func(addr string) { ready <- addr },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{h: h, done: make(chan error, 1), sigs: make(chan os.Signal, 2)}
	go func() { r.done <- runHost(h, context.Background(), r.sigs) }()
	select {
	case r.addr = <-ready:
	case err := <-r.done:
		t.Fatalf("%s stopped before ready: %v", id, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", id)
	}
	t.Cleanup(func() {
		select {
		case r.sigs <- os.Interrupt:
		default:
		}
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", id)
		}
	})
	return r
}

// metric reads one sample of the replica's /metrics (0 when absent).
func (r *replica) metric(t *testing.T, sample string) float64 {
	t.Helper()
	_, body := get(t, "http://"+r.addr+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// selectOnlyRole creates a login role that may only SELECT every table,
// and returns a connection string for it.
func selectOnlyRole(t *testing.T, pool *pgxpool.Pool, dbURL string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	role := "peek_" + hex.EncodeToString(b)
	const password = "peek-secret"
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN PASSWORD '` + password + `'`,
		`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ` + role,
	} {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return u.String()
}

func runs(t *testing.T, pool *pgxpool.Pool, job string) int {
	return count(t, pool, `SELECT count(*) FROM studio_job_run WHERE job_id = $1 AND outcome = 'succeeded'`, job)
}

// Issue 7, defect 4: a role that can only SELECT could drain any replica
// and trigger any job with a bare pg_notify, and no audit row was written.
// Now the signal only wakes the replica, which acts on a studio_request row
// alone, and writing one takes INSERT, which the role lacks.
func TestSelectOnlyRoleCannotDrainOrTriggerAndTheOperatorPathIsAudited(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	admin, err := db.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	r := startReplica(t, dbURL, "web-1")
	ctx := context.Background()
	waitUntil(t, 20*time.Second, "the replica to report its jobs", func() bool {
		return count(t, admin, `SELECT count(*) FROM studio_job_status WHERE job_id IN ('manual', 'each')`) == 2
	})

	peekURL := selectOnlyRole(t, admin, dbURL)
	peek, err := pgx.Connect(ctx, peekURL)
	if err != nil {
		t.Fatalf("connect as the SELECT-only role: %v", err)
	}
	defer peek.Close(ctx)
	if n := 0; peek.QueryRow(ctx, `SELECT count(*) FROM studio_replica`).Scan(&n) != nil || n != 1 {
		t.Fatalf("the SELECT-only role cannot read studio_replica (%d rows)", n)
	}
	// The reproduction of the issue, and a trigger of each job.
	for _, p := range []string{
		`{"v":1,"type":"signal","kind":"replica.drain","key":"web-1"}`,
		`{"v":1,"type":"signal","kind":"job.trigger","key":"manual"}`,
		`{"v":1,"type":"signal","kind":"job.trigger","key":"each"}`,
	} {
		if _, err := peek.Exec(ctx, `SELECT pg_notify('studio', $1)`, p); err != nil {
			t.Fatalf("pg_notify as the SELECT-only role: %v", err)
		}
	}
	// Nor can it write a request, or use the operator commands' code.
	if _, err := peek.Exec(ctx, `INSERT INTO studio_request (kind, target, replica_id, incarnation, requested_by, expires_at)
SELECT 'replica.drain', id, id, incarnation, 'mallory', now() + interval '1 minute' FROM studio_replica`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("INSERT INTO studio_request as the SELECT-only role = %v, want permission denied", err)
	}
	peekPool, err := db.Open(ctx, peekURL)
	if err != nil {
		t.Fatal(err)
	}
	defer peekPool.Close()
	if _, _, err := replicas.RequestDrain(ctx, peekPool, "web-1", "mallory", ""); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("RequestDrain as the SELECT-only role = %v, want permission denied", err)
	}
	if _, err := jobstore.Trigger(ctx, peekPool, "manual", "mallory", ""); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Trigger as the SELECT-only role = %v, want permission denied", err)
	}

	// The replica handled the signals: each found no request.
	waitUntil(t, 20*time.Second, "the signals to be handled", func() bool {
		return r.metric(t, `studio_control_signals_without_request_total{kind="replica.drain"}`) >= 1 &&
			r.metric(t, `studio_control_signals_without_request_total{kind="job.trigger"}`) >= 2
	})
	if s := r.h.State(); s != replicas.StateReady {
		t.Fatalf("after the bare signals the replica is %s, want ready", s)
	}
	select {
	case err := <-r.done:
		t.Fatalf("the replica stopped on a bare signal: %v", err)
	default:
	}
	if n := runs(t, admin, "manual") + runs(t, admin, "each"); n != 0 {
		t.Fatalf("%d runs after bare trigger signals, want 0", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM studio_audit`); n != 0 {
		t.Fatalf("%d audit rows after the SELECT-only role's attempts, want 0", n)
	}

	// The operator path: a request row with its audit row; each job runs once.
	for _, job := range []string{"manual", "each"} {
		if n, err := jobstore.Trigger(ctx, admin, job, "ana@ops", "rerun"); err != nil || n != 1 {
			t.Fatalf("Trigger(%s) = %d, %v", job, n, err)
		}
	}
	waitUntil(t, 20*time.Second, "one run of each triggered job", func() bool {
		return runs(t, admin, "manual") == 1 && runs(t, admin, "each") == 1
	})
	if n := count(t, admin, `SELECT count(*) FROM studio_audit WHERE action = 'jobs.trigger' AND actor = 'ana@ops'`); n != 2 {
		t.Errorf("%d jobs.trigger audit rows, want 2", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM studio_request WHERE kind = 'job.trigger' AND done_by = 'web-1'`); n != 2 {
		t.Errorf("%d trigger requests claimed by web-1, want 2", n)
	}

	// A request whose NOTIFY was lost (written while the bus was down) is
	// found when the bus reconnects. (The instance job: the installation
	// job's lock is held for its minimum gap after its run.)
	// A request needs its own audit row from the same transaction
	// (migrations/00005).
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var auditSeq int64
	if err := tx.QueryRow(ctx, `INSERT INTO studio_audit (actor, action, target) VALUES ('ana@ops', 'jobs.trigger', 'each') RETURNING seq`).Scan(&auditSeq); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO studio_request (kind, target, replica_id, incarnation, requested_by, audit_seq, expires_at)
SELECT 'job.trigger', 'each', id, incarnation, 'ana@ops', $1, now() + interval '10 minutes' FROM studio_replica WHERE id = 'web-1'`, auditSeq); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, admin, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN studio' AND pid <> pg_backend_pid()) t`); n != 1 {
		t.Fatalf("terminated %d listener backends, want 1", n)
	}
	waitUntil(t, 30*time.Second, "the lost request to run after the reconnect", func() bool { return runs(t, admin, "each") == 2 })

	// A drain request by the operator drains it, with one audit row.
	if _, _, err := replicas.RequestDrain(ctx, admin, "web-1", "ana@ops", "kernel"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run after a drain request: %v", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not drain on a drain request")
	}
	in, err := replicas.Get(ctx, admin, "web-1")
	if err != nil || in.State != replicas.StateStopped {
		t.Fatalf("after the drain: %+v, %v", in, err)
	}
	if n := count(t, admin, `SELECT count(*) FROM studio_audit WHERE action = 'replicas.drain'`); n != 1 {
		t.Errorf("%d replicas.drain audit rows, want 1", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM studio_request WHERE kind = 'replica.drain' AND done_by = 'web-1'`); n != 1 {
		t.Errorf("%d drain requests claimed, want 1", n)
	}
}

// With two replicas, a trigger of an installation job runs once in all,
// and a trigger of an instance job runs once on each replica.
func TestTriggerRunsAnInstallationJobOnceAndAnInstanceJobOnEveryReplica(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	admin, err := db.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	startReplica(t, dbURL, "web-1")
	startReplica(t, dbURL, "web-2")
	ctx := context.Background()
	waitUntil(t, 20*time.Second, "both replicas to report their jobs", func() bool {
		return count(t, admin, `SELECT count(*) FROM studio_job_status WHERE job_id IN ('manual', 'each')`) == 4
	})
	for _, job := range []string{"manual", "each"} {
		if _, err := jobstore.Trigger(ctx, admin, job, "ana@ops", ""); err != nil {
			t.Fatalf("Trigger(%s): %v", job, err)
		}
	}
	waitUntil(t, 20*time.Second, "the triggered runs", func() bool {
		return runs(t, admin, "manual") == 1 &&
			count(t, admin, `SELECT count(DISTINCT replica_id) FROM studio_job_run WHERE job_id = 'each' AND outcome = 'succeeded'`) == 2
	})
	waitUntil(t, 20*time.Second, "every request to be claimed", func() bool {
		return count(t, admin, `SELECT count(*) FROM studio_request WHERE done_at IS NULL`) == 0
	})
	if n := runs(t, admin, "each"); n != 2 {
		t.Errorf("%d runs of the instance job, want 2 (one per replica)", n)
	}
	if n := runs(t, admin, "manual"); n != 1 {
		t.Errorf("%d runs of the installation job, want 1", n)
	}
	if _, err := jobstore.Trigger(ctx, admin, "nosuch", "ana@ops", ""); !errors.Is(err, jobstore.ErrUnknownJob) {
		t.Errorf("Trigger(nosuch) = %v, want ErrUnknownJob", err)
	}
}

// operatorGrants are the privileges docs/control.md lists for an operator
// role, on top of SELECT on every table.
var operatorGrants = []string{
	`GRANT SELECT ON ALL TABLES IN SCHEMA public TO %s`,
	`GRANT INSERT ON studio_request, studio_audit TO %s`,
	`GRANT USAGE ON SEQUENCE studio_request_seq_seq, studio_audit_seq_seq TO %s`,
	`GRANT INSERT, UPDATE ON studio_job_setting TO %s`,
	`GRANT DELETE ON studio_replica TO %s`,
	`GRANT DELETE ON studio_job_status, studio_job_setting TO %s`,
}

// A role with exactly the documented grants can drain, trigger, pause,
// resume, set and forget, and each change writes its audit row.
func TestOperatorRoleWithTheDocumentedGrantsCanDrainTriggerChangeAndForget(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	admin, err := db.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	b := make([]byte, 4)
	rand.Read(b)
	role := "op_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN PASSWORD 'op-secret'`); err != nil {
		t.Fatal(err)
	}
	for _, g := range operatorGrants {
		if _, err := admin.Exec(ctx, fmt.Sprintf(g, role)); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
	u, _ := url.Parse(dbURL)
	u.User = url.UserPassword(role, "op-secret")
	op, err := db.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	for _, sql := range []string{
		`INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('live', gen_random_uuid(), 'h', 1, 'v', 'ready')`,
		`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES ('gone', gen_random_uuid(), 'h', 1, 'v', 'ready', now() - interval '1 minute')`,
		`INSERT INTO studio_job_status (replica_id, job_id, scope) VALUES ('live', 'manual', 'installation'), ('live', 'each', 'instance'), ('gone', 'retired', 'instance')`,
		`INSERT INTO studio_job_setting (job_id, paused) VALUES ('retired', true)`,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := replicas.RequestDrain(ctx, op, "live", "op", ""); err != nil {
		t.Errorf("drain: %v", err)
	}
	for _, job := range []string{"manual", "each"} {
		if _, err := jobstore.Trigger(ctx, op, job, "op", ""); err != nil {
			t.Errorf("trigger %s: %v", job, err)
		}
	}
	every := jobs.Schedule{Every: time.Hour}
	for _, c := range []jobstore.Change{{Pause: ptr(true)}, {Pause: ptr(false)}, {Schedule: &every}} {
		c.Actor = "op"
		if _, err := jobstore.ApplyChange(ctx, op, "manual", c); err != nil {
			t.Errorf("change %+v: %v", c, err)
		}
	}
	if f, err := jobstore.Forget(ctx, op, "retired", "", "op", ""); err != nil || !f.Settings {
		t.Errorf("jobs forget: %+v, %v", f, err)
	}
	if _, err := replicas.Forget(ctx, op, "gone", "op", ""); err != nil {
		t.Errorf("forget: %v", err)
	}
	if n := count(t, admin, `SELECT count(*) FROM studio_audit WHERE actor = 'op'`); n != 8 {
		t.Errorf("%d audit rows, want 8", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM studio_request WHERE requested_by = 'op'`); n != 3 {
		t.Errorf("%d request rows, want 3", n)
	}
}

func ptr[T any](v T) *T { return &v }

// Anyone who can connect may send signals. A flood of bare job.trigger
// signals must not become a flood of claim statements: claims are
// coalesced to at most one per requestMinGap (50ms), so the number of
// passes stays bounded by the time the flood took, not by its size.
func TestASignalFloodIsCoalescedIntoFewClaims(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	admin, err := db.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	r := startReplica(t, dbURL, "web-1")
	ctx := context.Background()
	waitUntil(t, 20*time.Second, "the replica to report its jobs", func() bool {
		return count(t, admin, `SELECT count(*) FROM studio_job_status WHERE job_id = 'manual'`) == 1 &&
			r.metric(t, `studio_control_claims_total`) >= 1
	})
	peek, err := pgx.Connect(ctx, selectOnlyRole(t, admin, dbURL))
	if err != nil {
		t.Fatal(err)
	}
	defer peek.Close(ctx)

	before := r.metric(t, `studio_control_claims_total`)
	start := time.Now()
	const signals = 3000
	// Distinct payloads (PostgreSQL folds identical ones within a
	// transaction), in one burst per batch of 500.
	for i := 0; i < signals; i += 500 {
		if _, err := peek.Exec(ctx, `SELECT pg_notify('studio', '{"v":1,"type":"signal","kind":"job.trigger","key":"manual","n":' || n || '}')
FROM generate_series($1::int, $1::int + 499) AS n`, i); err != nil {
			t.Fatal(err)
		}
	}
	// A real trigger, notified after the flood: once it has run, the
	// listener has handed every signal of the flood to the claim loop.
	if _, err := jobstore.Trigger(ctx, admin, "manual", "tester", "after the flood"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the real trigger to run", func() bool { return runs(t, admin, "manual") == 1 })
	elapsed := time.Since(start)
	passes := r.metric(t, `studio_control_claims_total`) - before
	bound := float64(elapsed/(50*time.Millisecond)) + 3
	t.Logf("%d signals in %v: %.0f claim passes (bound %.0f)", signals, elapsed.Round(time.Millisecond), passes, bound)
	if passes > bound {
		t.Errorf("%d signals in %v caused %.0f claim passes, want at most %.0f (one per 50ms)", signals, elapsed, passes, bound)
	}
	if s := r.h.State(); s != replicas.StateReady {
		t.Errorf("state after the flood = %s, want ready", s)
	}
}
