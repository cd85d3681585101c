package db_test

// Adversarial tests of db.OutcomeUnknown against the errors pgx v5 really
// returns from a real PostgreSQL, not hand-made ones: each failure is
// produced by the fault it stands for, and the test checks both the
// classification and, where the statement wrote, whether it ran.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// outcomePollEvery and outcomeWaitFor bound the polls of these tests; a
// poll checks the server's state, it is not a synchronisation by time.
const (
	outcomePollEvery = 5 * time.Millisecond
	outcomeWaitFor   = 20 * time.Second
)

func outcomeEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(outcomeWaitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", outcomeWaitFor, what)
		}
		time.Sleep(outcomePollEvery)
	}
}

func outcomePool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitActive waits until a backend of the test's database runs a statement
// containing marker, and returns its pid.
func waitActive(t *testing.T, admin *pgxpool.Pool, marker string) int32 {
	t.Helper()
	var pid int32
	outcomeEventually(t, "the statement "+marker+" to be active", func() bool {
		err := admin.QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid() LIMIT 1`, marker).Scan(&pid)
		return err == nil
	})
	return pid
}

// A statement deadline that passes while the server works on the
// statement: pgx sends a cancel request, closes the connection and returns
// a timeout (pgconn.asyncClose). The cancel is best effort (a statement
// that already committed, or waits for a synchronous standby, keeps its
// commit), so the outcome is unknown.
func TestAStatementDeadlineDuringAQueryIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	pool := outcomePool(t, pgtest.NewDB(t), 4)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE o (v int)`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := pool.Exec(ctx, `INSERT INTO o SELECT $1::int FROM pg_sleep(1) /* deadline-marker */`, 1)
	if err == nil {
		t.Fatal("a statement past its deadline succeeded")
	}
	if !pgconn.Timeout(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v (%T): want pgconn's timeout wrapping context.DeadlineExceeded", err, err)
	}
	if !db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v) = false, want true: the statement may have run", err)
	}
}

// A context already done before the statement is sent: nothing left, a
// known failure.
func TestAContextDoneBeforeTheStatementIsAKnownFailure(t *testing.T) {
	t.Parallel()
	pool := outcomePool(t, pgtest.NewDB(t), 4)
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = conn.Exec(ctx, `SELECT 1`)
	if err == nil {
		t.Fatal("a statement with a done context succeeded")
	}
	if db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v) = true, want false: nothing was sent", err)
	}
}

// A connection that cannot be made (a closed port), through a lazy pool as
// the runner's: pgconn.ConnectError, a known failure.
func TestAConnectionThatCannotBeMadeIsAKnownFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pool := outcomePool(t, "postgres://u:pw@"+addr+"/x?connect_timeout=5", 2)
	_, err = pool.Exec(t.Context(), `SELECT 1`)
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T): want a pgconn.ConnectError", err, err)
	}
	if db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v) = true, want false", err)
	}
}

// A closed connection used again ("conn closed"): nothing sent.
func TestAClosedConnectionIsAKnownFailure(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())
	_, err = conn.Exec(t.Context(), `SELECT 1`)
	if err == nil {
		t.Fatal("a closed connection ran a statement")
	}
	if db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v) = true, want false: nothing was sent", err)
	}
}

// A statement the server refused with an ERROR did not run: a write in a
// read-only transaction, as on a standby.
func TestAStatementTheServerRefusedIsAKnownFailure(t *testing.T) {
	t.Parallel()
	pool := outcomePool(t, pgtest.NewDB(t), 4)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE o (v int)`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), `SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(t.Context(), `INSERT INTO o VALUES ($1)`, 1)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("error %v: want ERROR 25006", err)
	}
	if db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v) = true, want false", err)
	}
	if _, err := conn.Exec(t.Context(), `RESET default_transaction_read_only`); err != nil {
		t.Fatal(err)
	}
}

// A session the server ends while the statement runs (pg_terminate_backend,
// a fast shutdown): FATAL 57P01, unknown.
func TestASessionEndedByTheServerIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	pool := outcomePool(t, url, 4)
	admin := outcomePool(t, url, 2)
	errc := make(chan error, 1)
	go func() {
		_, err := pool.Exec(context.Background(), `SELECT pg_sleep($1) /* terminate-marker */`, 30)
		errc <- err
	}()
	pid := waitActive(t, admin, "terminate-marker")
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Severity != "FATAL" || pgErr.Code != "57P01" {
		t.Fatalf("error %v: want FATAL 57P01", err)
	}
	if !db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v) = false, want true", err)
	}
}

// A connection cut under a running statement (a reset, as a promote or a
// network fault leaves): unknown.
func TestAConnectionCutDuringAStatementIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.Port())
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	admin := outcomePool(t, url, 2)
	errc := make(chan error, 1)
	go func() {
		_, err := pool.Exec(context.Background(), `SELECT pg_sleep($1) /* cut-marker */`, 30)
		errc <- err
	}()
	pid := waitActive(t, admin, "cut-marker")
	proxy.CutAll()
	err = <-errc
	if err == nil {
		t.Fatal("a statement on a cut connection succeeded")
	}
	if !db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v (%T)) = false, want true", err, err)
	}
	_, _ = admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid)
}

// The case the change names: a session ended after the commit, when a
// synchronous standby's wait is cut short by pg_terminate_backend. The row
// is committed; the client sees the session end; the outcome must be
// unknown.
// Not parallel: it changes the harness server's synchronous_standby_names
// (with synchronous_commit = local for every other session) and puts them
// back.
func TestAFatalAfterTheCommitInASynchronousWaitIsAnUnknownOutcome(t *testing.T) {
	url := pgtest.NewDB(t)
	admin := outcomePool(t, pgtest.AdminURL(t), 2)
	reset := func() {
		ctx := context.WithoutCancel(t.Context())
		_, _ = admin.Exec(ctx, `ALTER SYSTEM RESET synchronous_standby_names`)
		_, _ = admin.Exec(ctx, `ALTER SYSTEM RESET synchronous_commit`)
		_, _ = admin.Exec(ctx, `SELECT pg_reload_conf()`)
	}
	t.Cleanup(reset)
	for _, s := range []string{
		`ALTER SYSTEM SET synchronous_commit = 'local'`,
		`ALTER SYSTEM SET synchronous_standby_names = 'no_such_standby'`,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := admin.Exec(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	pool := outcomePool(t, url, 2)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE o (v int)`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := conn.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), `INSERT INTO o VALUES ($1)`, 1)
		errc <- err
	}()
	outcomeEventually(t, "the insert to wait for the synchronous standby", func() bool {
		var ev string
		err := admin.QueryRow(t.Context(), `SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&ev)
		return err == nil && ev == "SyncRep"
	})
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	// pgx v5.12 reports the end of the session as "unexpected EOF" here
	// (extended protocol, as the lock statements) or FATAL 57P01: either
	// must be unknown.
	err = <-errc
	if err == nil {
		t.Fatal("the terminated insert succeeded")
	}
	if !db.OutcomeUnknown(err) {
		t.Fatalf("OutcomeUnknown(%v (%T)) = false, want true: the row is committed", err, err)
	}
	reset()
	var n int
	if err := admin.QueryRow(t.Context(), `SELECT 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	p2 := outcomePool(t, url, 1)
	if err := p2.QueryRow(t.Context(), `SELECT count(*) FROM o`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the FATAL: %d (%v), want 1: the insert committed before its answer was lost", n, err)
	}
}
