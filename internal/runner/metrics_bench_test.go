package runner

// TestBenchMetrics is a measurement, not a check (SPEC §11): the size of
// /metrics, its scrape time and the memory of the job series, at 100, 1,000
// and 10,000 jobs, with per-job series on and off (docs/metrics.md). It runs
// only with STUDIO_BENCH_METRICS=1:
//
//	STUDIO_BENCH_METRICS=1 go test -count=1 -v -run TestBenchMetrics ./internal/runner
//
// STUDIO_BENCH_METRICS_JOBS (100,1000,10000), STUDIO_BENCH_METRICS_SCRAPES
// (21) and STUDIO_BENCH_METRICS_OUT (a file for the markdown table) change
// it. Each job's series are filled the way runs fill them:
//
//   - steady: every job has succeeded (runs_total{succeeded} and a duration
//     observation), every other job is an installation job that was skipped
//     elsewhere, and 1 job in 100 is failing;
//   - worst: every job has had every outcome, overrun, timed out, lost its
//     lock, been skipped and is failing: every series exists.

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestBenchMetrics(t *testing.T) {
	if os.Getenv("STUDIO_BENCH_METRICS") != "1" {
		t.Skip("a measurement: set STUDIO_BENCH_METRICS=1")
	}
	counts := []int{100, 1000, 10_000}
	if s := os.Getenv("STUDIO_BENCH_METRICS_JOBS"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("STUDIO_BENCH_METRICS_JOBS=%q: want positive whole numbers, comma-separated", s)
			}
			counts = append(counts, n)
		}
	}
	scrapes := 21
	if s := os.Getenv("STUDIO_BENCH_METRICS_SCRAPES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("STUDIO_BENCH_METRICS_SCRAPES=%q: want a positive whole number", s)
		}
		scrapes = n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| jobs | per-job | fill | series | /metrics bytes | gzip bytes | scrape median ms (plain) | scrape median ms (gzip) | heap of the series | metric updates per run |\n")
	fmt.Fprintf(&b, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range counts {
		for _, perJob := range []bool{true, false} {
			for _, fill := range []string{"steady", "worst"} {
				r := benchMetricsOnce(t, n, perJob, fill, scrapes)
				onOff := map[bool]string{true: "on", false: "off"}[perJob]
				fmt.Fprintf(&b, "| %d | %s | %s | %d | %s | %s | %.1f | %.1f | %s | %.0f ns |\n", n, onOff, fill, r.series,
					bytesText(r.plainBytes), bytesText(r.gzipBytes), ms(r.plainScrape), ms(r.gzipScrape), bytesText(r.heap), r.updateNs)
				t.Logf("%d jobs, per-job %s, %s: %d series, %d bytes (%d gzip), scrape %v (%v gzip), heap %d bytes, %.0f ns a run",
					n, onOff, fill, r.series, r.plainBytes, r.gzipBytes, r.plainScrape, r.gzipScrape, r.heap, r.updateNs)
			}
		}
	}
	t.Logf("TestBenchMetrics (%d scrapes each, GOMAXPROCS %d, %s, load average %s):\n%s", scrapes, runtime.GOMAXPROCS(0), runtime.Version(), loadAverage(), b.String())
	if path := os.Getenv("STUDIO_BENCH_METRICS_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type benchMetricsResult struct {
	series                  int
	plainBytes, gzipBytes   int
	plainScrape, gzipScrape time.Duration
	heap                    int64
	updateNs                float64
}

func benchMetricsOnce(t *testing.T, n int, perJob bool, fill string, scrapes int) benchMetricsResult {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%05d", i)
	}
	before := heapAlloc()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, perJob)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		m.runs.WithLabelValues(id, id, string(jobs.OutcomeSucceeded)).Inc()
		m.duration.WithLabelValues(id).Observe(0.05)
		switch fill {
		case "steady":
			if i%2 == 1 {
				m.skipped.WithLabelValues(id).Inc()
			}
			if i%100 == 99 {
				m.runs.WithLabelValues(id, id, string(jobs.OutcomeFailed)).Inc()
			}
		case "worst":
			for _, o := range []jobs.Outcome{jobs.OutcomeInterrupted, jobs.OutcomeTimedOut, jobs.OutcomeLockLost, jobs.OutcomeFailed} {
				m.runs.WithLabelValues(id, id, string(o)).Inc()
			}
			m.overruns.WithLabelValues(id).Inc()
			m.timeouts.WithLabelValues(id).Inc()
			m.lockLost.WithLabelValues(id).Inc()
			m.skipped.WithLabelValues(id).Inc()
		}
	}
	heap := heapAlloc() - before

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	body, _ := scrape(t, srv.URL, false)
	_, gz := scrape(t, srv.URL, true)
	series := 0
	for line := range strings.Lines(body) {
		if line != "\n" && !strings.HasPrefix(line, "#") {
			series++
		}
	}
	var plain, zipped []time.Duration
	for range scrapes {
		start := time.Now()
		scrape(t, srv.URL, false)
		plain = append(plain, time.Since(start))
		start = time.Now()
		scrape(t, srv.URL, true)
		zipped = append(zipped, time.Since(start))
	}
	// What a successful run costs in metric updates (run.go): the run
	// counter (and the failing gauge) and the duration histogram.
	res := testing.Benchmark(func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			id := ids[i%n]
			m.runs.WithLabelValues(id, id, string(jobs.OutcomeSucceeded)).Inc()
			m.duration.WithLabelValues(id).Observe(0.05)
		}
	})
	runtime.KeepAlive(m)
	return benchMetricsResult{series: series, plainBytes: len(body), gzipBytes: gz,
		plainScrape: median(plain), gzipScrape: median(zipped), heap: heap, updateNs: float64(res.NsPerOp())}
}

// scrape GETs url as Prometheus does (gzip asks for a compressed body) and
// returns the body and the bytes on the wire.
func scrape(t *testing.T, url string, gz bool) (string, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Encoding") != "gzip" {
		return string(raw), len(raw)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(plain), len(raw)
}

func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func bytesText[T int | int64](n T) string { return humanBytes(int64(n)) }

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
