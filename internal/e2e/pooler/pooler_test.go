package e2epooler

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgbouncer"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

const (
	// queryTimeout bounds one statement of the test.
	queryTimeout = 10 * time.Second
	// secret is the URLs' password: the servers and PgBouncer trust local
	// connections, so it is never checked, but it must never be shown.
	secret = "Pooler-Secret-31"
	// runsWithin bounds the wait for the jobs' first executions.
	runsWithin = 60 * time.Second
	// exitWithin bounds a refused start.
	exitWithin = 30 * time.Second
)

// withPassword puts secret into a postgres://user@ URL.
func withPassword(u string) string {
	return strings.Replace(u, "postgres://postgres@", "postgres://postgres:"+secret+"@", 1)
}

// named sets application_name: a sql job records its replica with it.
func named(t *testing.T, raw, id string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", id)
	u.RawQuery = q.Encode()
	return u.String()
}

func testPool(t *testing.T, u string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	cfg, err := db.ParsePoolConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	// The test's own statements may go through the pooler too.
	db.ForPoolerPool(cfg)
	pool, err := db.OpenConfig(ctx, cfg, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// recorded is the sql of a job that records its own execution in
// pooler_exec: job, replica (application_name), start and end.
func recorded(job string, seconds float64) string {
	return fmt.Sprintf(`DO $$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN PERFORM pg_sleep(%g);
        INSERT INTO pooler_exec VALUES ('%s', current_setting('application_name'), t0, clock_timestamp()); END $$`, seconds, job)
}

const execTable = `CREATE TABLE IF NOT EXISTS pooler_exec (job_id text NOT NULL, replica text NOT NULL,
  started_at timestamptz NOT NULL, ended_at timestamptz NOT NULL)`

// writeConfig writes the replicas' studio.yaml: two installation jobs
// that record their executions, a per-instance job, a yearly job for
// triggers (due once a year), and four clusters for leases.
func writeConfig(t *testing.T) string {
	t.Helper()
	// The jobs record application_name, the replica's: they run as its
	// role (database.sql_as_replica), on its sessions.
	conf := fmt.Sprintf(`database:
  sql_as_replica: true
clusters: [c1, c2, c3, c4]
jobs:
  - id: every-1s
    scope: installation
    every: 1s
    timeout: 5s
    run:
      sql: >-
        %s
  - id: every-2s
    scope: installation
    every: 2s
    run:
      sql: >-
        %s
  - id: each
    scope: instance
    every: 1s
    run:
      sql: SELECT 1
  - id: yearly
    scope: installation
    cron: "0 0 1 1 *"
    run:
      sql: >-
        %s
`, recorded("every-1s", 0.2), recorded("every-2s", 0.3), recorded("yearly", 0))
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type execution struct {
	Job, Replica string
	Start, End   time.Time
}

func executions(t *testing.T, pool *pgxpool.Pool) []execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT job_id, replica, started_at, ended_at FROM pooler_exec ORDER BY started_at`)
	if err != nil {
		t.Fatal(err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (execution, error) {
		var e execution
		err := r.Scan(&e.Job, &e.Replica, &e.Start, &e.End)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// checkNoOverlap fails for two executions of one job that overlap.
func checkNoOverlap(t *testing.T, list []execution) {
	t.Helper()
	byJob := map[string][]execution{}
	for _, e := range list {
		byJob[e.Job] = append(byJob[e.Job], e)
	}
	for job, es := range byJob {
		sort.Slice(es, func(i, j int) bool { return es[i].Start.Before(es[j].Start) })
		for i := 1; i < len(es); i++ {
			if es[i].Start.Before(es[i-1].End) {
				t.Errorf("%s: executions overlap: %s on %s until %s, and %s on %s", job,
					es[i-1].Start.Format("15:04:05.000"), es[i-1].Replica, es[i-1].End.Format("15:04:05.000"),
					es[i].Start.Format("15:04:05.000"), es[i].Replica)
			}
		}
	}
}

// count runs a count(*) query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var n int
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitRuns waits until every-1s and every-2s have recorded executions on
// (at least n1 and n2), and every
// cluster has a live owner.
func waitRuns(t *testing.T, pool *pgxpool.Pool, n1, n2 int) {
	t.Helper()
	replicaproc.Eventually(t, runsWithin, "executions and owned leases", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var a, b, owned int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE job_id = 'every-1s'), count(*) FILTER (WHERE job_id = 'every-2s'),

  (SELECT count(*) FROM cluster_lease l JOIN studio_replica r ON r.id = l.owner AND r.state = 'ready')
FROM pooler_exec`).Scan(&a, &b, &owned)
		if err != nil {
			return err
		}
		if a < n1 || b < n2 || owned < 4 {
			return fmt.Errorf("every-1s %d, every-2s %d executions, %d clusters owned", a, b, owned)
		}
		return nil
	})
}

// checkLogs fails for any sign of pgx's statement cache behind a pooler,
// and for the password, in a replica's log.
func checkLogs(t *testing.T, procs ...*replicaproc.Proc) {
	t.Helper()
	for _, p := range procs {
		out := p.Stderr()
		for _, bad := range []string{"prepared statement", "stmtcache", secret} {
			if strings.Contains(out, bad) {
				t.Errorf("replica %s logged %q", p.ID(), bad)
			}
		}
	}
}

// failedRuns lists runs of the test's jobs that did not succeed.
func failedRuns(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT job_id || ' on ' || replica_id || ': ' || outcome || ' ' || coalesce(error, '')
FROM studio_job_run WHERE job_id IN ('every-1s', 'every-2s', 'each', 'yearly') AND outcome NOT IN ('succeeded', 'running') ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// operator runs a command with both URLs, as an operator's environment
// would hold them, and fails the test on a non-zero exit or a password
// in the output.
func operator(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, errOut, code := studioctlBin.RunEnv(t, env, args...)
	if code != 0 {
		t.Fatalf("studioctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	if strings.Contains(out+errOut, secret) {
		t.Errorf("studioctl %s shows the password", strings.Join(args, " "))
	}
	return out
}

// doctorCheck runs doctor -o json and returns the pooler check.
func doctorCheck(t *testing.T, env []string, check string) (status, detail string, code int) {
	t.Helper()
	out, errOut, code := studioctlBin.RunEnv(t, env, "doctor", "-o", "json")
	if strings.Contains(out+errOut, secret) {
		t.Error("doctor shows the password")
	}
	var rs []struct{ Check, Status, Detail string }
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("doctor -o json: %v\n%s%s", err, out, errOut)
	}
	for _, r := range rs {
		if r.Check == check {
			return r.Status, r.Detail, code
		}
	}
	t.Fatalf("doctor has no %s check:\n%s", check, out)
	return "", "", code
}

// TestTransactionPoolerWithListenURLRunsEverything is the usual
// deployment of docs/poolers.md: database.url goes through PgBouncer in
// transaction mode with a pool of three server connections, which two
// replicas, their sql jobs and the operator commands share;
// database.listen_url is a direct connection for the bus, the heartbeat
// and the migrations (the database starts empty: the replicas migrate it
// over the listen URL). Everything must work: installation jobs once per
// tick with no overlap, instance jobs, the run history, leases, a
// trigger over the bus, a drain, doctor reporting the pooler, and no
// error of pgx's statement cache, no session setting leaking into the
// shared server sessions, and no password anywhere.
func TestTransactionPoolerWithListenURLRunsEverything(t *testing.T) {
	ctx := context.Background()
	ids := []string{"pool-a", "pool-b"}
	b, direct, pooled, pool, procs := startReplicas(t, pgbouncer.Transaction, 3, true, ids)
	for _, id := range ids {
		if !procs[id].Logged("the pool keeps no session state") {
			t.Errorf("%s did not log that its pool keeps no session state", id)
		}
	}
	waitRuns(t, pool, 6, 3)

	env := []string{"STUDIO_DATABASE_URL=" + withPassword(pooled), "STUDIO_DATABASE_LISTEN_URL=" + withPassword(direct)}
	// A trigger: a request row and a NOTIFY through the pooler, heard on
	// the replicas' direct bus.
	triggerYearly(t, env, pool)
	if out := operator(t, env, "locks", "list", "-o", "json"); !strings.Contains(out, `"every-1s"`) {
		t.Errorf("locks list does not show every-1s:\n%s", out)
	}
	if out := operator(t, env, "jobs", "history", "every-1s", "-o", "json"); !strings.Contains(out, `"succeeded"`) {
		t.Errorf("jobs history every-1s shows no succeeded run:\n%s", out)
	}
	if out := operator(t, env, "jobs", "list", "-o", "json"); !strings.Contains(out, `"every-2s"`) {
		t.Errorf("jobs list does not show every-2s:\n%s", out)
	}
	status, detail, code := doctorCheck(t, env, "pooler")
	if status != "ok" || !strings.Contains(detail, "transaction mode") {
		t.Errorf("doctor pooler: %s %q (exit %d), want ok naming the transaction mode", status, detail, code)
	}

	// A drain through the pooled URL: the replica stops, the other owns
	// every cluster.
	operator(t, env, "replicas", "drain", "pool-a", "--reason", "pooler test")
	if code := procs["pool-a"].WaitExit(t, exitWithin); code != 0 {
		t.Errorf("pool-a exited %d after its drain", code)
	}
	replicaproc.Eventually(t, 30*time.Second, "pool-b to own every cluster", func() error {
		if n := count(t, pool, `SELECT count(*) FROM cluster_lease WHERE owner = 'pool-b'`); n != 4 {
			return fmt.Errorf("pool-b owns %d of 4 clusters", n)
		}
		return nil
	})
	// Runs go on on pool-b alone.
	n := count(t, pool, `SELECT count(*) FROM pooler_exec WHERE job_id = 'every-1s' AND replica = 'pool-b'`)
	replicaproc.Eventually(t, 15*time.Second, "more runs on pool-b", func() error {
		if m := count(t, pool, `SELECT count(*) FROM pooler_exec WHERE job_id = 'every-1s' AND replica = 'pool-b'`); m < n+3 {
			return fmt.Errorf("%d runs of every-1s on pool-b, %d at the drain", m, n)
		}
		return nil
	})

	checkNoOverlap(t, executions(t, pool))
	if f := failedRuns(t, pool); len(f) > 0 {
		t.Errorf("runs that did not succeed:\n%s", strings.Join(f, "\n"))
	}
	// No session setting of a replica or a sql job (statement_timeout is
	// the transaction's own behind a pooler) stayed on a server session.
	pooledPool := testPool(t, pooled)
	for i := range 12 {
		var st, app string
		if err := pooledPool.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')`).Scan(&st, &app); err != nil {
			t.Fatal(err)
		}
		if st != "0" {
			t.Errorf("try %d: statement_timeout %q on a shared server session, want 0", i, st)
		}
	}
	checkLogs(t, procs["pool-a"], procs["pool-b"])
	t.Logf("%d executions; pgbouncer log:\n%s", len(executions(t, pool)), lastLines(b.Log(), 5))
}

// TestTransactionPoolerWithoutListenURLIsRefused: `run` on a URL through
// PgBouncer in transaction mode, without database.listen_url, exits 2
// before it writes anything, with a message that names the problem and
// the fix; doctor fails its pooler check; the operator commands still
// work through the pooler.
func TestTransactionPoolerWithoutListenURLIsRefused(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	pooled := withPassword(b.Through(t, direct))
	pool := testPool(t, direct)
	config := writeConfig(t)
	p := studioctlBin.Start(t, replicaproc.Options{ID: "refused", DatabaseURL: pooled, Args: []string{"--config", config}, FailOnRace: true})
	if code := p.WaitExit(t, exitWithin); code != 2 {
		t.Fatalf("run exited %d, want 2", code)
	}
	out := p.Stderr()
	for _, want := range []string{"pool_mode=transaction", "database.listen_url (STUDIO_DATABASE_LISTEN_URL)", "docs/poolers.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, secret) {
		t.Error("the refusal shows the password")
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_replica`); n != 0 {
		t.Errorf("%d replica rows after the refusal, want 0", n)
	}
	env := []string{"STUDIO_DATABASE_URL=" + pooled}
	status, detail, code := doctorCheck(t, env, "pooler")
	if status != "fail" || code != 1 || !strings.Contains(detail, "transaction") {
		t.Errorf("doctor pooler: %s %q (exit %d), want fail, exit 1", status, detail, code)
	}
	// Operator commands run their statements whole (exec mode): they work
	// through the pooler, even many times over.
	for range 5 {
		operator(t, env, "locks", "list", "-o", "json")
		operator(t, env, "replicas", "list", "-o", "json")
	}
}

// TestSessionPoolerRunsEverything: through PgBouncer in session mode,
// with no listen URL, everything works as on a direct connection.
func TestSessionPoolerRunsEverything(t *testing.T) {
	_, _, pooled, pool, procs := startReplicas(t, pgbouncer.Session, 60, false, []string{"sess-a", "sess-b"})
	waitRuns(t, pool, 6, 3)
	env := []string{"STUDIO_DATABASE_URL=" + withPassword(pooled)}
	triggerYearly(t, env, pool)
	status, detail, code := doctorCheck(t, env, "pooler")
	if status != "ok" || code != 0 || !strings.Contains(detail, "session of its own") {
		t.Errorf("doctor pooler: %s %q (exit %d), want ok", status, detail, code)
	}
	checkNoOverlap(t, executions(t, pool))
	if f := failedRuns(t, pool); len(f) > 0 {
		t.Errorf("runs that did not succeed:\n%s", strings.Join(f, "\n"))
	}
	checkLogs(t, procs["sess-a"], procs["sess-b"])
}

// TestABadListenURLIsRefused: a listen URL that goes through a pooler in
// transaction mode, or that reaches another database than
// database.url, is refused (exit 2) before anything is written.
func TestABadListenURLIsRefused(t *testing.T) {
	direct := pgtest.NewDB(t)
	other := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	pool := testPool(t, direct)
	for _, c := range []struct {
		name, url, listen, want string
	}{
		{"through the pooler", direct, b.Through(t, direct), "database.listen_url (STUDIO_DATABASE_LISTEN_URL) reaches"},
		{"another database", b.Through(t, direct), other, "does not reach the database of database.url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := studioctlBin.Start(t, replicaproc.Options{ID: "bad-listen", DatabaseURL: withPassword(c.url),
				Env: []string{"STUDIO_DATABASE_LISTEN_URL=" + withPassword(c.listen)}, FailOnRace: true})
			if code := p.WaitExit(t, exitWithin); code != 2 {
				t.Fatalf("run exited %d, want 2", code)
			}
			if out := p.Stderr(); !strings.Contains(out, c.want) || strings.Contains(out, secret) {
				t.Errorf("the refusal does not say %q, or shows the password:\n%s", c.want, out)
			}
			if n := count(t, pool, `SELECT count(*) FROM studio_replica`); n != 0 {
				t.Errorf("%d replica rows after the refusal, want 0", n)
			}
		})
	}
}

// startReplicas starts a bouncer in mode in front of an empty database
// and replicas ids through it (with database.listen_url direct when
// listen), which migrate it, and waits until each is ready.
func startReplicas(t *testing.T, mode string, poolSize int, listen bool, ids []string) (
	b *pgbouncer.Bouncer, direct, pooled string, pool *pgxpool.Pool, procs map[string]*replicaproc.Proc) {
	t.Helper()
	direct = pgtest.NewEmptyDB(t)
	b = pgbouncer.ForTest(t, mode, poolSize)
	pooled = b.Through(t, direct)
	pool = testPool(t, direct)
	if _, err := pool.Exec(context.Background(), execTable); err != nil {
		t.Fatal(err)
	}
	config := writeConfig(t)
	procs = map[string]*replicaproc.Proc{}
	for _, id := range ids {
		o := replicaproc.Options{ID: id, DatabaseURL: withPassword(named(t, pooled, id)), Args: []string{"--config", config}, FailOnRace: true}
		if listen {
			o.Env = []string{"STUDIO_DATABASE_LISTEN_URL=" + withPassword(named(t, direct, id))}
		}
		procs[id] = studioctlBin.Start(t, o)
	}
	for _, id := range ids {
		procs[id].WaitReady(t)
	}
	return b, direct, pooled, pool, procs
}

// triggerYearly triggers the yearly job with the operator's environment
// and waits for its run: a request row and a NOTIFY sent through the
// pooler, heard on the replicas' bus.
func triggerYearly(t *testing.T, env []string, pool *pgxpool.Pool) {
	t.Helper()
	before := count(t, pool, `SELECT count(*) FROM pooler_exec WHERE job_id = 'yearly'`)
	operator(t, env, "jobs", "trigger", "yearly", "--reason", "pooler test")
	replicaproc.Eventually(t, 15*time.Second, "the triggered run of yearly", func() error {
		if n := count(t, pool, `SELECT count(*) FROM pooler_exec WHERE job_id = 'yearly'`); n <= before {
			return fmt.Errorf("%d executions of yearly, %d before the trigger", n, before)
		}
		return nil
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestOperatorCommandsLeaveSharedSessionsAlone: an operator command run
// through a transaction pooler without database.listen_url must not SET
// anything on the server sessions the pooler shares with other clients
// (found by the adversarial pass: a database default statement_timeout of
// 30s became 0 on a shared session after one `locks list`). Directly, a
// command still pins its own session.
func TestOperatorCommandsLeaveSharedSessionsAlone(t *testing.T) {
	direct := pgtest.NewDB(t)
	pool := testPool(t, direct)
	ctx := context.Background()
	var dbname string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbname); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{dbname}.Sanitize()+` SET statement_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 2)
	pooled := b.Through(t, direct)
	env := []string{"STUDIO_DATABASE_URL=" + withPassword(pooled)}
	for range 3 {
		operator(t, env, "locks", "list")
		operator(t, env, "replicas", "list", "-o", "json")
	}
	other := testPool(t, pooled)
	for i := range 12 {
		var st string
		if err := other.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		if st != "30s" {
			t.Fatalf("read %d: statement_timeout %q on a server session the pooler shares, want the database's 30s", i, st)
		}
	}
}
