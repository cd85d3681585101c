package host_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// testApp names the test's own sessions, which a fault spares.
const testApp = "start-fault-test"

// testConn is a session of the test's own, apart from the replica's.
func testConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = testApp
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// testPool is a pool of the test's own sessions.
func testPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = testApp
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// blockTheRunnerStart holds studio_job_status in an open transaction: the
// replica's start registers, then blocks in the runner's first statement
// on it (the removal of undeclared jobs' rows), so a fault lands there,
// after the registration, every time. release ends the transaction.
func blockTheRunnerStart(t *testing.T, url string) (waiting func() bool, release func()) {
	t.Helper()
	blocker := testConn(t, url)
	tx, err := blocker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `LOCK TABLE studio_job_status IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	admin := testConn(t, url)
	waiting = func() bool {
		var n int
		err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name <> $1 AND wait_event_type = 'Lock' AND query LIKE '%studio_job_status%'`, testApp).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	return waiting, func() { tx.Rollback(context.Background()) }
}

// terminateReplicaBackends ends every session of the test database but
// the test's own, as pg_terminate_backend does in a fault (57P01).
func terminateReplicaBackends(t *testing.T, url string) int {
	t.Helper()
	var n int
	err := testConn(t, url).QueryRow(t.Context(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND application_name <> $1 AND pid <> pg_backend_pid()) t`, testApp).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startInBackground runs h as `studioctl run` does; the returned channel
// says how it ended.
func startInBackground(h *host.Host, sigs <-chan os.Signal) <-chan error {
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	return done
}

const retryLine = "start: a database error that may pass"

// blockedStart is a host whose start is blocked in its runner (after it
// registered) until release, its log, and its run in the background.
type blockedStart struct {
	h       *host.Host
	logs    *syncBuffer
	sigs    chan os.Signal
	done    <-chan error
	release func()
}

// startRunnerBlocked runs a host with o on url (o's ConnString and Logger are
// set here) whose runner's start blocks (blockTheRunnerStart), and waits
// until it does. The block is released when the test ends, if not before.
func startRunnerBlocked(t *testing.T, url string, o host.Options) *blockedStart {
	t.Helper()
	waiting, release := blockTheRunnerStart(t, url)
	t.Cleanup(release)
	b := &blockedStart{logs: &syncBuffer{}, sigs: make(chan os.Signal, 1), release: release}
	o.ConnString, o.Logger = url, slog.New(slog.NewJSONHandler(b.logs, nil))
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	b.h, b.done = h, startInBackground(h, b.sigs)
	waitUntil(t, 60*time.Second, "the start to block in the runner, registered", waiting)
	return b
}

// A replica whose backends are terminated while it starts, after it
// registered (the nemesis's terminate-backends, or a PostgreSQL restart),
// used to exit 1 with "start runner: ... 57P01". It now stops what it had
// started, says so once, starts again over its own row, and ends ready:
// one incarnation, no crash recorded of itself.
func TestAStartWhoseBackendsAreTerminatedMidwayRetriesAndEndsReady(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := testPool(t, url)
	b := startRunnerBlocked(t, url, host.Options{ID: "start-fault", DrainDelay: host.NoDrainDelay})
	h, logs, sigs, done, release := b.h, b.logs, b.sigs, b.done, b.release
	if s := replicaState(t, pool, "start-fault"); s != "starting" {
		t.Fatalf("state while the runner starts = %q, want starting", s)
	}
	if n := terminateReplicaBackends(t, url); n == 0 {
		t.Fatal("terminated no backend of the replica")
	}
	release()
	waitUntil(t, 60*time.Second, "the replica to be ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the replica ended instead of retrying: %v", err)
		default:
		}
		return h.State() == replicas.StateReady
	})
	out := logs.String()
	if n := strings.Count(out, retryLine); n != 1 {
		t.Errorf("%d retry lines, want 1:\n%s", n, out)
	}
	if why, _ := logAttr(out, retryLine, "error"); !strings.Contains(why, "57P01") {
		t.Errorf("the retry line's error %q does not name the terminated connection (57P01)", why)
	}
	if !strings.Contains(out, "start: the database errors passed") {
		t.Error("no line says the start went through")
	}
	in, err := replicas.Get(t.Context(), pool, "start-fault")
	if err != nil {
		t.Fatal(err)
	}
	if in.State != replicas.StateReady || in.LastCrashAt != nil || strings.Contains(out, "ended without a recorded stop") {
		t.Errorf("row after the retried start: %+v; want ready and no crash of its own recorded", in)
	}
	if code, body := get(t, "http://"+h.Addr()+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q", code, body)
	}
	sigs <- os.Interrupt
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if s := replicaState(t, pool, "start-fault"); s != "stopped" {
		t.Errorf("state after the drain = %q, want stopped", s)
	}
}

// A database that turns read-only while a replica starts (a promoted
// standby's gap, a fenced primary) fails its writes with 25006: the start
// keeps trying, answers /livez 200 and /readyz 503 with the reason on its
// address meanwhile, and ends ready once the database accepts writes. A
// drain while it waits ends it with exit 0 (TestADrainWhileAStartWaitsOutADatabaseErrorEndsCleanly).
func TestAStartOnADatabaseTurnedReadOnlyKeepsTryingAndEndsReady(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := testPool(t, url)
	b := startRunnerBlocked(t, url, host.Options{ID: "start-read-only", DrainDelay: host.NoDrainDelay})
	h, logs, sigs, done, release := b.h, b.logs, b.sigs, b.done, b.release
	if _, err := pool.Exec(t.Context(), setReadOnly); err != nil {
		t.Fatal(err)
	}
	terminateReplicaBackends(t, url)
	release()
	var addr string
	waitUntil(t, 60*time.Second, "two retries", func() bool {
		addr, _ = logAttr(logs.String(), retryLine, "listen")
		return strings.Count(logs.String(), retryLine) >= 2
	})
	if code, body := get(t, "http://"+addr+"/readyz"); code != 503 || !strings.Contains(body, "waiting out a database error") || !strings.Contains(body, "read-only") {
		t.Errorf("/readyz while retrying = %d %q", code, body)
	}
	if code, _ := get(t, "http://"+addr+"/livez"); code != 200 {
		t.Errorf("/livez while retrying = %d", code)
	}
	if _, err := pool.Exec(t.Context(), strings.Replace(setReadOnly, "= on", "= off", 1)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 60*time.Second, "the replica to be ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the replica ended instead of retrying: %v", err)
		default:
		}
		return h.State() == replicas.StateReady
	})
	if h.Addr() != addr {
		t.Errorf("ready on %s, but answered the probes on %s while retrying", h.Addr(), addr)
	}
	sigs <- os.Interrupt
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// A drain while the start waits out a database error ends it cleanly:
// Wait says nil (exit 0), and nothing is left running (the package's
// goroutine leak check).
func TestADrainWhileAStartWaitsOutADatabaseErrorEndsCleanly(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := testPool(t, url)
	b := startRunnerBlocked(t, url, host.Options{ID: "start-drained"})
	logs, sigs, done, release := b.logs, b.sigs, b.done, b.release
	if _, err := pool.Exec(t.Context(), setReadOnly); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), strings.Replace(setReadOnly, "= on", "= off", 1))
	terminateReplicaBackends(t, url)
	release()
	waitUntil(t, 60*time.Second, "a retry", func() bool { return strings.Contains(logs.String(), retryLine) })
	sigs <- os.Interrupt
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a drain while retrying ended with %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not end the retrying start")
	}
}

// A clean stop whose state write loses its connection (a PostgreSQL
// restart, a terminated backend) used to leave the row live: a restart
// with the same id was refused as a live duplicate until its heartbeat
// was 15 s old. The stop write is now tried again within its 5 s.
func TestAStopWhoseStateWriteLosesItsConnectionStillRecordsStopped(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := testPool(t, url)
	ready := make(chan string, 1)
	var logs syncBuffer
	h, err := host.New(host.Options{ConnString: url, ID: "stop-fault", DrainDelay: host.NoDrainDelay,
		HeartbeatEvery: time.Hour, // no heartbeat waits on the test's row lock
		OnReady:        func(a string) { ready <- a },
		Logger:         slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	done := startInBackground(h, sigs)
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the replica ended before ready: %v", err)
	}
	// The test holds the row: each state write of the drain waits on it,
	// and its backend is terminated there.
	blocker := testConn(t, url)
	tx, err := blocker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM studio_replica WHERE id = 'stop-fault' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	admin := testConn(t, url)
	terminated := map[int32]bool{}
	terminateNextStateWrite := func(what string) {
		var pid int32
		waitUntil(t, 60*time.Second, what+" to wait on the row", func() bool {
			err := admin.QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
AND wait_event_type = 'Lock' AND query LIKE 'UPDATE studio_replica SET state%' AND NOT pid = ANY($1)`, keys(terminated)).Scan(&pid)
			return err == nil
		})
		if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		terminated[pid] = true
	}
	sigs <- os.Interrupt
	terminateNextStateWrite("the draining write")
	terminateNextStateWrite("the stopped write")
	tx.Rollback(t.Context())
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if s := replicaState(t, pool, "stop-fault"); s != "stopped" {
		t.Fatalf("state after a stop whose write lost its connection = %q, want stopped\n%s", s, logs.String())
	}
	// So a restart with the same id is not refused.
	runUntilReady(t, host.Options{ConnString: url, ID: "stop-fault"})
}

func keys(m map[int32]bool) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
