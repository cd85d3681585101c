package e2estream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

const benchEnv = "STUDIO_BENCH_STREAM"

// The measurement of docs/benchmarks.md ("Event stream"):
//
//	STUDIO_BENCH_STREAM=1 STUDIO_BENCH_NORACE=1 go test -count=1 -v -timeout 20m ./internal/e2e/stream
//
// One replica runs 50 instance jobs every second (a no-op SQL task), so
// about 50 runs a second. For a window without clients, then the same
// window with 200 SSE clients, it reads the replica's CPU and RSS from
// /proc and its heartbeat gap from /metrics; one of the clients times
// each finished run from its finished_at to its arrival.
func TestMeasureStreamLatencyAndClients(t *testing.T) {
	if os.Getenv(benchEnv) != "1" {
		t.Skip("a measurement: set " + benchEnv + "=1")
	}
	const jobsN, clients = 50, 200
	window := 60 * time.Second
	if s := os.Getenv("STUDIO_BENCH_STREAM_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		window = d
	}
	url := pgtest.NewDB(t)
	var conf strings.Builder
	conf.WriteString("database:\n  sql_as_replica: true # the replica's role, as before issue 21's item 3\njobs:\n")
	for i := range jobsN {
		fmt.Fprintf(&conf, "  - id: tick-%02d\n    scope: instance\n    every: 1s\n    run:\n      sql: SELECT 1\n", i)
	}
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := studioctlBin.Start(t, replicaproc.Options{ID: "s1", DatabaseURL: url, Args: []string{"--config", path}})
	addr := p.WaitReady(t)
	time.Sleep(10 * time.Second) // a measurement's warm-up, not synchronisation

	idle := sample(t, p.PID(), addr, window, nil)
	t.Logf("without clients: %s", idle)

	var lat latencies
	var received atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ready := make(chan struct{}, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client(ctx, t, addr, i == 0, &lat, &received, ready)
		}()
	}
	for range clients {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatal("the clients did not all connect")
		}
	}
	lat.reset()
	received.Store(0)
	busy := sample(t, p.PID(), addr, window, &received)
	cancel()
	wg.Wait()
	t.Logf("with %d clients: %s", clients, busy)
	ds := lat.sorted()
	if len(ds) == 0 {
		t.Fatal("no latency samples")
	}
	t.Logf("run end to SSE client, %d runs: p50 %s, p99 %s, max %s", len(ds), pct(ds, 0.5), pct(ds, 0.99), ds[len(ds)-1])
	t.Logf("ratios with/without clients: CPU %.2fx, RSS %.2fx", busy.cpu/idle.cpu, busy.rssMiB/idle.rssMiB)
	if busy.dropped > 0 {
		t.Errorf("%.0f clients dropped", busy.dropped)
	}
	p.Signal(t, syscall.SIGTERM)
	p.WaitExit(t, replicaproc.ExitTimeout)
}

type window struct {
	wall        time.Duration
	cpu         float64 // cores
	rssMiB      float64 // max
	maxGapS     float64 // studio_replica_heartbeat_max_gap_seconds at the end
	dropped     float64 // studio_stream_clients_dropped_total
	eventsPerS  float64 // events received by all clients, per second
	streamReads float64 // studio_stream_reads_total per second
}

func (w window) String() string {
	return fmt.Sprintf("%.0fs: CPU %.3f cores, RSS max %.1f MiB, heartbeat max gap %.2fs, events delivered %.0f/s, hub reads %.1f/s, dropped %.0f",
		w.wall.Seconds(), w.cpu, w.rssMiB, w.maxGapS, w.eventsPerS, w.streamReads, w.dropped)
}

// sample measures the process pid for d.
func sample(t *testing.T, pid int, addr string, d time.Duration, received *atomic.Int64) window {
	t.Helper()
	cpu0 := replicaproc.CPU(pid)
	reads0 := mustMetric(t, addr, "studio_stream_reads_total")
	start := time.Now()
	var rss float64
	for time.Since(start) < d {
		rss = max(rss, replicaproc.RSS(pid))
		time.Sleep(500 * time.Millisecond) // sampling, not synchronisation
	}
	wall := time.Since(start)
	w := window{wall: wall, cpu: (replicaproc.CPU(pid) - cpu0).Seconds() / wall.Seconds(), rssMiB: rss,
		maxGapS:     mustMetric(t, addr, "studio_replica_heartbeat_max_gap_seconds"),
		dropped:     mustMetric(t, addr, "studio_stream_clients_dropped_total"),
		streamReads: (mustMetric(t, addr, "studio_stream_reads_total") - reads0) / wall.Seconds()}
	if received != nil {
		w.eventsPerS = float64(received.Load()) / wall.Seconds()
	}
	return w
}

// client reads /v1/events until ctx ends; timer records latencies.
func client(ctx context.Context, t *testing.T, addr string, timer bool, lat *latencies, received *atomic.Int64, ready chan<- struct{}) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/v1/events", nil)
	if err != nil {
		t.Error(err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	ready <- struct{}{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		received.Add(1)
		if !timer {
			continue
		}
		var d struct {
			FinishedAt *time.Time `json:"finished_at"`
		}
		if json.Unmarshal([]byte(line[len("data: "):]), &d) == nil && d.FinishedAt != nil {
			lat.add(time.Since(*d.FinishedAt))
		}
	}
}

type latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.ds = append(l.ds, d); l.mu.Unlock() }
func (l *latencies) reset()              { l.mu.Lock(); l.ds = nil; l.mu.Unlock() }
func (l *latencies) sorted() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.ds))
}

func pct(ds []time.Duration, q float64) time.Duration {
	return ds[min(int(q*float64(len(ds))), len(ds)-1)].Round(time.Millisecond)
}

// mustMetric reads one sample of the replica's /metrics or fails the test.
func mustMetric(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, err := replicaproc.Metric(addr, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
