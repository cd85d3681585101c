// Command peers10k is the peer side of bench/run-10k.sh: it schedules the
// same 10,000 no-op jobs as internal/runner's TestBench10k (job i every
// 1 s + (i mod 10) s) in-process with go-co-op/gocron v2 or robfig/cron v3,
// warms up, measures a steady-state window, and writes the same JSON fields
// (lateness, CPU, RSS). `peers10k report FILE...` prints the side-by-side
// table with medians and ratios.
//
// It is its own module so the product's go.mod never gains gocron.
package main

import (
	"container/heap"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/robfig/cron/v3"
)

const (
	maxSamples = 400_000
	sampleRSS  = time.Second
)

func main() { os.Exit(Main(os.Args[1:])) }

// Main runs `run` or `report`.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: peers10k run -lib {gocron|robfig} [-jobs N] [-warmup D] [-window D] [-out FILE] | peers10k report FILE...")
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runCmd(args[1:])
	case "report":
		err = report(os.Stdout, args[1:])
	default:
		err = fmt.Errorf("unknown command %q: want run or report", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers10k:", err)
		return 1
	}
	return 0
}

// result carries the fields of TestBench10k's JSON that a peer can measure.
type result struct {
	Program       string  `json:"program"`
	Version       string  `json:"version"`
	Jobs          int     `json:"jobs"`
	WarmupS       float64 `json:"warmup_s"`
	WindowS       float64 `json:"window_s"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	Fires         int     `json:"fires"`
	FiresPerS     float64 `json:"fires_per_s"`
	LatenessP50ms float64 `json:"lateness_p50_ms"`
	LatenessP99ms float64 `json:"lateness_p99_ms"`
	LatenessMaxMs float64 `json:"lateness_max_ms"`
	LatenessMinMs float64 `json:"lateness_min_ms"`
	LatenessMean  float64 `json:"lateness_mean_ms"`
	CPUCores      float64 `json:"cpu_cores"`
	// RunqWaitMsPerS is how long the process's threads were runnable but
	// waited for a CPU, per second (schedstat run_delay): the machine's noise.
	RunqWaitMsPerS float64 `json:"runq_wait_ms_per_s"`
	RSSMiBMax      float64 `json:"rss_mib_max"`
	RSSMiBStart    float64 `json:"rss_mib_start"`
	HeapInuseMiB   float64 `json:"heap_inuse_mib"`
	Goroutines     int     `json:"goroutines"`

	// Only the studioctl runner has these.
	DBStatementsPerS float64 `json:"db_statements_per_s,omitempty"`
	DBServerCPUCores float64 `json:"db_server_cpu_cores,omitempty"`
	StoreFlushesPerS float64 `json:"store_flushes_per_s,omitempty"`
}

// recorder keeps the lateness of every fire while the window is open.
type recorder struct {
	on      atomic.Bool
	mu      sync.Mutex
	samples []time.Duration
}

func (r *recorder) add(d time.Duration) {
	if !r.on.Load() {
		return
	}
	r.mu.Lock()
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, d)
	}
	r.mu.Unlock()
}

// noop is one job's task: lateness = fire time - (previous fire + interval).
// Both libraries are set up so that a job never overlaps itself, so last
// needs no lock.
type noop struct {
	every time.Duration
	last  time.Time
	rec   *recorder
}

func (n *noop) fire() {
	now := time.Now()
	if !n.last.IsZero() {
		n.rec.add(now.Sub(n.last.Add(n.every)))
	}
	n.last = now
}

// Run satisfies cron.Job.
func (n *noop) Run() { n.fire() }

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	lib := fs.String("lib", "", "gocron or robfig")
	n := fs.Int("jobs", 10_000, "number of jobs")
	warmup := fs.Duration("warmup", 20*time.Second, "warm-up before the window")
	window := fs.Duration("window", 60*time.Second, "measured steady-state window")
	out := fs.String("out", "", "write the JSON result here (also printed to stdout)")
	singleton := fs.Bool("singleton", true, "gocron: WithSingletonMode(LimitModeReschedule) (a goroutine and a 1000-slot channel per job)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rec := &recorder{samples: make([]time.Duration, 0, maxSamples)}
	tasks := make([]*noop, *n)
	for i := range tasks {
		tasks[i] = &noop{every: time.Second + time.Duration(i%10)*time.Second, rec: rec}
	}
	var (
		stop    func() error
		program string
		err     error
	)
	switch *lib {
	case "gocron":
		program = "gocron-v2"
		if !*singleton {
			program = "gocron-v2-nosingleton"
		}
		stop, err = startGocron(tasks, *singleton)
	case "robfig":
		program = "robfig-cron-v3"
		stop, err = startRobfig(tasks)
	case "heap":
		program = "bare-timer-heap"
		stop, err = startHeap(tasks)
	default:
		return fmt.Errorf("-lib %q: want gocron, robfig or heap", *lib)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "peers10k: %s: %d jobs started; warming up %s, then measuring %s\n", program, *n, *warmup, *window)
	time.Sleep(*warmup)

	cpu0, wait0, rss0 := selfCPU(), runqWait(), rss()
	start := time.Now()
	rec.on.Store(true)
	rssMax := sampleRSSUntil(start.Add(*window))
	rec.on.Store(false)
	wall := time.Since(start)
	cpu1, wait1 := selfCPU(), runqWait()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goroutines := runtime.NumGoroutine()
	if err := stop(); err != nil {
		return err
	}

	rec.mu.Lock()
	lat := slices.Clone(rec.samples)
	rec.mu.Unlock()
	res := result{
		Program: program, Version: libVersion(*lib), Jobs: *n, WarmupS: warmup.Seconds(), WindowS: wall.Seconds(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), CPUCores: (cpu1 - cpu0).Seconds() / wall.Seconds(),
		RunqWaitMsPerS: float64((wait1-wait0)/time.Millisecond) / wall.Seconds(),
		RSSMiBMax:      max(rssMax, rss0), RSSMiBStart: rss0, HeapInuseMiB: float64(ms.HeapInuse) / (1 << 20), Goroutines: goroutines,
	}
	lateness(&res, lat, wall)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	os.Stdout.Write(append(b, '\n'))
	if *out != "" {
		return os.WriteFile(*out, append(b, '\n'), 0o644)
	}
	return nil
}

// startGocron schedules every task as a DurationJob counted from the end of
// the previous run (WithIntervalFromCompletion: the fixed delay studioctl
// has), in singleton mode unless told otherwise, with the first fire spread
// over the interval as studioctl's runner spreads it.
func startGocron(tasks []*noop, singleton bool) (func() error, error) {
	s, err := gocron.NewScheduler()
	if err != nil {
		return nil, err
	}
	for _, t := range tasks {
		// From the time of each add: on a loaded machine adding 10,000
		// jobs took more than the second of margin, and gocron refuses a
		// start in the past.
		first := time.Now().Add(time.Second + rand.N(t.every))
		opts := []gocron.JobOption{gocron.WithIntervalFromCompletion(), gocron.WithStartAt(gocron.WithStartDateTime(first))}
		if singleton {
			opts = append(opts, gocron.WithSingletonMode(gocron.LimitModeReschedule))
		}
		_, err := s.NewJob(gocron.DurationJob(t.every), gocron.NewTask(t.fire), opts...)
		if err != nil {
			return nil, fmt.Errorf("gocron: add job: %w", err)
		}
	}
	s.Start()
	return s.Shutdown, nil
}

// startRobfig schedules every task as "@every Ns" behind SkipIfStillRunning.
// robfig/cron rounds @every to whole seconds and counts it from the tick,
// so its fires land on second boundaries; it has no way to spread them.
func startRobfig(tasks []*noop) (func() error, error) {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	for _, t := range tasks {
		if _, err := c.AddJob("@every "+t.every.String(), t); err != nil {
			return nil, fmt.Errorf("robfig: add job: %w", err)
		}
	}
	c.Start()
	return func() error { <-c.Stop().Done(); return nil }, nil
}

// startHeap is the floor: one goroutine over a heap of the tasks' next
// fires and one timer, calling each due task inline and queueing it again
// its delay after it returns, first fires spread as studioctl spreads
// them. No library, no goroutine per run, no recording.
func startHeap(tasks []*noop) (func() error, error) {
	h := make(fireHeap, len(tasks))
	now := time.Now()
	for i, t := range tasks {
		h[i] = &heapItem{t: t, due: now.Add(rand.N(t.every))}
	}
	heap.Init(&h)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		timer := time.NewTimer(time.Until(h[0].due))
		defer timer.Stop()
		for {
			select {
			case <-quit:
				return
			case <-timer.C:
			}
			for now := time.Now(); !h[0].due.After(now); now = time.Now() {
				it := h[0]
				it.t.fire()
				it.due = time.Now().Add(it.t.every)
				heap.Fix(&h, 0)
			}
			timer.Reset(time.Until(h[0].due))
		}
	}()
	return func() error { close(quit); <-done; return nil }, nil
}

type heapItem struct {
	t   *noop
	due time.Time
}

type fireHeap []*heapItem

func (h fireHeap) Len() int           { return len(h) }
func (h fireHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h fireHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *fireHeap) Push(x any)        { *h = append(*h, x.(*heapItem)) }
func (h *fireHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func libVersion(lib string) string {
	path := map[string]string{"gocron": "github.com/go-co-op/gocron/v2", "robfig": "github.com/robfig/cron/v3"}[lib]
	v := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				v = d.Version
			}
		}
	}
	return v + " " + runtime.Version()
}

// lateness fills the fire count and the lateness percentiles (nearest rank).
func lateness(res *result, lat []time.Duration, wall time.Duration) {
	res.Fires = len(lat)
	res.FiresPerS = float64(len(lat)) / wall.Seconds()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p*float64(len(lat))+0.5) - 1
		i = min(max(i, 0), len(lat)-1)
		return ms(lat[i])
	}
	res.LatenessP50ms, res.LatenessP99ms = pct(0.50), pct(0.99)
	res.LatenessMinMs, res.LatenessMaxMs = ms(lat[0]), ms(lat[len(lat)-1])
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	res.LatenessMean = ms(sum) / float64(len(lat))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sampleRSSUntil samples VmRSS every second until end; it returns the peak.
func sampleRSSUntil(end time.Time) float64 {
	var peak float64
	for {
		peak = max(peak, rss())
		left := time.Until(end)
		if left <= 0 {
			return peak
		}
		time.Sleep(min(left, sampleRSS))
	}
}

// rss is this process's resident set in MiB (VmRSS).
func rss() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// runqWait sums run_delay (time runnable, waiting for a CPU) over this
// process's threads.
func runqWait() time.Duration {
	tids, _ := os.ReadDir("/proc/self/task")
	var total int64
	for _, tid := range tids {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", tid.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			total += n
		}
	}
	return time.Duration(total)
}

// selfCPU is the user+system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
