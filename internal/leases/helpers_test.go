package leases

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// pollEvery is the pause between two tries of a poll; a poll always checks
// a condition, it never stands in for one.
const pollEvery = 10 * time.Millisecond

// fast are shortened timings that keep the contract's proportions
// (trust < TTL, deadline < renewal period) for tests that do not measure.
var fast = timing{renewEvery: 200 * time.Millisecond, ttl: 600 * time.Millisecond, trust: 400 * time.Millisecond, deadline: 150 * time.Millisecond}

func openPool(t testing.TB, url string, hook func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	if hook != nil {
		hook(cfg)
	}
	pool, err := db.OpenConfig(context.Background(), cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func exec(t testing.TB, q Querier, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// addReplica inserts a replica row in state with a fresh heartbeat.
func addReplica(t testing.TB, q Querier, id, state string) {
	t.Helper()
	exec(t, q, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ($1, gen_random_uuid(), 'test', 1, 'dev', $2)
ON CONFLICT (id) DO UPDATE SET state = $2, heartbeat_at = now()`, id, state)
}

// heartbeat keeps id's heartbeat fresh every liveness.HeartbeatEvery, as a
// registry would, until the returned stop is called (the crash).
func heartbeat(t testing.TB, q Querier, id string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(liveness.HeartbeatEvery)
		defer tick.Stop()
		for {
			bctx, cancel := context.WithTimeout(ctx, StatementDeadline)
			q.Exec(bctx, `UPDATE studio_replica SET heartbeat_at = now() WHERE id = $1`, id)
			cancel()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func addClusters(t testing.TB, q Querier, n int) []string {
	t.Helper()
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("c%d", i))
	}
	if _, err := EnsureClusters(context.Background(), q, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// event is one acquire or loss seen by a service's callbacks.
type event struct {
	replica, cluster string
	acquire          bool
	cause            error
	at               time.Time
}

// journal records every service's callbacks in one order.
type journal struct {
	mu     sync.Mutex
	events []event
}

func (j *journal) add(e event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e.at = time.Now()
	j.events = append(j.events, e)
}

func (j *journal) snapshot() []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// overlaps returns a description of every moment two replicas held the
// same cluster's duties at once, from the journal.
func (j *journal) overlaps() []string {
	holder := map[string]string{}
	var out []string
	for _, e := range j.snapshot() {
		switch {
		case e.acquire && holder[e.cluster] != "":
			out = append(out, fmt.Sprintf("%s acquired %s at %s while %s held it", e.replica, e.cluster, e.at.Format("15:04:05.000"), holder[e.cluster]))
		case e.acquire:
			holder[e.cluster] = e.replica
		case holder[e.cluster] == e.replica:
			delete(holder, e.cluster)
		}
	}
	return out
}

// bus is an in-process stand-in for the bus: a signal wakes every service.
type inproc struct {
	mu       sync.Mutex
	services []*Service
	signals  atomic.Int64
}

func (b *inproc) signal(context.Context) error {
	b.signals.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.services {
		s.Rebalance()
	}
	return nil
}

type svcOpts struct {
	timing  timing
	liveSet func() []string
	db      Querier
}

// startService starts a lease loop for id on q, recording into j and waking
// through b; it is stopped when the test ends.
func startService(t testing.TB, q Querier, id string, j *journal, b *inproc, o svcOpts) *Service {
	t.Helper()
	if o.db != nil {
		q = o.db
	}
	s := New(Options{ID: id, DB: q, Signal: b.signal, LiveSet: o.liveSet, timing: o.timing,
		OnAcquire: func(c string, _ context.Context) { j.add(event{replica: id, cluster: c, acquire: true}) },
		OnLose:    func(c string, cause error) { j.add(event{replica: id, cluster: c, cause: cause}) },
	})
	b.mu.Lock()
	b.services = append(b.services, s)
	b.mu.Unlock()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// owners reads cluster -> owner from the table.
func owners(t testing.TB, q Querier) map[string]string {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT cluster, coalesce(owner, '') FROM cluster_lease`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var c, o string
		if err := rows.Scan(&c, &o); err != nil {
			t.Fatal(err)
		}
		out[c] = o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// poll waits until cond holds, for at most d, and returns how long it took.
func poll(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(start)
}

// placedOK reports whether every cluster is owned by its placement over live.
func placedOK(t testing.TB, q Querier, live []string) bool {
	for c, o := range owners(t, q) {
		if o != Place(c, live) {
			return false
		}
	}
	return true
}

// counting wraps a Querier and counts its statements by text.
type counting struct {
	Querier
	mu    sync.Mutex
	count map[string]int
}

func newCounting(q Querier) *counting { return &counting{Querier: q, count: map[string]int{}} }

func (c *counting) add(sql string) {
	c.mu.Lock()
	c.count[sql]++
	c.mu.Unlock()
}

func (c *counting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.add(sql)
	return c.Querier.Exec(ctx, sql, args...)
}

func (c *counting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.add(sql)
	return c.Querier.Query(ctx, sql, args...)
}

func (c *counting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.add(sql)
	return c.Querier.QueryRow(ctx, sql, args...)
}

func (c *counting) snapshot() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.count {
		total += n
	}
	return maps.Clone(c.count), total
}

// proxied returns a pool on url whose connections go through a fault proxy.
func proxied(t testing.TB, url string) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.ConnConfig
	proxy, err := faultproxy.Start(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	pool := openPool(t, url, func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Fallbacks = "127.0.0.1", uint16(proxy.Port()), nil
	})
	return pool, proxy
}

func newDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewDB(t)
	return url, openPool(t, url, nil)
}
