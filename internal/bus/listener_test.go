package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// waitFor bounds every wait for something that must happen. It is generous:
// it only decides how long a broken build takes to fail.
const waitFor = 30 * time.Second

// pollEvery is how often a poll looks again.
const pollEvery = 10 * time.Millisecond

// testAppName marks the listener connection in pg_stat_activity.
const testAppName = "studioctl-bus-test"

// inbox collects what a listener hands to its handler.
type inbox struct {
	ch      chan bus.Message
	resyncs atomic.Int64
}

func newInbox() *inbox { return &inbox{ch: make(chan bus.Message, 10_000)} }

func (b *inbox) handler(m bus.Message) { b.ch <- m }

// next returns the next message or fails the test.
func (b *inbox) next(t *testing.T) bus.Message {
	t.Helper()
	select {
	case m := <-b.ch:
		return m
	case <-time.After(waitFor):
		t.Fatalf("no message within %s", waitFor)
		return bus.Message{}
	}
}

// expectSignal fails unless the next message is the signal kind/key.
func (b *inbox) expectSignal(t *testing.T, kind, key string) {
	t.Helper()
	m := b.next(t)
	if m.Type != "signal" || m.Kind != kind || m.Key != key {
		t.Fatalf("got %+v, want signal %s %q", m, kind, key)
	}
}

// setup gives a test a fresh database, a pool to send with and a parsed
// listener configuration.
func setup(t *testing.T) (url string, pool *pgxpool.Pool, cfg *pgx.ConnConfig) {
	t.Helper()
	url = pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg, err = db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = testAppName
	return url, pool, cfg
}

// startListener starts a listener that feeds a new inbox; Stop runs at
// cleanup.
func startListener(t *testing.T, cfg *pgx.ConnConfig, url string, o bus.Options) (*bus.Listener, *inbox) {
	t.Helper()
	in := newInbox()
	o.Handler = in.handler
	o.OnResync = func() { in.resyncs.Add(1) }
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	l := bus.NewListener(cfg, url, o)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := l.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(l.Stop)
	if !l.Connected() || l.DownFor() != 0 {
		t.Fatalf("after Start: Connected %v, DownFor %s", l.Connected(), l.DownFor())
	}
	return l, in
}

// testLogger writes the listener's log to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// notify sends m through q or fails the test.
func notify(t *testing.T, q bus.Execer, m bus.Message) {
	t.Helper()
	if err := bus.Notify(context.Background(), q, m); err != nil {
		t.Fatalf("Notify: %v", err)
	}
}

// poll waits until cond holds, failing after limit.
func poll(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(start)
}

func TestNotifyIsDeliveredOnCommitToEveryListener(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	// Two replicas; the sender is this process, on another connection.
	_, in1 := startListener(t, cfg, url, bus.Options{})
	_, in2 := startListener(t, cfg, url, bus.Options{})
	ctx := context.Background()

	rolledBack, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notify(t, rolledBack, bus.Signal(bus.KindJobTrigger, "rolled-back"))
	if err := rolledBack.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notify(t, open, bus.Signal(bus.KindJobTrigger, "committed"))
	// Sent after the open transaction's notify, but committed first.
	notify(t, pool, bus.Signal(bus.KindJobSettings, "autocommit"))
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	for _, in := range []*inbox{in1, in2} {
		// The rolled-back signal would have come first; the committed one
		// comes only after its commit.
		in.expectSignal(t, bus.KindJobSettings, "autocommit")
		in.expectSignal(t, bus.KindJobTrigger, "committed")
	}
}

func TestEveryShapeTravelsThroughPostgreSQL(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	l, in := startListener(t, cfg, url, bus.Options{})

	var seqs []int64
	for i := range 3000 {
		seqs = append(seqs, 5_000_000_000+int64(i))
	}
	big := `"` + strings.Repeat("z", 10_000) + `"`
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	notify(t, tx, bus.Frame("runs", "1", "log", []byte(`{"line":"hello"}`)))
	notify(t, tx, bus.Frame("runs", "2", "log", []byte(big)))
	notify(t, tx, bus.Seqs(seqs...))
	notify(t, tx, bus.Signal(bus.KindReplicaDrain, "replica-1"))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}

	if m := in.next(t); m.Type != "frame" || m.ID != "1" || string(m.Data) != `{"line":"hello"}` || m.Truncated {
		t.Fatalf("small frame arrived as %+v", m)
	}
	if m := in.next(t); m.Type != "frame" || m.ID != "2" || m.Data != nil || !m.Truncated {
		t.Fatalf("large frame arrived as %+v", m)
	}
	var got []int64
	batches := 0
	for len(got) < len(seqs) {
		m := in.next(t)
		if m.Type != "seqs" {
			t.Fatalf("got %+v while seqs were expected", m)
		}
		got = append(got, m.Seqs...)
		batches++
	}
	if !slices.Equal(got, seqs) || batches < 2 {
		t.Fatalf("seqs arrived in %d batches, equal %v", batches, slices.Equal(got, seqs))
	}
	in.expectSignal(t, bus.KindReplicaDrain, "replica-1")
	if n := l.Received(); n != int64(3+batches) {
		t.Fatalf("Received = %d, want %d", n, 3+batches)
	}
}

func TestPayloadsOverTheServerLimitWouldFail(t *testing.T) {
	t.Parallel()
	_, pool, _ := setup(t)
	// The reason for MaxFrameBytes: PostgreSQL refuses payloads of 8000 bytes.
	_, err := pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", bus.Channel, strings.Repeat("x", pgNotifyLimit))
	if err == nil || !strings.Contains(err.Error(), "payload string too long") {
		t.Fatalf("an 8000-byte payload gave %v", err)
	}
}

// fakeNow is a clock the test moves by hand; the listener goroutine reads it.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) Add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// A flood of undecodable payloads is counted one by one but writes at most
// one warning a minute, which says how many went by without a line (issue
// 7, defect 8: each one used to write its own line at some level).
func TestUndecodablePayloadsAreCountedAndLoggedAtMostOnceAMinute(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	var log lockedBuffer
	// Debug level: not even a debug line per payload.
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clk := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l, in := startListener(t, cfg, url, bus.Options{Logger: logger, Now: clk.Now})
	lines := func() int { return strings.Count(log.String(), "bus: skipping undecodable payload") }
	sendBad := func(n int) {
		t.Helper()
		for i := range n {
			p := []string{"garbage", "more garbage", `{"v":9,"type":"signal","kind":"x"}`, `{"type":"signal","kind":"x"}`}[i%4]
			if _, err := pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", bus.Channel, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A good message after the bad ones proves they were all handled.
	roundTrip := func(key string) {
		t.Helper()
		notify(t, pool, bus.Signal(bus.KindJobTrigger, key))
		in.expectSignal(t, bus.KindJobTrigger, key)
	}

	sendBad(100)
	roundTrip("first")
	if n := l.Undecodable(); n != 100 {
		t.Fatalf("Undecodable = %d, want 100", n)
	}
	if n := lines(); n != 1 {
		t.Fatalf("logged %d lines for 100 bad payloads in the same minute, want 1:\n%s", n, log.String())
	}
	clk.Add(59 * time.Second)
	sendBad(10)
	roundTrip("second")
	if n := lines(); n != 1 {
		t.Fatalf("logged %d lines within the minute, want 1:\n%s", n, log.String())
	}
	clk.Add(time.Second)
	sendBad(1)
	roundTrip("third")
	if n := lines(); n != 2 {
		t.Fatalf("logged %d lines after a minute, want 2:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "suppressed_since_last_log=109") || !strings.Contains(log.String(), "undecodable_total=111") {
		t.Fatalf("second line does not count the suppressed payloads:\n%s", log.String())
	}
	if n := l.Undecodable(); n != 111 {
		t.Fatalf("Undecodable = %d, want 111", n)
	}
	if n := l.Received(); n != 3 {
		t.Fatalf("Received = %d, want 3", n)
	}
	if !l.Connected() {
		t.Fatal("bad payloads took the listener down")
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestNotificationsDuringPingsAreNotLost(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	// Ping almost continuously so that notifications arrive during pings.
	l, in := startListener(t, cfg, url, bus.Options{PingEvery: time.Millisecond})
	const n = 500
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if err := bus.Notify(context.Background(), pool, bus.Signal(bus.KindJobTrigger, strconv.Itoa(i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool)
	for len(seen) < n {
		m := in.next(t)
		if seen[m.Key] {
			t.Fatalf("%s received twice", m.Key)
		}
		seen[m.Key] = true
	}
	if r := l.Reconnects(); r != 0 {
		t.Fatalf("Reconnects = %d on a healthy connection", r)
	}
}

// backendPID finds the listener's backend by its application_name.
func backendPID(t *testing.T, pool *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	err := pool.QueryRow(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
		testAppName).Scan(&pid)
	if err != nil {
		t.Fatalf("find the listener's backend: %v", err)
	}
	return pid
}

func TestListenerReconnectsAfterItsBackendIsTerminated(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	l, in := startListener(t, cfg, url, bus.Options{})
	notify(t, pool, bus.Signal(bus.KindJobTrigger, "before"))
	in.expectSignal(t, bus.KindJobTrigger, "before")

	old := backendPID(t, pool)
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", old).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend = %v, %v", ok, err)
	}
	poll(t, waitFor, "reconnect", func() bool { return l.Reconnects() == 1 && in.resyncs.Load() == 1 })
	if !l.Connected() || l.DownFor() != 0 {
		t.Fatalf("after reconnect: Connected %v, DownFor %s", l.Connected(), l.DownFor())
	}
	if pid := backendPID(t, pool); pid == old {
		t.Fatalf("still on backend %d", pid)
	}
	notify(t, pool, bus.Signal(bus.KindJobTrigger, "after"))
	in.expectSignal(t, bus.KindJobTrigger, "after")
}

func TestBlackHoledConnectionIsDetectedWithinTenSeconds(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cfg.Host, cfg.Port, cfg.Fallbacks = "127.0.0.1", uint16(proxy.Port()), nil

	// Default timings: this proves the 10 s of SPEC §6.
	var log lockedBuffer
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(tWriter{t}, &log), nil))
	l, in := startListener(t, cfg, url, bus.Options{Logger: logger})
	notify(t, pool, bus.Signal(bus.KindJobTrigger, "before"))
	in.expectSignal(t, bus.KindJobTrigger, "before")

	proxy.Blackhole()
	took := poll(t, 10*time.Second, "notice the black hole", func() bool { return !l.Connected() })
	t.Logf("black hole noticed after %s", took.Round(time.Millisecond))
	if d := l.DownFor(); d <= 0 {
		t.Fatalf("DownFor = %s while disconnected", d)
	}
	// DownFor counts from the last moment the connection was known healthy,
	// not from when the loss was noticed. That moment can fall a hair after
	// the black hole began (a round trip that was already answered), so
	// allow half a second.
	if d := l.DownFor(); d < took-500*time.Millisecond {
		t.Fatalf("DownFor = %s, less than the %s since the black hole began", d, took)
	}
	// Connection attempts into the black hole give up on their own.
	poll(t, waitFor, "fail a reconnect attempt", func() bool { return strings.Contains(log.String(), "bus: reconnect failed") })
	if l.Connected() || l.Reconnects() != 0 {
		t.Fatalf("reconnected through a black hole: Connected %v, Reconnects %d", l.Connected(), l.Reconnects())
	}

	proxy.Restore()
	poll(t, waitFor, "reconnect after restore", func() bool { return l.Connected() && in.resyncs.Load() == 1 })
	if l.DownFor() != 0 || l.Reconnects() != 1 {
		t.Fatalf("after reconnect: DownFor %s, Reconnects %d", l.DownFor(), l.Reconnects())
	}
	notify(t, pool, bus.Signal(bus.KindJobTrigger, "after"))
	in.expectSignal(t, bus.KindJobTrigger, "after")
}

func TestCutConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cfg.Host, cfg.Port, cfg.Fallbacks = "127.0.0.1", uint16(proxy.Port()), nil
	l, in := startListener(t, cfg, url, bus.Options{})

	proxy.CutAll()
	poll(t, waitFor, "reconnect after cut", func() bool { return l.Reconnects() == 1 && l.Connected() })
	notify(t, pool, bus.Signal(bus.KindJobTrigger, "after"))
	in.expectSignal(t, bus.KindJobTrigger, "after")
	if in.resyncs.Load() != 1 {
		t.Fatalf("OnResync called %d times", in.resyncs.Load())
	}
}

func TestListenerOutlivesStartContext(t *testing.T) {
	t.Parallel()
	url, pool, cfg := setup(t)
	in := newInbox()
	l := bus.NewListener(cfg, url, bus.Options{Handler: in.handler, Logger: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	cancel()
	notify(t, pool, bus.Signal(bus.KindJobTrigger, "still here"))
	in.expectSignal(t, bus.KindJobTrigger, "still here")
}

// The tests below check goroutines, so they do not run in parallel.

func TestStopWithoutStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l := bus.NewListener(&pgx.ConnConfig{}, "", bus.Options{})
	l.Stop()
	l.Stop()
	if l.Connected() || l.DownFor() != 0 {
		t.Fatalf("never started: Connected %v, DownFor %s", l.Connected(), l.DownFor())
	}
	if err := l.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "already stopped") {
		t.Fatalf("Start after Stop = %v", err)
	}
}

func TestStartThenStopTwiceLeavesNoGoroutines(t *testing.T) {
	url, _, cfg := setup(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l := bus.NewListener(cfg, url, bus.Options{Logger: testLogger(t)})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Fatalf("second Start = %v", err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); l.Stop() }()
	}
	wg.Wait()
	l.Stop()
	if l.Connected() || l.DownFor() != 0 {
		t.Fatalf("after Stop: Connected %v, DownFor %s", l.Connected(), l.DownFor())
	}
}

func TestStopWhileReconnectingLeavesNoGoroutines(t *testing.T) {
	url, _, cfg := setup(t)
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port, cfg.Fallbacks = "127.0.0.1", uint16(proxy.Port()), nil
	ignore := goleak.IgnoreCurrent()

	l := bus.NewListener(cfg, url, bus.Options{Logger: testLogger(t), PingEvery: 50 * time.Millisecond, PingTimeout: 50 * time.Millisecond})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole() // reconnect attempts now hang in the proxy
	poll(t, waitFor, "notice the black hole", func() bool { return !l.Connected() })
	// The failed ping left pgx sending a cancel request into the black
	// hole; Stop must end that too, while the proxy still holds it.
	l.Stop()
	goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/studioctl/studioctl/internal/testkit/faultproxy.(*Proxy).gate"),
		goleak.IgnoreAnyFunction("github.com/studioctl/studioctl/internal/testkit/faultproxy.(*Proxy).serve.func1"),
		goleak.IgnoreAnyFunction("github.com/studioctl/studioctl/internal/testkit/faultproxy.(*Proxy).serve"),
		goleak.IgnoreAnyFunction("github.com/studioctl/studioctl/internal/testkit/faultproxy.(*Proxy).pipe"))
	if err := proxy.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFailedStartReturnsAnErrorWithoutThePassword(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	url := fmt.Sprintf("postgres://studio:s3cr3t-pw@%s/studio?sslmode=disable", addr)
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	l := bus.NewListener(cfg, url, bus.Options{})
	err = l.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded with nothing to connect to")
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("error shows the password: %v", err)
	}
	if l.Connected() {
		t.Fatal("Connected after a failed Start")
	}
	l.Stop()
}

// TestMeasureLatency measures the time from commit to handler over 1,000
// messages, each in its own transaction. It only reports: run it with
// STUDIO_MEASURE=1 go test -race=false -run TestMeasureLatency -v ./internal/bus/
func TestMeasureLatency(t *testing.T) {
	if os.Getenv("STUDIO_MEASURE") != "1" {
		t.Skip("set STUDIO_MEASURE=1 to measure")
	}
	url, pool, cfg := setup(t)
	arrived := make(chan time.Time, 1)
	l := bus.NewListener(cfg, url, bus.Options{Handler: func(bus.Message) { arrived <- time.Now() }})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	ctx := context.Background()
	const n = 1000
	fromCommit := make([]time.Duration, 0, n)    // Commit called -> handler
	fromCommitted := make([]time.Duration, 0, n) // Commit returned -> handler (negative if the handler ran first)
	for i := range n {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		notify(t, tx, bus.Frame("measure", strconv.Itoa(i), "tick", []byte(`{"i":`+strconv.Itoa(i)+`}`)))
		start := time.Now()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		select {
		case at := <-arrived:
			fromCommit = append(fromCommit, at.Sub(start))
			fromCommitted = append(fromCommitted, at.Sub(committed))
		case <-time.After(waitFor):
			t.Fatalf("message %d not received", i)
		}
	}
	for _, s := range []struct {
		name string
		d    []time.Duration
	}{{"commit called -> handler", fromCommit}, {"commit returned -> handler", fromCommitted}} {
		slices.Sort(s.d)
		t.Logf("%s over %d messages: p50 %s, p99 %s, max %s", s.name, n,
			s.d[n/2], s.d[n*99/100], s.d[n-1])
	}
}

// A Stop during Start ends the first connect (here a dial that hangs until
// its context ends) and waits for it; the Start fails, and nothing of the
// listener is left.
func TestStopDuringStartEndsTheConnectAndLeavesNoGoroutines(t *testing.T) {
	url, _, cfg := setup(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dialing := make(chan struct{})
	var once sync.Once
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		once.Do(func() { close(dialing) })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	l := bus.NewListener(cfg, url, bus.Options{Logger: testLogger(t)})
	started := make(chan error, 1)
	go func() { started <- l.Start(context.Background()) }()
	select {
	case <-dialing:
	case <-time.After(waitFor):
		t.Fatal("Start never dialled")
	}
	l.Stop()
	select {
	case err := <-started:
		if err == nil {
			t.Fatal("Start succeeded although Stop came first")
		}
	case <-time.After(waitFor):
		t.Fatal("Start did not return after Stop")
	}
	select {
	case <-l.Started():
		t.Error("Started closed after a failed Start")
	default:
	}
	if l.Connected() {
		t.Error("Connected after a failed Start")
	}
}
