package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Bounds of SPEC §6 and §8 that the faults are judged by.
const (
	// unreadyWithin: a black-holed replica must fail readiness by then
	// (the silent-death detection of the bus, 10 s).
	unreadyWithin = 10 * time.Second
	// heartbeatGapLimit is the longest allowed time between two heartbeats:
	// one interval plus the deadline of a heartbeat statement (0.8 of it).
	heartbeatGapLimit = replicas.HeartbeatEvery + 4*time.Second
	// recoverWithin bounds the recovery after a fault has ended.
	recoverWithin = 30 * time.Second
	// poolHold is how long the pool-exhaustion test keeps every pool
	// connection busy.
	poolHold = 20 * time.Second
)

// TestFaults runs the fault tests that have a database each, in parallel.
// Go finishes every parallel subtest before TestFaults returns, so the
// database restart of TestReplicaRecoversFromADatabaseRestart never
// overlaps them.
func TestFaults(t *testing.T) {
	t.Run("a replica killed with SIGKILL is shown gone and crashed", testKilledReplicaIsGoneAndCrashed)
	t.Run("a replica whose backends are terminated reconnects and stays ready", testTerminatedBackends)
	t.Run("a second process with a live replica's id exits 2 and the first keeps running", testDuplicateID)
	t.Run("a paused replica whose id was taken over exits 1 without writing", testZombie)
	t.Run("a replica behind a black-holed network turns unready within 10s and recovers", testBlackhole)
	t.Run("a replica's heartbeat keeps its interval while its pool is exhausted", testPoolExhausted)
}

func testKilledReplicaIsGoneAndCrashed(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	const id = "killed"
	r := startReplica(t, dbURL, id)
	r.WaitReady(t)

	r.Signal(t, syscall.SIGKILL)
	killedAt := time.Now()
	if code := r.WaitExit(t, replicaproc.ExitTimeout); code != -1 {
		t.Fatalf("exit code after SIGKILL = %d, want -1 (killed by a signal)", code)
	}

	var in replicas.Info
	replicaproc.Eventually(t, replicas.GoneAfter+15*time.Second, "the killed replica to be gone", func() error {
		var err error
		in, err = replicas.Get(context.Background(), pool, id)
		if err != nil {
			return err
		}
		if !in.Gone {
			return fmt.Errorf("not gone: state %s, heartbeat %s ago", in.State, in.HeartbeatAge)
		}
		return nil
	})
	t.Logf("gone %s after SIGKILL (heartbeat age %s, GoneAfter %s)", (time.Since(killedAt)).Round(time.Millisecond), in.HeartbeatAge, replicas.GoneAfter)
	if !in.Crashed || in.State == replicas.StateStopped {
		t.Fatalf("replica gone but Crashed=%v, state %s; want crashed with a state other than stopped", in.Crashed, in.State)
	}

	stdout, stderr, code := studioctlBin.Run(t, dbURL, "replicas", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("studioctl replicas list -o json: exit %d\n%s", code, stderr)
	}
	var list []struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Gone    *bool  `json:"gone"`
		Crashed *bool  `json:"crashed"`
	}
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("replicas list -o json: %v\n%s", err, stdout)
	}
	if len(list) != 1 || list[0].ID != id || list[0].Gone == nil || !*list[0].Gone || list[0].Crashed == nil || !*list[0].Crashed {
		t.Fatalf("replicas list -o json: want one replica %q with \"gone\": true, \"crashed\": true; got\n%s", id, stdout)
	}
}

func testTerminatedBackends(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	const id = "terminated"
	r := startReplica(t, dbURL, id)
	addr := r.WaitReady(t)
	waitReadyz(t, addr, recoverWithin)

	before, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pids []int32
	var terminatedAt time.Time
	err = pool.QueryRow(ctx, `
SELECT coalesce(array_agg(pid ORDER BY pid), '{}'), now()
FROM (SELECT pid, pg_terminate_backend(pid) AS ok
      FROM pg_stat_activity
      WHERE application_name = 'studioctl' AND datname = current_database() AND pid <> pg_backend_pid()) s
WHERE ok`).Scan(&pids, &terminatedAt)
	if err != nil {
		t.Fatalf("terminate the replica's backends: %v", err)
	}
	// The pool (at least one), the heartbeat and the bus listener.
	if len(pids) < 3 {
		t.Fatalf("terminated %d backends %v, want at least 3 (pool, heartbeat, bus)", len(pids), pids)
	}
	t.Logf("terminated backends %v at %s", pids, terminatedAt.Format(time.RFC3339Nano))

	took := replicaproc.Eventually(t, recoverWithin, "the bus to reconnect and resync", func() error {
		n, err := replicaproc.Metric(addr, "studio_bus_reconnects_total")
		if err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("studio_bus_reconnects_total %v", n)
		}
		if !r.Logged("resync") {
			return errors.New(`no "resync" log line yet`)
		}
		return nil
	})
	t.Logf("bus reconnected and resynced %s after the termination", took.Round(time.Millisecond))
	took = waitReadyz(t, addr, recoverWithin)
	t.Logf("/readyz 200 %s later", took.Round(time.Millisecond))
	after := waitHeartbeatAfter(t, pool, id, terminatedAt, recoverWithin)
	t.Logf("first heartbeat %s after the termination; heartbeat gap across it %s",
		after.HeartbeatAt.Sub(terminatedAt).Round(time.Millisecond), after.HeartbeatAt.Sub(before.HeartbeatAt).Round(time.Millisecond))

	// New sessions replace the terminated ones, and the process lives on.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var now []int32
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
WHERE application_name = 'studioctl' AND datname = current_database() AND pid = ANY($1)`, pids).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if len(now) != 0 {
		t.Errorf("terminated backends still present: %v", now)
	}
	if r.Exited() {
		t.Fatalf("replica exited after its backends were terminated: %v", r.State())
	}
	if after.PID != r.PID() {
		t.Fatalf("studio_replica.pid = %d, want the same process %d", after.PID, r.PID())
	}
}

func testDuplicateID(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	const id = "twin"
	a := startReplica(t, dbURL, id)
	addr := a.WaitReady(t)
	before, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}

	b := startReplica(t, dbURL, id)
	if code := b.WaitExit(t, replicaproc.ReadyTimeout); code != 2 {
		t.Fatalf("second process with id %q: exit %d, want 2\n%s", id, code, b.Stderr())
	}
	stderr := b.Stderr()
	if !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, "a live replica already has this id") {
		t.Fatalf("second process: want a clear error on stderr, got:\n%s", stderr)
	}
	if b.Logged("replica ready") {
		t.Fatalf("second process logged ready before refusing:\n%s", stderr)
	}

	if a.Exited() {
		t.Fatalf("first replica exited: %v", a.State())
	}
	waitReadyz(t, addr, recoverWithin)
	after := waitHeartbeatAfter(t, pool, id, before.Now, 2*heartbeatGapLimit)
	if after.Incarnation != before.Incarnation || after.PID != a.PID() || after.State != string(replicas.StateReady) {
		t.Fatalf("row changed: before %+v, after %+v (first pid %d)", before, after, a.PID())
	}
}

func testZombie(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	const id = "zombie"
	a := startReplica(t, dbURL, id)
	a.WaitReady(t)
	rowA, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}

	a.Signal(t, syscall.SIGSTOP)
	stoppedAt := time.Now()
	replicaproc.Eventually(t, replicas.GoneAfter+15*time.Second, "the paused replica to be gone", func() error {
		in, err := replicas.Get(context.Background(), pool, id)
		if err != nil {
			return err
		}
		if !in.Gone {
			return fmt.Errorf("not gone: heartbeat %s ago", in.HeartbeatAge)
		}
		return nil
	})
	t.Logf("paused replica gone %s after SIGSTOP", time.Since(stoppedAt).Round(time.Millisecond))

	b := startReplica(t, dbURL, id)
	addrB := b.WaitReady(t)
	rowB, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if rowB.Incarnation == rowA.Incarnation || rowB.PID != b.PID() {
		t.Fatalf("B did not take the row over: A %+v, B %+v (B pid %d)", rowA, rowB, b.PID())
	}

	a.Signal(t, syscall.SIGCONT)
	contAt := time.Now()
	// While A wakes up and exits, the row stays B's at every look.
	var lastSeen row
	replicaproc.Eventually(t, replicaproc.ExitTimeout, "A to exit after SIGCONT", func() error {
		r, err := readRow(context.Background(), pool, id)
		if err != nil {
			return err
		}
		if r.Incarnation != rowB.Incarnation || r.PID != b.PID() {
			t.Fatalf("row no longer B's while A ran: %+v, want incarnation %s pid %d", r, rowB.Incarnation, b.PID())
		}
		lastSeen = r
		if !a.Exited() {
			return errors.New("A still running")
		}
		return nil
	})
	exitAfter := time.Since(contAt)
	code := a.State().ExitCode()
	t.Logf("A exited with code %d %s after SIGCONT", code, exitAfter.Round(time.Millisecond))
	if code != 1 {
		t.Fatalf("A exit code %d, want 1\n%s", code, a.Stderr())
	}
	if exitAfter > replicas.HeartbeatEvery+unreadyWithin {
		t.Errorf("A took %s to exit after SIGCONT, want about one heartbeat interval", exitAfter)
	}
	if !a.Logged("taken over") {
		t.Fatalf(`A's log has no "taken over" line:\n%s`, a.Stderr())
	}

	// B keeps heartbeating with its own incarnation.
	after := waitHeartbeatAfter(t, pool, id, lastSeen.Now, 2*heartbeatGapLimit)
	if after.Incarnation != rowB.Incarnation || after.PID != b.PID() || after.State != string(replicas.StateReady) {
		t.Fatalf("row after A exited: %+v, want B's (incarnation %s, pid %d, ready)", after, rowB.Incarnation, b.PID())
	}
	if b.Exited() {
		t.Fatalf("B exited: %v", b.State())
	}
	waitReadyz(t, addrB, recoverWithin)
}

func testBlackhole(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	u, err := url.Parse(dbURL)
	if err != nil || u.Port() == "" {
		t.Fatalf("the database url must name a TCP host:port to put a proxy in front of it: %q", dbURL)
	}
	px, err := faultproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	viaProxy := *u
	viaProxy.Host = px.Addr()

	const id = "blackholed"
	r := startReplica(t, viaProxy.String(), id)
	addr := r.WaitReady(t)
	waitReadyz(t, addr, recoverWithin)

	px.Blackhole()
	blackholedAt := time.Now()
	var why string
	took := replicaproc.Eventually(t, 3*unreadyWithin, "/readyz to fail", func() error {
		code, body, err := replicaproc.Get(addr, "/readyz")
		if err != nil {
			return err
		}
		if code == 200 {
			return errors.New("still 200")
		}
		why = fmt.Sprintf("%d %s", code, body)
		return nil
	})
	t.Logf("/readyz failed %s after the black hole: %s", took.Round(time.Millisecond), why)
	if took > unreadyWithin {
		t.Errorf("/readyz took %s to fail, want within %s", took, unreadyWithin)
	}
	replicaproc.Eventually(t, 3*unreadyWithin, "the bus listener to notice", func() error {
		d, err := replicaproc.Metric(addr, "studio_bus_down_seconds")
		if err != nil {
			return err
		}
		if d <= 0 {
			return errors.New("bus still connected")
		}
		return nil
	})
	busDown := time.Since(blackholedAt)
	t.Logf("bus listener noticed the dead connection %s after the black hole", busDown.Round(time.Millisecond))
	if busDown > unreadyWithin {
		t.Errorf("bus took %s to notice the black hole, want within %s (SPEC §6)", busDown, unreadyWithin)
	}
	replicaproc.Eventually(t, 3*heartbeatGapLimit, "a failed heartbeat", func() error {
		n, err := replicaproc.Metric(addr, "studio_replica_heartbeat_failures_total")
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("no failed heartbeat yet")
		}
		return nil
	})
	t.Logf("a heartbeat failed on its deadline %s after the black hole", time.Since(blackholedAt).Round(time.Millisecond))

	px.Restore()
	restoredAt := dbNow(t, pool) // the test's pool goes around the proxy
	took = waitReadyz(t, addr, recoverWithin)
	t.Logf("/readyz 200 again %s after the restore", took.Round(time.Millisecond))
	after := waitHeartbeatAfter(t, pool, id, restoredAt, recoverWithin)
	t.Logf("heartbeat %s after the restore", after.HeartbeatAt.Sub(restoredAt).Round(time.Millisecond))
	if r.Exited() {
		t.Fatalf("replica exited: %v", r.State())
	}
}

func testPoolExhausted(t *testing.T) {
	t.Parallel()
	res := exhaustPool(t, poolHold)
	t.Logf("max heartbeat gap while the pool was exhausted for %s: %s from the database, %s from the replica's own clock (limit %s)",
		poolHold, res.maxGap.Round(time.Millisecond), res.registryMaxGap.Round(time.Millisecond), heartbeatGapLimit)
	if res.maxGap > heartbeatGapLimit {
		t.Errorf("heartbeat gap %s while the pool was exhausted, want at most %s", res.maxGap, heartbeatGapLimit)
	}
}

type poolResult struct {
	maxGap         time.Duration // from heartbeat_at, polled every 200 ms
	beats          int           // distinct heartbeat_at values seen
	registryMaxGap time.Duration // the replica's studio_replica_heartbeat_max_gap_seconds
}

// exhaustPool runs a replica in-process (the pool of a child process cannot
// be reached), keeps every connection of its pool busy with pg_sleep for
// hold, and watches heartbeat_at from the test's own connection.
func exhaustPool(t *testing.T, hold time.Duration) poolResult {
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	const id = "pool-exhausted"
	logs := &replicaproc.SyncBuffer{}
	ready := make(chan string, 1)
	h, err := host.New(host.Options{
		ConnString: dbURL, ID: id, Version: "test", DrainDelay: -1,
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		OnReady: func(addr string) { ready <- addr },
	})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	stop := sync.OnceValue(func() error {
		sigs <- os.Interrupt
		select {
		case err := <-done:
			return err
		case <-time.After(replicaproc.ExitTimeout):
			return fmt.Errorf("host still running %s after an interrupt", replicaproc.ExitTimeout)
		}
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("log of in-process replica %s:\n%s", id, logs.String())
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("host stopped before ready: %v", err)
	case <-time.After(replicaproc.ReadyTimeout):
		t.Fatalf("host not ready after %s", replicaproc.ReadyTimeout)
	}

	hp := h.Pool()
	n := int(hp.Config().MaxConns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		if conns[i], err = hp.Acquire(ctx); err != nil {
			t.Fatalf("acquire pool connection %d of %d: %v", i+1, n, err)
		}
	}
	holdCtx, release := context.WithTimeout(context.Background(), hold)
	defer release()
	sleepSQL := fmt.Sprintf("SELECT pg_sleep(%d)", int((hold + 10*time.Second).Seconds()))
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Release()
			c.Exec(holdCtx, sleepSQL) // ends with holdCtx
		}()
	}
	replicaproc.Eventually(t, 10*time.Second, "every pool connection to sleep", func() error {
		var sleeping int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = 'studioctl' AND datname = current_database() AND state = 'active' AND query LIKE 'SELECT pg_sleep%'`).Scan(&sleeping)
		if err != nil {
			return err
		}
		if sleeping < n {
			return fmt.Errorf("%d of %d sleeping", sleeping, n)
		}
		return nil
	})
	actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if c, err := hp.Acquire(actx); err == nil {
		c.Release()
		t.Fatalf("pool of %d not exhausted: another acquire succeeded", n)
	}
	acancel()
	code, body, err := replicaproc.Get(addr, "/readyz")
	t.Logf("/readyz while the pool is exhausted: %d %s %v", code, body, err)

	var res poolResult
	first, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	last := first.HeartbeatAt
	for holdCtx.Err() == nil {
		r, err := readRow(context.Background(), pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.HeartbeatAt.After(last) {
			res.maxGap = max(res.maxGap, r.HeartbeatAt.Sub(last))
			last = r.HeartbeatAt
			res.beats++
		}
		// A heartbeat that does not come counts too.
		res.maxGap = max(res.maxGap, r.Now.Sub(last))
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	if res.beats < int(hold/replicas.HeartbeatEvery)-1 {
		t.Errorf("%d heartbeats in %s, want about one per %s", res.beats, hold, replicas.HeartbeatEvery)
	}
	g, err := replicaproc.Metric(addr, "studio_replica_heartbeat_max_gap_seconds")
	if err != nil {
		t.Fatal(err)
	}
	res.registryMaxGap = time.Duration(g * float64(time.Second))
	// The pool serves again once the sleeps end.
	waitReadyz(t, addr, recoverWithin)
	if err := stop(); err != nil {
		t.Fatalf("stop host: %v", err)
	}
	return res
}

// TestReplicaRecoversFromADatabaseRestart restarts the harness's cluster
// under a running replica. It is not parallel: a restart cuts every
// database of the cluster.
func TestReplicaRecoversFromADatabaseRestart(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	cluster := pgtest.Cluster(t)
	pool := testPool(t, dbURL)
	const id = "restarted"
	r := startReplica(t, dbURL, id)
	addr := r.WaitReady(t)
	waitReadyz(t, addr, recoverWithin)
	before, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := cluster.Restart(ctx); err != nil {
		t.Fatalf("restart the cluster: %v", err)
	}
	restartedIn := time.Since(start)
	var restartedAt time.Time
	replicaproc.Eventually(t, recoverWithin, "the test's pool to reconnect", func() error {
		return pool.QueryRow(ctx, `SELECT now()`).Scan(&restartedAt)
	})
	t.Logf("cluster restarted in %s", restartedIn.Round(time.Millisecond))

	waitReadyz(t, addr, recoverWithin)
	t.Logf("/readyz 200 again %s after the restart", (time.Since(start) - restartedIn).Round(time.Millisecond))
	after := waitHeartbeatAfter(t, pool, id, restartedAt, recoverWithin)
	t.Logf("first heartbeat %s after the server was back; heartbeat gap across the restart %s",
		after.HeartbeatAt.Sub(restartedAt).Round(time.Millisecond), after.HeartbeatAt.Sub(before.HeartbeatAt).Round(time.Millisecond))
	if r.Exited() {
		t.Fatalf("replica exited across the restart: %v", r.State())
	}
	if after.PID != r.PID() || after.Incarnation != before.Incarnation {
		t.Fatalf("row after the restart %+v, want the same process (pid %d, incarnation %s)", after, r.PID(), before.Incarnation)
	}
	if n, err := replicaproc.Metric(addr, "studio_bus_reconnects_total"); err != nil || n < 1 {
		t.Fatalf("studio_bus_reconnects_total = %v (%v), want at least 1", n, err)
	}
}
