package tasks_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/tasks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// newPool opens a pool of at most maxConns connections on a fresh database
// with a table probe(id int).
func newPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	url := pgtest.NewDB(t)
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	ctx := context.Background()
	pool, err := db.OpenConfig(ctx, cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE probe (id int)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func countProbe(t *testing.T, pool *pgxpool.Pool, where string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM probe WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNoSleeper polls until no other session of the database runs a
// statement containing text, and fails after within.
func waitNoSleeper(t *testing.T, pool *pgxpool.Pool, text string, within time.Duration) {
	t.Helper()
	const q = `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND state = 'active' AND strpos(query, $1) > 0`
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), q, text).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still runs %q after %v", text, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSleeper polls until another session of the database runs a statement
// containing text.
func waitSleeper(t *testing.T, pool *pgxpool.Pool, text string) {
	t.Helper()
	const q = `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND state = 'active' AND strpos(query, $1) > 0`
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), q, text).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q did not start", text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSQLKind(t *testing.T) {
	if got := (tasks.SQL{}).Kind(); got != "sql" {
		t.Errorf("Kind() = %q", got)
	}
}

func TestSQLCommitsAndReturnsTheCommandTag(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO probe SELECT generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	res := tasks.SQL{Statement: `DELETE FROM probe WHERE id <= 3`, DB: pool}.Run(ctx, testEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	if res.Output != "DELETE 3" {
		t.Errorf("output = %q, want %q", res.Output, "DELETE 3")
	}
	if n := countProbe(t, pool, "true"); n != 2 {
		t.Errorf("%d rows left, want 2: the delete was not committed", n)
	}
}

func TestSQLReturnsThePostgreSQLError(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	tests := []struct {
		name      string
		statement string
		code      string
	}{
		{"an unknown table fails", `DELETE FROM no_such_table`, "42P01"},
		{"a failing statement after an insert rolls the insert back", `INSERT INTO probe VALUES (7); SELECT 1/0`, "22012"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tasks.SQL{Statement: tt.statement, DB: pool}.Run(context.Background(), testEnv)
			var pgErr *pgconn.PgError
			if !errors.As(res.Err, &pgErr) || pgErr.Code != tt.code {
				t.Fatalf("error = %v, want SQLSTATE %s", res.Err, tt.code)
			}
			t.Logf("error: %v", res.Err)
			if n := countProbe(t, pool, "id = 7"); n != 0 {
				t.Errorf("a row of the failed transaction is visible")
			}
		})
	}
}

func TestSQLSetsStatementTimeoutOnlyForItsRun(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 1) // one connection: the old code ran the task on it
	const requireTimeout = `DO $$ BEGIN
		IF current_setting('statement_timeout') = '0' THEN RAISE EXCEPTION 'no statement_timeout'; END IF;
	END $$`
	tests := []struct {
		name        string
		statement   string
		deadline    bool
		wantTimeout bool
	}{
		{"a ctx with a deadline sets statement_timeout", requireTimeout, true, true},
		{"the timeout survives a COMMIT in the statement", "COMMIT; " + requireTimeout, true, true},
		{"the timeout survives a ROLLBACK in the statement", "ROLLBACK; " + requireTimeout, true, true},
		{"a ctx without a deadline leaves it alone", requireTimeout, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			res := tasks.SQL{Statement: tt.statement, DB: pool}.Run(ctx, testEnv)
			if got := res.Err == nil; got != tt.wantTimeout {
				t.Errorf("statement_timeout set = %v, want %v (error: %v)", got, tt.wantTimeout, res.Err)
			}
			var after string
			if err := pool.QueryRow(context.Background(), `SHOW statement_timeout`).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after != "0" {
				t.Errorf("statement_timeout = %q after the run, want the session default 0", after)
			}
		})
	}
}

// session is what a statement could change on a session and what the
// replica's history writes and lock acquisition depend on.
type session struct {
	StatementTimeout, SearchPath, ReadOnly string
	CurrentUser, SessionUser               string
	TempTables, AdvisoryLocks              int
}

const sessionQuery = `SELECT current_setting('statement_timeout'), current_setting('search_path'),
	current_setting('default_transaction_read_only'), current_user, session_user,
	(SELECT count(*) FROM pg_class WHERE relpersistence = 't' AND pg_table_is_visible(oid)),
	(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())`

func readSession(t *testing.T, pool *pgxpool.Pool) session {
	t.Helper()
	var s session
	err := pool.QueryRow(context.Background(), sessionQuery).Scan(&s.StatementTimeout, &s.SearchPath,
		&s.ReadOnly, &s.CurrentUser, &s.SessionUser, &s.TempTables, &s.AdvisoryLocks)
	if err != nil {
		t.Fatalf("read the pool's session: %v", err)
	}
	return s
}

// Defect 5 of issue 7: a task's SET, SET ROLE and the like stayed on the
// pooled connection, and the replica's own writes then failed.
func TestSQLSessionChangesEndWithTheRun(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 1) // one connection: the old code ran the task on it
	want := readSession(t, pool)
	tests := []struct {
		name      string
		statement string
	}{
		// 1 s, not 1 ms: the run's own COMMIT comes after it, and a
		// loaded machine took more than 1 ms for it (CI).
		{"SET statement_timeout", `SET statement_timeout = 1000`},
		{"SET statement_timeout after a COMMIT", `COMMIT; SET statement_timeout = 1000`},
		{"SET search_path", `SET search_path = nowhere`},
		{"SET search_path after a ROLLBACK", `ROLLBACK; SET search_path = nowhere`},
		{"SET ROLE", `SET ROLE pg_monitor`},
		{"SET ROLE after a COMMIT", `COMMIT; SET ROLE pg_monitor`},
		{"SET SESSION AUTHORIZATION", `SET SESSION AUTHORIZATION pg_monitor`},
		{"a read-only default", `COMMIT; SET default_transaction_read_only = on`},
		{"a temporary table", `CREATE TEMP TABLE leftover (id int)`},
		{"a session advisory lock", `SELECT pg_advisory_lock(7)`},
		{"LISTEN and PREPARE", `COMMIT; LISTEN studio; PREPARE leftover AS SELECT 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res := tasks.SQL{Statement: tt.statement, DB: pool}.Run(ctx, testEnv)
			if res.Err != nil {
				t.Fatalf("Run: %v", res.Err)
			}
			if got := readSession(t, pool); got != want {
				t.Errorf("the pool's session after the task\n got %+v\nwant %+v", got, want)
			}
			// What the replica does next: a write with default settings.
			if _, err := pool.Exec(ctx, `INSERT INTO probe VALUES (1)`); err != nil {
				t.Errorf("a write on the pool after the task: %v", err)
			}
		})
	}
}

// backendGone polls until no session has process id pid.
func backendGone(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task's session %d is still there after 5s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSQLRunsOnAConnectionOfItsOwn(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Hold the pool's only connection: a task that needed one would wait
	// for it until its deadline.
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	acquired := pool.Stat().AcquireCount()
	var heldPID int
	if err := held.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&heldPID); err != nil {
		t.Fatal(err)
	}
	res := tasks.SQL{Statement: `INSERT INTO probe SELECT pg_backend_pid()`, DB: pool}.Run(ctx, testEnv)
	if res.Err != nil {
		t.Fatalf("Run with the pool's connection taken: %v", res.Err)
	}
	var taskPID int
	if err := held.QueryRow(ctx, `SELECT id FROM probe`).Scan(&taskPID); err != nil {
		t.Fatal(err)
	}
	if taskPID == heldPID {
		t.Fatalf("the task ran on the pool's connection %d", heldPID)
	}
	if n := pool.Stat().AcquireCount() - acquired; n != 0 {
		t.Errorf("the task acquired %d of the pool's connections, want none", n)
	}
	held.Release()
	backendGone(t, pool, taskPID)
}

// The run's timeout holds even when the statement lifts statement_timeout
// or ends the transaction that held it: ctx cancels the statement.
func TestSQLTimeoutHoldsWhenTheStatementLiftsIt(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	tests := []struct {
		name      string
		statement string
	}{
		{"SET statement_timeout = 0", `SET statement_timeout = 0; SELECT pg_sleep(100.1)`},
		{"SET LOCAL statement_timeout = 0", `SET LOCAL statement_timeout = 0; SELECT pg_sleep(100.2)`},
		{"RESET ALL after a COMMIT", `COMMIT; RESET ALL; SELECT pg_sleep(100.3)`},
		{"set_config in a DO block", `DO $$ BEGIN PERFORM set_config('statement_timeout', '0', false); PERFORM pg_sleep(100.4); END $$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			res := tasks.SQL{Statement: tt.statement, DB: pool}.Run(ctx, testEnv)
			elapsed := time.Since(start)
			if elapsed > slack {
				t.Errorf("Run returned after %v", elapsed)
			}
			// The server's statement_timeout, where the statement left it,
			// may fire just before ctx does.
			var pgErr *pgconn.PgError
			if !errors.Is(res.Err, context.DeadlineExceeded) && !(errors.As(res.Err, &pgErr) && pgErr.Code == "57014") {
				t.Fatalf("error = %v, want the deadline or a statement timeout", res.Err)
			}
			t.Logf("error after %v: %v", elapsed, res.Err)
			waitNoSleeper(t, pool, "pg_sleep(100.", 5*time.Second)
		})
	}
}

func TestSQLDeadlineStopsTheStatementAndRollsBack(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := tasks.SQL{Statement: `INSERT INTO probe VALUES (42); SELECT pg_sleep(10)`, DB: pool}.Run(ctx, testEnv)
	elapsed := time.Since(start)

	if elapsed > slack {
		t.Errorf("Run returned after %v", elapsed)
	}
	var pgErr *pgconn.PgError
	if !errors.Is(res.Err, context.DeadlineExceeded) && !(errors.As(res.Err, &pgErr) && pgErr.Code == "57014") {
		t.Fatalf("error = %v, want a deadline or a statement timeout", res.Err)
	}
	t.Logf("error after %v: %v", elapsed, res.Err)
	w := time.Now()
	waitNoSleeper(t, pool, "pg_sleep(10)", 5*time.Second)
	t.Logf("server stopped after %v more", time.Since(w))
	if n := countProbe(t, pool, "id = 42"); n != 0 {
		t.Errorf("the insert before the sleep is visible: not rolled back")
	}
}

func TestSQLCancelStopsTheStatementOnTheServer(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan tasks.Result, 1)
	go func() {
		done <- tasks.SQL{Statement: `INSERT INTO probe VALUES (43); SELECT pg_sleep(10)`, DB: pool}.Run(ctx, testEnv)
	}()
	waitSleeper(t, pool, "pg_sleep(10)")
	lockLost := errors.New("lock lost")
	stopped := time.Now()
	cancel(lockLost)
	res := <-done

	if elapsed := time.Since(stopped); elapsed > slack {
		t.Errorf("Run returned %v after the cancel", elapsed)
	}
	if !errors.Is(res.Err, lockLost) {
		t.Fatalf("error = %v, want one wrapping the cause", res.Err)
	}
	t.Logf("error: %v", res.Err)
	// Without a deadline there is no statement_timeout: only the cancel
	// request stops the sleep before its 10 s.
	waitNoSleeper(t, pool, "pg_sleep(10)", 5*time.Second)
	if n := countProbe(t, pool, "id = 43"); n != 0 {
		t.Errorf("the insert before the sleep is visible: not rolled back")
	}
}

func TestSQLWithoutDatabaseFails(t *testing.T) {
	res := tasks.SQL{Statement: "SELECT 1"}.Run(context.Background(), testEnv)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "no database") {
		t.Errorf("error = %v", res.Err)
	}
}

// beginOnly can begin a transaction but offers no configuration to open a
// connection of its own from.
type beginOnly struct{}

func (beginOnly) Begin(context.Context) (pgx.Tx, error) { return nil, errors.New("must not be called") }

func TestSQLRefusesAHandleWithoutAConfiguration(t *testing.T) {
	res := tasks.SQL{Statement: "SELECT 1", DB: beginOnly{}}.Run(context.Background(), testEnv)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "cannot open a connection of its own") {
		t.Errorf("error = %v", res.Err)
	}
}
