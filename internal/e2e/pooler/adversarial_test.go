package e2epooler

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/testkit/pgbouncer"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
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
	// The jobs run as the replica's role (database.sql_as_replica) on the
	// listen URL's sessions, which is what this test is about.
	conf := fmt.Sprintf(`database:
  sql_as_replica: true
jobs:
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

// TestSessionCommandsRefuseATransactionPooler: `migrate up` (goose's
// session advisory lock) and `events` (LISTEN) need a session of their
// own. Through PgBouncer in transaction mode without database.listen_url,
// three concurrent `migrate up` of an empty database ran their
// migrations at once (duplicate key in pg_type), failed with "failed to
// unlock session", or left goose's advisory lock on a server session of
// the pooler, where it made later migrations wait; `events --follow`
// said "listening on the bus" and never printed a message. Both must
// refuse (exit 2), naming database.listen_url, and leave nothing behind.
func TestSessionCommandsRefuseATransactionPooler(t *testing.T) {
	direct := pgtest.NewEmptyDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	pooled := withPassword(b.Through(t, direct))
	pool := testPool(t, direct)
	env := []string{"STUDIO_DATABASE_URL=" + pooled}
	type result struct {
		out  string
		code int
	}
	results := make(chan result, 3)
	for range 3 {
		go func() {
			out, errOut, code := studioctlBin.RunEnv(t, env, "migrate", "up")
			results <- result{out + errOut, code}
		}()
	}
	for range 3 {
		r := <-results
		if r.code != 2 || !strings.Contains(r.out, "database.listen_url (STUDIO_DATABASE_LISTEN_URL)") || strings.Contains(r.out, secret) {
			t.Errorf("migrate up through the transaction pooler: exit %d, want 2 naming database.listen_url without the password:\n%s", r.code, r.out)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); n != 0 {
		t.Errorf("%d advisory locks left on the database after migrate up through the pooler", n)
	}
	// With the listen URL, migrate up migrates over it.
	lenv := append(env, "STUDIO_DATABASE_LISTEN_URL="+withPassword(direct))
	operator(t, lenv, "migrate", "up")

	out, errOut, code := studioctlBin.RunEnv(t, env, "events", "--wait", "2s")
	if code != 2 || !strings.Contains(out+errOut, "database.listen_url (STUDIO_DATABASE_LISTEN_URL)") || strings.Contains(out+errOut, secret) {
		t.Errorf("events through the transaction pooler: exit %d, want 2 naming database.listen_url without the password:\n%s%s", code, out, errOut)
	}
	// With the listen URL, events --raw hears a NOTIFY sent through the pooler
	// (without --raw it prints the decoded event stream, not bus messages).
	done := make(chan result, 1)
	go func() {
		out, errOut, code := studioctlBin.RunEnv(t, lenv, "events", "--raw", "--wait", "20s", "--count", "1", "-o", "json")
		done <- result{out + errOut, code}
	}()
	pooledPool := testPool(t, b.Through(t, direct))
	var r result
	replicaproc.Eventually(t, 20*time.Second, "events to print a NOTIFY sent through the pooler", func() error {
		select {
		case r = <-done:
			return nil
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		_, err := pooledPool.Exec(ctx, `SELECT pg_notify('studio', '{"v":1,"type":"signal","kind":"probe"}')`)
		if err != nil {
			return err
		}
		return fmt.Errorf("no message yet")
	})
	if r.code != 0 || !strings.Contains(r.out, `"probe"`) {
		t.Errorf("events with the listen URL: exit %d:\n%s", r.code, r.out)
	}
}

// TestAReadOnlyListenURLWaitsForAWritablePrimary: a replica that reaches
// only a read-only server waits at start (docs/failover.md), and the
// heartbeat registers over database.listen_url. A listen URL that
// reaches a standby (here: a role whose default_transaction_read_only is
// on, which the check reads the same way) exited 1 at once ("cannot
// execute LISTEN during recovery") while database.url on a standby
// waits. It must wait, claim nothing, fail /readyz, and start once the
// listen URL's server accepts writes.
func TestAReadOnlyListenURLWaitsForAWritablePrimary(t *testing.T) {
	direct := pgtest.NewDB(t)
	pool := testPool(t, direct)
	ctx := context.Background()
	role := "ro_listen_" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""))
	if _, err := pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN SUPERUSER`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	if _, err := pool.Exec(ctx, `ALTER ROLE `+role+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	listen := strings.Replace(direct, "postgres://postgres@", "postgres://"+role+":"+secret+"@", 1)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	p := studioctlBin.Start(t, replicaproc.Options{
		ID: "ro-listen", DatabaseURL: withPassword(b.Through(t, direct)), FailOnRace: true,
		Env: []string{"STUDIO_DATABASE_LISTEN_URL=" + listen},
	})
	replicaproc.Eventually(t, exitWithin, "the replica to wait for a writable listen URL", func() error {
		if p.Exited() {
			t.Fatalf("the replica exited %d instead of waiting:\n%s", p.State().ExitCode(), lastLines(p.Stderr(), 5))
		}
		if !p.Logged("waiting for a writable primary") {
			return fmt.Errorf("not waiting yet")
		}
		return nil
	})
	if n := count(t, pool, `SELECT count(*) FROM studio_replica`); n != 0 {
		t.Errorf("%d replica rows while waiting, want 0", n)
	}
	if _, err := pool.Exec(ctx, `ALTER ROLE `+role+` RESET default_transaction_read_only`); err != nil {
		t.Fatal(err)
	}
	p.WaitReady(t)
	if strings.Contains(p.Stderr(), secret) {
		t.Error("the replica logged the password")
	}
}

// TestListenURLMistakesNameTheKey: a listen URL equal to a pooled
// database.url was refused with "set database.listen_url", which is set;
// an unreachable listen URL failed with a connection error that did not
// say which of the two URLs it was. Both must name database.listen_url:
// the first is a configuration (exit 2), the second an unreachable
// database (exit 1).
func TestListenURLMistakesNameTheKey(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	pooled := withPassword(b.Through(t, direct))
	closed := withPassword(strings.Replace(b.Through(t, direct), fmt.Sprintf(":%d/", b.Port), ":1/", 1))
	for _, c := range []struct {
		name, listen string
		code         int
		want         string
	}{
		{"the pooled url itself", pooled, 2, "database.listen_url (STUDIO_DATABASE_LISTEN_URL) is database.url itself"},
		{"a closed port", closed, 1, "database.listen_url (STUDIO_DATABASE_LISTEN_URL): "},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := studioctlBin.Start(t, replicaproc.Options{ID: "listen-mistake", DatabaseURL: pooled,
				Env: []string{"STUDIO_DATABASE_LISTEN_URL=" + c.listen}, FailOnRace: true})
			if code := p.WaitExit(t, exitWithin); code != c.code {
				t.Errorf("run exited %d, want %d", code, c.code)
			}
			if out := p.Stderr(); !strings.Contains(out, c.want) || strings.Contains(out, secret) {
				t.Errorf("run does not say %q, or shows the password:\n%s", c.want, out)
			}
		})
	}
}

// TestDoctorWarnsOfTimeoutsThePooledSessionsCannotPin: a replica pins
// statement_timeout, lock_timeout and idle_in_transaction_session_timeout
// to 0 on every session it opens (db.pinnedSettings: a sql job could set
// a role default of 1ms), but behind a transaction pooler its pool runs
// without that SET (db.ForPooler). With ALTER DATABASE ... SET
// statement_timeout = '1ms' a replica through the pooler exited 1 at
// start ("check lock table shedlock: canceling statement due to statement
// timeout"), where a direct one runs. The fix is the pooler's
// (connect_query); doctor must say so instead of reporting ok.
func TestDoctorWarnsOfTimeoutsThePooledSessionsCannotPin(t *testing.T) {
	direct := pgtest.NewDB(t)
	pool := testPool(t, direct)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if _, err := pool.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET statement_timeout = '5min'`); err != nil {
		t.Fatal(err)
	}
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	env := []string{"STUDIO_DATABASE_URL=" + withPassword(b.Through(t, direct)), "STUDIO_DATABASE_LISTEN_URL=" + withPassword(direct)}
	status, detail, _ := doctorCheck(t, env, "pooler")
	if status != "warn" || !strings.Contains(detail, "statement_timeout=5min") {
		t.Errorf("doctor pooler: %s %q, want warn naming statement_timeout=5min", status, detail)
	}
}

// TestDoctorSaysAListenURLOfAnotherDatabaseIsOne: run refuses a listen
// URL that reaches another database (TestABadListenURLIsRefused); doctor
// failed its bus check there with the hint of a transaction pooler
// ("give the bus a direct connection with database.listen_url"), which is
// what the operator had done. It must say that the two URLs must reach
// one database.
func TestDoctorSaysAListenURLOfAnotherDatabaseIsOne(t *testing.T) {
	direct := pgtest.NewDB(t)
	other := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 3)
	env := []string{"STUDIO_DATABASE_URL=" + withPassword(b.Through(t, direct)), "STUDIO_DATABASE_LISTEN_URL=" + withPassword(other)}
	out, errOut, _ := studioctlBin.RunEnv(t, env, "doctor", "-o", "json")
	if strings.Contains(out+errOut, secret) {
		t.Error("doctor shows the password")
	}
	var rs []struct{ Check, Status, Detail, Hint string }
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("doctor -o json: %v\n%s%s", err, out, errOut)
	}
	for _, r := range rs {
		if r.Check == "bus" && (r.Status != "fail" || !strings.Contains(r.Hint, "same PostgreSQL database")) {
			t.Errorf("doctor bus: %s %q, hint %q: want fail saying both URLs must reach the same database", r.Status, r.Detail, r.Hint)
		}
	}
}

// TestAStatementPoolerIsRefusedWithAListenURL: PgBouncer in statement
// mode refuses transactions. With database.listen_url set, run took it
// for a transaction pooler, became ready, and then failed every lock
// call, history write and lease round ("transaction blocks not allowed in
// statement pooling mode"); doctor reported ok. run must refuse it (exit
// 2) before it writes anything, and doctor fail.
func TestAStatementPoolerIsRefusedWithAListenURL(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Statement, 3)
	pool := testPool(t, direct)
	env := []string{"STUDIO_DATABASE_LISTEN_URL=" + withPassword(direct)}
	p := studioctlBin.Start(t, replicaproc.Options{ID: "statement", DatabaseURL: withPassword(b.Through(t, direct)), Env: env, FailOnRace: true})
	if code := p.WaitExit(t, exitWithin); code != 2 {
		t.Errorf("run exited %d, want 2", code)
	}
	if out := p.Stderr(); !strings.Contains(out, "pool_mode=statement") || strings.Contains(out, secret) {
		t.Errorf("the refusal does not name pool_mode=statement, or shows the password:\n%s", out)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_replica`); n != 0 {
		t.Errorf("%d replica rows after the refusal, want 0", n)
	}
	status, detail, code := doctorCheck(t, append(env, "STUDIO_DATABASE_URL="+withPassword(b.Through(t, direct))), "pooler")
	if status != "fail" || code != 1 || !strings.Contains(detail, "statement mode") {
		t.Errorf("doctor pooler: %s %q (exit %d), want fail naming the statement mode", status, detail, code)
	}
}

// TestAStarvedSessionPoolerFailsTheStartInTime: PgBouncer in session mode
// with one server connection: the pooler check's first connection holds
// it, and the second one's statements wait in PgBouncer. The start hung
// without a log line until PgBouncer's query_wait_timeout (120 s), and a
// SIGINT meanwhile did nothing. It must fail (exit 1) within the check's
// bound, saying that the pooler has no free server connection.
func TestAStarvedSessionPoolerFailsTheStartInTime(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Session, 1)
	p := studioctlBin.Start(t, replicaproc.Options{ID: "starved", DatabaseURL: withPassword(b.Through(t, direct)), FailOnRace: true})
	if code := p.WaitExit(t, 45*time.Second); code != 1 {
		t.Errorf("run exited %d, want 1", code)
	}
	if out := p.Stderr(); !strings.Contains(out, "no free server connection") || strings.Contains(out, secret) {
		t.Errorf("the error does not name the starved pooler, or shows the password:\n%s", out)
	}
}
