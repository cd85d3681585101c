package leases

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
)

// listen opens a connection that runs LISTEN studio, as the bus does.
func listen(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Connect(t.Context(), cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "LISTEN "+bus.Channel); err != nil {
		t.Fatal(err)
	}
	return conn
}

// expectRebalance waits for one leases.rebalance signal and returns its key.
func expectRebalance(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := waitSkippingEvents(ctx, conn)
	if err != nil {
		t.Fatalf("no leases.rebalance signal: %v", err)
	}
	m, err := bus.Decode(n.Payload)
	if err != nil || m.Type != bus.TypeSignal || m.Kind != bus.KindLeasesRebalance {
		t.Fatalf("got %q (%v), want a leases.rebalance signal", n.Payload, err)
	}
	return m.Key
}

// expectNone checks that no notification arrives for a short while.
func expectNone(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if n, err := waitSkippingEvents(ctx, conn); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unexpected notification %v, %v", n, err)
	}
}

// waitSkippingEvents waits for the next notification that is not an event
// stream frame (internal/stream): every lease row change also sends one.
func waitSkippingEvents(ctx context.Context, conn *pgx.Conn) (*pgconn.Notification, error) {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return n, err
		}
		if m, err := bus.Decode(n.Payload); err == nil && m.Type == bus.TypeFrame && m.Stream == "events" {
			continue
		}
		return n, nil
	}
}

// Every operator change, a configuration insert and the loop's release
// send leases.rebalance through the bus; a refused change sends nothing.
func TestChangesSignalLeasesRebalanceOnTheBus(t *testing.T) {
	t.Parallel()
	url, pool := newDB(t)
	conn := listen(t, url)
	ctx := t.Context()

	if _, err := EnsureClusters(ctx, pool, []string{"c1", "c2"}); err != nil {
		t.Fatal(err)
	}
	expectRebalance(t, conn)
	if _, err := EnsureClusters(ctx, pool, []string{"c1"}); err != nil {
		t.Fatal(err)
	}
	expectNone(t, conn) // nothing added, nothing to say

	if _, _, err := Add(ctx, pool, Change{Actor: "op"}, "c3"); err != nil {
		t.Fatal(err)
	}
	expectRebalance(t, conn)

	addReplica(t, pool, "live-1", "ready")
	exec(t, pool, `UPDATE cluster_lease SET owner = 'live-1', acquired_at = now(), renewed_at = now() WHERE cluster = 'c1'`)
	in, _ := Get(ctx, pool, "c1")
	if _, err := Release(ctx, pool, ReleaseRequest{Info: in, Change: Change{Actor: "op"}}); !errors.Is(err, ErrRefused) {
		t.Fatal(err)
	}
	expectNone(t, conn)
	if _, err := Release(ctx, pool, ReleaseRequest{Info: in, Force: true, Change: Change{Actor: "op"}}); err != nil {
		t.Fatal(err)
	}
	if key := expectRebalance(t, conn); key != "c1" {
		t.Fatalf("release signalled key %q, want the cluster", key)
	}
	if _, err := Remove(ctx, pool, Change{Actor: "op"}, "c3"); err != nil {
		t.Fatal(err)
	}
	expectRebalance(t, conn)

	// The loop with its default Signal: it signals when it first finds
	// itself live and ready, and after it releases on a drain.
	s := New(Options{ID: "live-1", DB: pool, timing: fast})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if key := expectRebalance(t, conn); key != "live-1" {
		t.Fatalf("loop signalled key %q, want its replica id", key)
	}
	poll(t, 10*time.Second, "own both", func() bool { return len(s.Owned()) == 2 })
	if _, err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	expectRebalance(t, conn)
}

// A replica that becomes ready signals, and the others release its share
// at once: at the default numbers the join completes well before a tick.
func TestAJoiningReplicaGetsItsShareAtOnce(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	old := []string{"old-1", "old-2"}
	for _, id := range old {
		addReplica(t, pool, id, "ready")
	}
	addClusters(t, pool, 30)
	var j journal
	var b inproc
	for _, id := range old {
		startService(t, pool, id, &j, &b, svcOpts{})
	}
	poll(t, 10*time.Second, "placed", func() bool { return placedOK(t, pool, old) })
	// Let both finish a round so no tick is due soon after the join.
	addReplica(t, pool, "new-1", "starting")
	s := startService(t, pool, "new-1", &j, &b, svcOpts{})
	poll(t, 10*time.Second, "a round of the new replica", func() bool { return s.Rounds() > 0 })
	if len(s.Owned()) != 0 {
		t.Fatal("a starting replica claimed")
	}
	exec(t, pool, `UPDATE studio_replica SET state = 'ready' WHERE id = 'new-1'`)
	s.Rebalance() // what the host does when it becomes ready
	took := poll(t, 10*time.Second, "the new replica owns its share", func() bool {
		return placedOK(t, pool, append(old, "new-1")) && len(s.Owned()) > 0
	})
	t.Logf("join: %d clusters moved to the new replica in %s", len(s.Owned()), took.Round(time.Microsecond))
	if took >= RenewEvery {
		t.Fatalf("the join took %s: it waited for ticks instead of signals", took)
	}
	if o := j.overlaps(); len(o) > 0 {
		t.Fatalf("duties overlapped: %v", o)
	}
}

// An operator's open transaction that holds the lease rows makes the
// renewal wait: the statement deadline ends it, and the trust window
// cancels the duties; once the transaction ends they start again.
func TestARenewalBlockedByAnOpenTransactionLosesTheLeaseLocally(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "a", "ready")
	addClusters(t, pool, 3)
	var j journal
	var b inproc
	s := startService(t, pool, "a", &j, &b, svcOpts{timing: fast})
	poll(t, 10*time.Second, "own all", func() bool { return len(s.Owned()) == 3 })
	ctxs := s.Owned()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `SELECT * FROM cluster_lease FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	poll(t, 10*time.Second, "duties cancelled", func() bool { return len(s.Owned()) == 0 })
	lost := time.Since(held)
	for c, ctx := range ctxs {
		if !errors.Is(context.Cause(ctx), ErrLost) {
			t.Errorf("%s: cause %v, want ErrLost", c, context.Cause(ctx))
		}
	}
	if lost > fast.trust+fast.renewEvery {
		t.Errorf("duties stopped %s after the rows were locked; the trust window is %s", lost, fast.trust)
	}
	// Rounds go on while the rows stay locked; each blocked statement is
	// cancelled at its deadline (pgx sends a cancel request), so no
	// backend is left waiting behind the lock.
	r := s.Rounds() + 5
	poll(t, 10*time.Second, "more rounds", func() bool { return s.Rounds() >= r })
	var waiting int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting > 1 {
		t.Errorf("%d backends wait behind the lock after %d blocked rounds", waiting, 5)
	}
	tx.Rollback(t.Context())
	poll(t, 10*time.Second, "duties again", func() bool { return len(s.Owned()) == 3 })
}
