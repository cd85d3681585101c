package replicas

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// waitFor bounds every poll and wait in these tests.
const waitFor = 10 * time.Second

type env struct {
	url  string
	pool *pgxpool.Pool
	cfg  *pgx.ConnConfig
}

// setup returns a migrated database; the caller must defer e.pool.Close()
// so the pool is gone before any goroutine check.
func setup(t *testing.T) env {
	t.Helper()
	url := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	return env{url: url, pool: pool, cfg: cfg}
}

// register starts a registry for id and stops it when the test ends.
func (e env) register(t *testing.T, id string, o Options) *Registry {
	t.Helper()
	o.ID = id
	r := NewRegistry(e.cfg, e.url, o)
	t.Cleanup(r.Stop)
	if err := r.Register(context.Background()); err != nil {
		t.Fatalf("Register(%q): %v", id, err)
	}
	return r
}

// age makes the row of id look as if its last heartbeat was 20 s ago.
func (e env) age(t *testing.T, id string) {
	t.Helper()
	tag, err := e.pool.Exec(context.Background(), `UPDATE studio_replica SET heartbeat_at = now() - interval '20 seconds' WHERE id = $1`, id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("age %q: %v (%d rows)", id, err, tag.RowsAffected())
	}
}

func (e env) auditRows(t *testing.T, action, target string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_audit WHERE action = $1 AND target = $2`, action, target).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e env) incarnation(t *testing.T, id string) uuid.UUID {
	t.Helper()
	var u uuid.UUID
	if err := e.pool.QueryRow(context.Background(), `SELECT incarnation FROM studio_replica WHERE id = $1`, id).Scan(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRegisterInsertsAStartingLiveReplica(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	r := e.register(t, "r1", Options{Host: "h1", Version: "v1", HTTPAddr: "127.0.0.1:1"})
	in, err := Get(context.Background(), e.pool, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if in.State != StateStarting || !in.Live || in.Gone || in.Crashed || in.StoppedAt != nil {
		t.Fatalf("after Register: %+v", in)
	}
	if in.Host != "h1" || in.Version != "v1" || in.HTTPAddr != "127.0.0.1:1" || in.PID == 0 {
		t.Errorf("row fields: %+v", in)
	}
	if got := e.incarnation(t, "r1"); got != r.Incarnation() {
		t.Errorf("incarnation %s, want %s", got, r.Incarnation())
	}
	if r.ID() != "r1" {
		t.Errorf("ID() = %q", r.ID())
	}
}

func TestASecondRegistryWithALiveIDIsRefused(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	first := e.register(t, "dup", Options{})
	second := NewRegistry(e.cfg, e.url, Options{ID: "dup"})
	defer second.Stop()
	err := second.Register(context.Background())
	if !errors.Is(err, ErrLiveDuplicate) {
		t.Fatalf("second Register = %v, want ErrLiveDuplicate", err)
	}
	if got := e.incarnation(t, "dup"); got != first.Incarnation() {
		t.Errorf("row incarnation %s changed from the first registry's %s", got, first.Incarnation())
	}
}

func TestATakenOverRegistryLosesItsIncarnationAndStops(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	lost := make(chan error, 1)
	old := NewRegistry(e.cfg, e.url, Options{ID: "take", HeartbeatEvery: 200 * time.Millisecond, OnLost: func(err error) { lost <- err }})
	defer old.Stop()
	if err := old.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.age(t, "take")

	newer := NewRegistry(e.cfg, e.url, Options{ID: "take"})
	defer newer.Stop()
	if err := newer.Register(context.Background()); err != nil {
		t.Fatalf("Register over a gone replica: %v", err)
	}
	if newer.Incarnation() == old.Incarnation() {
		t.Fatal("the new registry has the old incarnation")
	}
	if got := e.incarnation(t, "take"); got != newer.Incarnation() {
		t.Fatalf("row incarnation %s, want the new %s", got, newer.Incarnation())
	}

	if err := old.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, ErrIncarnationLost) {
			t.Fatalf("OnLost(%v), want ErrIncarnationLost", err)
		}
	case <-time.After(waitFor):
		t.Fatalf("OnLost not called within %s", waitFor)
	}
	// The heartbeat goroutine has returned: done is closed without Stop.
	select {
	case <-old.loopDone:
	case <-time.After(waitFor):
		t.Fatal("heartbeat goroutine still running after OnLost")
	}
	if !old.Lost() {
		t.Error("Lost() = false after OnLost")
	}
	if err := old.SetState(context.Background(), StateReady); !errors.Is(err, ErrIncarnationLost) {
		t.Errorf("old SetState = %v, want ErrIncarnationLost", err)
	}
	if got := e.incarnation(t, "take"); got != newer.Incarnation() {
		t.Errorf("old registry changed the row: incarnation %s", got)
	}
	old.Stop()
	newer.Stop()
}

func TestHeartbeatsKeepAReplicaLive(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := NewRegistry(e.cfg, e.url, Options{ID: "beat", HeartbeatEvery: 200 * time.Millisecond})
	defer r.Stop()
	if err := r.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.age(t, "beat")
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		in, err := Get(context.Background(), e.pool, "beat")
		if err != nil {
			t.Fatal(err)
		}
		if in.Live && r.Heartbeats() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat made the replica live within %s: %+v, %d beats", waitFor, in, r.Heartbeats())
		}
		time.Sleep(20 * time.Millisecond) // poll interval, bounded by deadline
	}
	r.Stop()
	r.Stop() // twice is safe
}

func TestSetState(t *testing.T) {
	tests := []struct {
		name        string
		state       State
		wantStopped bool
		wantLive    bool
	}{
		{"ready keeps the replica live without stopped_at", StateReady, false, true},
		{"draining keeps the replica live without stopped_at", StateDraining, false, true},
		{"stopped sets stopped_at and makes the replica gone", StateStopped, true, false},
	}
	e := setup(t)
	defer e.pool.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "state-" + string(tt.state)
			r := e.register(t, id, Options{})
			if err := r.SetState(context.Background(), tt.state); err != nil {
				t.Fatal(err)
			}
			in, err := Get(context.Background(), e.pool, id)
			if err != nil {
				t.Fatal(err)
			}
			if in.State != tt.state || (in.StoppedAt != nil) != tt.wantStopped || in.Live != tt.wantLive || in.Crashed {
				t.Fatalf("after SetState(%s): %+v", tt.state, in)
			}
		})
	}
}

func TestListAndGetJudgeReplicas(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx := context.Background()
	e.register(t, "a-live", Options{})
	e.register(t, "b-crashed", Options{})
	e.age(t, "b-crashed")
	stopped := e.register(t, "c-stopped", Options{})
	if err := stopped.SetState(ctx, StateStopped); err != nil {
		t.Fatal(err)
	}
	oldStop := e.register(t, "d-stopped-long-ago", Options{})
	if err := oldStop.SetState(ctx, StateStopped); err != nil {
		t.Fatal(err)
	}
	e.age(t, "d-stopped-long-ago")

	tests := []struct {
		name                string
		id                  string
		live, gone, crashed bool
	}{
		{"a registered replica is live", "a-live", true, false, false},
		{"a replica without a heartbeat for 20 s is gone and crashed", "b-crashed", false, true, true},
		{"a stopped replica is gone but not crashed", "c-stopped", false, true, false},
		{"a stopped replica with an old heartbeat is not crashed", "d-stopped-long-ago", false, true, false},
	}
	list, err := List(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(tests) {
		t.Fatalf("List returned %d replicas, want %d", len(list), len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if list[i].ID != tt.id {
				t.Fatalf("List[%d].ID = %q, want %q (ordered by id)", i, list[i].ID, tt.id)
			}
			got, err := Get(ctx, e.pool, tt.id)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range []Info{list[i], got} {
				if in.Live != tt.live || in.Gone != tt.gone || in.Crashed != tt.crashed {
					t.Errorf("%s: Live %v Gone %v Crashed %v, want %v %v %v", in.ID, in.Live, in.Gone, in.Crashed, tt.live, tt.gone, tt.crashed)
				}
			}
			if tt.id == "b-crashed" && got.HeartbeatAge < 19*time.Second {
				t.Errorf("HeartbeatAge %s, want about 20s", got.HeartbeatAge)
			}
		})
	}
	if _, err := Get(ctx, e.pool, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
	}
}

func TestForget(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx := context.Background()
	e.register(t, "live", Options{})
	e.register(t, "gone", Options{})
	e.age(t, "gone")

	tests := []struct {
		name        string
		id          string
		wantErr     error
		wantRemoved bool
	}{
		{"a live replica is refused", "live", ErrLive, false},
		{"a gone replica is removed with an audit row", "gone", nil, true},
		{"an unknown id is not found", "unknown", ErrNotFound, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Forget(ctx, e.pool, tt.id, "tester", "test")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Forget(%q) = %v, want %v", tt.id, err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Forget(%q) = %v", tt.id, err)
			}
			_, getErr := Get(ctx, e.pool, tt.id)
			if removed := errors.Is(getErr, ErrNotFound); removed != (tt.wantRemoved || tt.id == "unknown") {
				t.Errorf("after Forget, Get = %v", getErr)
			}
			wantAudit := 0
			if tt.wantRemoved {
				wantAudit = 1
			}
			if n := e.auditRows(t, "replicas.forget", tt.id); n != wantAudit {
				t.Errorf("%d replicas.forget audit rows, want %d", n, wantAudit)
			}
		})
	}
}

func TestRequestDrain(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	listen, err := db.Connect(ctx, e.cfg, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())

	e.register(t, "live", Options{})
	stopped := e.register(t, "stopped", Options{})
	if err := stopped.SetState(ctx, StateStopped); err != nil {
		t.Fatal(err)
	}
	e.register(t, "gone", Options{})
	e.age(t, "gone")
	// Listen after the registrations, whose replica.state signals are not
	// what this test is about.
	if _, err := listen.Exec(ctx, "LISTEN "+bus.Channel); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		id         string
		wantDone   bool
		wantErr    error
		wantSignal bool
	}{
		{"a live replica gets a drain signal and an audit row", "live", false, nil, true},
		{"a stopped replica is already done", "stopped", true, nil, false},
		{"a gone replica cannot hear the request", "gone", false, ErrNotLive, false},
		{"an unknown replica is not found", "unknown", false, ErrNotFound, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, done, err := RequestDrain(ctx, e.pool, tt.id, "tester", "test")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("RequestDrain(%q) = %v, want %v", tt.id, err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("RequestDrain(%q) = %v", tt.id, err)
			}
			if done != tt.wantDone {
				t.Errorf("done = %v, want %v", done, tt.wantDone)
			}
			wantAudit := 0
			if tt.wantSignal {
				wantAudit = 1
				wctx, wcancel := context.WithTimeout(ctx, waitFor)
				defer wcancel()
				n, err := waitSkippingEvents(wctx, listen)
				if err != nil {
					t.Fatalf("no notification: %v", err)
				}
				m, err := bus.Decode(n.Payload)
				if err != nil {
					t.Fatalf("Decode(%q): %v", n.Payload, err)
				}
				if n.Channel != bus.Channel || m.Type != bus.TypeSignal || m.Kind != bus.KindReplicaDrain || m.Key != tt.id {
					t.Fatalf("notification on %q = %+v, want a %s signal for %q", n.Channel, m, bus.KindReplicaDrain, tt.id)
				}
			}
			if n := e.auditRows(t, "replicas.drain", tt.id); n != wantAudit {
				t.Errorf("%d replicas.drain audit rows, want %d", n, wantAudit)
			}
			var reqs int
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM studio_request q JOIN studio_audit a ON a.seq = q.audit_seq
WHERE q.kind = 'replica.drain' AND q.target = $1 AND a.action = 'replicas.drain' AND q.done_at IS NULL`, tt.id).Scan(&reqs); err != nil {
				t.Fatal(err)
			}
			if reqs != wantAudit {
				t.Errorf("%d pending drain requests tied to their audit row, want %d", reqs, wantAudit)
			}
		})
	}
	// Only the live replica's request notified: nothing else is pending.
	if _, err := listen.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer qcancel()
	if n, err := waitSkippingEvents(qctx, listen); err == nil {
		t.Errorf("unexpected extra notification %q", n.Payload)
	}
}

func TestDefaultIDIsHostAndSixHexDigits(t *testing.T) {
	re := regexp.MustCompile(`^.+-[0-9a-f]{6}$`)
	tests := []struct {
		name string
	}{
		{"the first id is host and six hex digits"},
		{"a second id is too"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := DefaultID()
			if !re.MatchString(id) {
				t.Fatalf("DefaultID() = %q, want %s", id, re)
			}
			seen[id] = true
		})
	}
	if len(seen) != len(tests) {
		t.Errorf("DefaultID repeated itself: %v", seen)
	}
}

// bigPool lets every concurrent command of a test hold its own connection.
func (e env) bigPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 45
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// concurrently runs f(i) for i in [0, n) at once and waits for them all.
func concurrently(n int, f func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(i)
		}()
	}
	start.Done()
	done.Wait()
}

// 20 gone replicas, each forgotten by two concurrent `replicas forget`:
// each is deleted once with one audit row, and the loser of each pair is
// told it is not found (exit 4).
func TestConcurrentForgetPairsDeleteOnceWithOneAuditRow(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	pool := e.bigPool(t)
	defer pool.Close()
	const pairs = 20
	for i := range pairs {
		id := fmt.Sprintf("gone-%d", i)
		if _, err := e.pool.Exec(context.Background(), `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at)
VALUES ($1, gen_random_uuid(), 'h', 1, 'test', 'ready', now() - interval '1 minute')`, id); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, 2*pairs)
	concurrently(2*pairs, func(i int) {
		_, errs[i] = Forget(context.Background(), pool, fmt.Sprintf("gone-%d", i/2), fmt.Sprintf("op-%d", i), "")
	})
	for p := range pairs {
		a, b := errs[2*p], errs[2*p+1]
		if !((a == nil && errors.Is(b, ErrNotFound)) || (b == nil && errors.Is(a, ErrNotFound))) {
			t.Errorf("gone-%d: the pair returned %v and %v, want one nil and one ErrNotFound", p, a, b)
		}
		if n := e.auditRows(t, "replicas.forget", fmt.Sprintf("gone-%d", p)); n != 1 {
			t.Errorf("gone-%d: %d audit rows, want 1", p, n)
		}
	}
	// And 20 at once on one id: one delete, one audit row.
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at, stopped_at)
VALUES ('one', gen_random_uuid(), 'h', 1, 'test', 'stopped', now(), now())`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	okN, notFound := 0, 0
	concurrently(20, func(int) {
		_, err := Forget(context.Background(), pool, "one", "op", "")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			okN++
		case errors.Is(err, ErrNotFound):
			notFound++
		default:
			t.Error(err)
		}
	})
	if okN != 1 || notFound != 19 {
		t.Errorf("20 forgets of one id: %d deleted, %d not found; want 1 and 19", okN, notFound)
	}
	if n := e.auditRows(t, "replicas.forget", "one"); n != 1 {
		t.Errorf("%d audit rows for one, want 1", n)
	}
}

// A drain request is claimed once, by the incarnation it names, before it
// expires: a replica that restarts with the same id is not drained by a
// request made for its previous process.
func TestClaimDrainTakesOnlyTheRequestsOfThisIncarnationOnce(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx := context.Background()
	e.register(t, "web-1", Options{})
	old := e.incarnation(t, "web-1")
	if _, _, err := RequestDrain(ctx, e.pool, "web-1", "ana@ops", "kernel"); err != nil {
		t.Fatal(err)
	}
	if got, err := ClaimDrain(ctx, e.pool, "web-1", uuid.New()); err != nil || len(got) != 0 {
		t.Errorf("claim by another incarnation = %+v, %v; want nothing", got, err)
	}
	if got, err := ClaimDrain(ctx, e.pool, "web-2", old); err != nil || len(got) != 0 {
		t.Errorf("claim by another id = %+v, %v; want nothing", got, err)
	}
	// The process restarts (a new incarnation) before it claimed: the old
	// request is not for it.
	if _, err := e.pool.Exec(ctx, `UPDATE studio_replica SET incarnation = gen_random_uuid() WHERE id = 'web-1'`); err != nil {
		t.Fatal(err)
	}
	if got, err := ClaimDrain(ctx, e.pool, "web-1", e.incarnation(t, "web-1")); err != nil || len(got) != 0 {
		t.Errorf("claim by the new incarnation = %+v, %v; want nothing", got, err)
	}
	// The old process may still claim its own request, once.
	got, err := ClaimDrain(ctx, e.pool, "web-1", old)
	if err != nil || len(got) != 1 || got[0].RequestedBy != "ana@ops" || got[0].Reason != "kernel" {
		t.Errorf("claim by the old incarnation = %+v, %v; want its request", got, err)
	}
	if got, _ := ClaimDrain(ctx, e.pool, "web-1", old); len(got) != 0 {
		t.Errorf("second claim = %+v, want nothing", got)
	}
	// An expired request is void.
	if _, _, err := RequestDrain(ctx, e.pool, "web-1", "ana@ops", ""); err != nil {
		t.Fatal(err)
	}
	pgtest.ExecWithoutTriggers(t, e.pool, `UPDATE studio_request SET expires_at = now() - interval '1 second' WHERE done_at IS NULL`)
	if got, _ := ClaimDrain(ctx, e.pool, "web-1", e.incarnation(t, "web-1")); len(got) != 0 {
		t.Errorf("claim of an expired request = %+v, want nothing", got)
	}
}

// waitSkippingEvents waits for the next notification that is not an event
// stream frame (internal/stream): every replica row change also sends one.
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
