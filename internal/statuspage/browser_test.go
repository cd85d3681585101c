package statuspage_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
)

// liveWithin is the bound: a run that happens while the page is
// open appears within it, without a reload.
const liveWithin = 2 * time.Second

// envScreenshot names a file to which the browser test also writes the
// desktop screenshot (for docs/status-page.png).
const envScreenshot = "STUDIO_SCREENSHOT"

// chromiumPath finds headless Chromium: Debian's chromium package at
// /usr/bin/chromium, or chromium on PATH. Without it the browser tests
// fail: they must not pass by skipping.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := findChromium("/usr/bin/chromium")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func findChromium(fixed string) (string, error) {
	if st, err := os.Stat(fixed); err == nil && !st.IsDir() {
		return fixed, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("chromium not found at %s or on PATH: install Debian's chromium package "+
		"(apt-get install chromium; .ci/run installs it when it is missing)", fixed)
}

// Without Chromium the browser tests fail with a message that says to
// install it (chromiumPath calls t.Fatal with it).
func TestWithoutChromiumTheBrowserTestsSayToInstallIt(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findChromium(filepath.Join(t.TempDir(), "chromium"))
	if err == nil || !strings.Contains(err.Error(), "install Debian's chromium package") {
		t.Fatalf("findChromium without chromium: %v", err)
	}
}

// browser is one headless Chromium tab with what its page wrote to the
// console (calls of the console API, uncaught exceptions, browser log
// entries) and the dialogs it opened.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	dialogs []string
}

func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	var wg sync.WaitGroup
	console := chromedp.Console(ctx)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	})
	wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		wg.Wait()
	})
	return b
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) media(t *testing.T, features ...*emulation.MediaFeature) {
	t.Helper()
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features}); err != nil {
		t.Fatalf("emulate media %v: %v", features, err)
	}
}

// waitFor polls a JavaScript expression in the page until it is true.
func (b *browser) waitFor(t *testing.T, d time.Duration, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !eval[bool](t, b, expr) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (%s)", d, what, expr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// screenshot writes a PNG of the whole page to the test's artifact folder
// (go test -artifacts keeps it) and, when given, to extra too.
func (b *browser) screenshot(t *testing.T, name, extra string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	paths := []string{filepath.Join(t.ArtifactDir(), name)}
	if extra != "" {
		paths = append(paths, extra)
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatalf("write screenshot: %v", err)
		}
		t.Logf("screenshot (%d bytes): %s", len(png), p)
	}
}

// consoleErrors are the page's console errors and uncaught exceptions.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
		}
	}
	return out
}

func (b *browser) dialogsOpened() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// sectionRows is how many rows each section of the page lists.
const sectionRows = `(() => { const n = {}; for (const s of ["replicas", "jobs", "runs", "leases", "locks"]) ` +
	`n[s] = document.querySelectorAll("#" + s + " tbody tr").length; return n; })()`

func checkSectionsFilled(t *testing.T, b *browser) {
	t.Helper()
	rows := eval[map[string]int](t, b, sectionRows)
	for _, s := range []string{"replicas", "jobs", "runs", "leases", "locks"} {
		if rows[s] == 0 {
			t.Errorf("section %s has no rows: %v", s, rows)
		}
	}
	text := eval[string](t, b, `document.getElementById("main").innerText`)
	for _, want := range []string{"replica-a", "replica-b", "nightly-report", "flaky-export", "exit status 3", "compact@eu-west",
		"eu-west", "us-east", javaLockName, javaLockHolder} {
		if !strings.Contains(text, want) {
			t.Errorf("page text lacks %q", want)
		}
	}
}

// In headless Chromium, against two real replicas on a real database: the
// page's first paint has every section filled without any script; with
// the script, a run that happens while the page is open appears within 2 s
// without a reload; it is readable on a phone, has a dark mode and
// respects reduced motion; untrusted text runs no script; the console
// stays free of errors. The screenshots are test artifacts.
func TestPageInChromiumIsFilledFromTheDatabaseAndLive(t *testing.T) {
	in := installation(t)
	addr, pool := in.addrA, in.pool
	url := "http://" + addr + "/"
	b := newBrowser(t, 1200, 900)

	t.Run("first paint needs no script", func(t *testing.T) {
		if _, err := chromedp.Call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		b.do(t, "navigate", chromedp.Navigate(url))
		checkSectionsFilled(t, b)
		if s := eval[string](t, b, `document.getElementById("live").textContent`); s != "static" {
			t.Errorf("with script disabled the live marker says %q, want static", s)
		}
		if _, err := chromedp.Call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a new run appears without a reload", func(t *testing.T) {
		b.do(t, "navigate", chromedp.Navigate(url))
		b.waitFor(t, 10*time.Second, "the live stream to open", `document.getElementById("live").textContent === "live"`)
		checkSectionsFilled(t, b)
		eval[chromedp.Void](t, b, `window.notReloaded = true`)
		runAppears(t, b, pool)
		if !eval[bool](t, b, `window.notReloaded === true`) {
			t.Error("the page was reloaded")
		}
		b.screenshot(t, "status-page.png", os.Getenv(envScreenshot))
	})

	t.Run("untrusted text runs no script", func(t *testing.T) {
		addLock(t, pool, hostileLockName, hostileLockHolder)
		b.do(t, "navigate", chromedp.Navigate(url))
		b.waitFor(t, 10*time.Second, "the live stream to open", `document.getElementById("live").textContent === "live"`)
		text := eval[string](t, b, `document.getElementById("locks").innerText`)
		for _, want := range []string{hostileLockName, hostileLockHolder} {
			if !strings.Contains(text, want) {
				t.Errorf("the locks section does not show %q as text:\n%s", want, text)
			}
		}
		if eval[bool](t, b, `"pwned" in window`) {
			t.Error("markup from the lock table ran")
		}
		if n := eval[int](t, b, `document.querySelectorAll("main img, main script").length`); n != 0 {
			t.Errorf("%d img or script elements in main, from the database's text", n)
		}
		if d := b.dialogsOpened(); len(d) > 0 {
			t.Errorf("dialogs opened: %q", d)
		}
	})

	t.Run("dark mode and reduced motion", func(t *testing.T) {
		b.media(t, &emulation.MediaFeature{Name: "prefers-color-scheme", Value: "light"})
		light := eval[string](t, b, `getComputedStyle(document.body).backgroundColor`)
		b.media(t, &emulation.MediaFeature{Name: "prefers-color-scheme", Value: "dark"})
		dark := eval[string](t, b, `getComputedStyle(document.body).backgroundColor`)
		if light == dark || dark != "rgb(17, 19, 21)" {
			t.Errorf("background light %s, dark %s: want a dark one in dark mode", light, dark)
		}
		b.screenshot(t, "status-page-dark.png", "")
		// A new run's row is highlighted; the highlight fades only when
		// motion is welcome.
		anim := `(() => { const r = document.querySelector("#runs tbody tr"); r.classList.add("new"); ` +
			`const a = getComputedStyle(r.cells[0]).animationName; r.classList.remove("new"); return a; })()`
		b.media(t, &emulation.MediaFeature{Name: "prefers-reduced-motion", Value: "no-preference"})
		if a := eval[string](t, b, anim); a != "fade" {
			t.Errorf("animation without a motion preference: %q, want fade", a)
		}
		b.media(t, &emulation.MediaFeature{Name: "prefers-reduced-motion", Value: "reduce"})
		if a := eval[string](t, b, anim); a != "none" {
			t.Errorf("animation with reduced motion: %q, want none", a)
		}
		b.media(t)
	})

	t.Run("readable on a phone", func(t *testing.T) {
		b.do(t, "emulate a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		b.do(t, "navigate", chromedp.Navigate(url))
		b.waitFor(t, 10*time.Second, "the live stream to open", `document.getElementById("live").textContent === "live"`)
		if w := eval[map[string]int](t, b, `({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})`); w["scroll"] > w["inner"] {
			t.Errorf("the page is wider than a phone's screen: %v", w)
		}
		// Rows become cards, each value with its label.
		if d := eval[string](t, b, `getComputedStyle(document.querySelector("#jobs thead")).position`); d != "absolute" {
			t.Errorf("table header on a phone: position %q, want hidden (absolute)", d)
		}
		checkSectionsFilled(t, b)
		b.screenshot(t, "status-page-phone.png", "")
		b.do(t, "reset emulation", chromedp.EmulateReset())
	})

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// runAppears triggers a run of the backup job and measures how long after
// its row is in the database the open page lists it, and then its end.
func runAppears(t *testing.T, b *browser, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var before []int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(seq), '{}') FROM studio_job_run`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	trigger(t, pool, "backup")
	var seq int64
	var inDB time.Time
	waitUntil(t, 30*time.Second, "the triggered run's row", func() bool {
		pool.QueryRow(ctx, `SELECT coalesce((SELECT seq FROM studio_job_run WHERE job_id = 'backup' AND seq <> ALL($1) ORDER BY started_at LIMIT 1), 0)`, before).Scan(&seq)
		inDB = time.Now()
		return seq > 0
	})
	row := fmt.Sprintf(`document.querySelector('#runs tr[data-run="%d"]')`, seq)
	b.waitFor(t, 10*time.Second, "the new run on the page", row+` !== null`)
	shown := time.Since(inDB)
	t.Logf("run %d: on the page %s after its row was in the database (%s after the trigger)", seq, shown.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if shown > liveWithin {
		t.Errorf("the run appeared %s after its row was written, want within %s", shown, liveWithin)
	}
	// Its end, once recorded, follows as well.
	waitUntil(t, 30*time.Second, "the run's end in the database", func() bool {
		var done bool
		pool.QueryRow(ctx, `SELECT finished_at IS NOT NULL FROM studio_job_run WHERE seq = $1`, seq).Scan(&done)
		inDB = time.Now()
		return done
	})
	b.waitFor(t, 10*time.Second, "the run's end on the page", row+`.textContent.includes("succeeded")`)
	if shown := time.Since(inDB); shown > liveWithin {
		t.Errorf("the run's end appeared %s after it was written, want within %s", shown, liveWithin)
	}
}

// balancer stands for a load balancer in front of the replicas: each
// request goes to the first backend whose /readyz answers 200, so all of
// them go to the first replica while it is ready. Server-sent events
// stream through (httputil.ReverseProxy flushes them at once).
type balancer struct {
	backends []string
	proxies  map[string]*httputil.ReverseProxy
	mu       sync.Mutex
	streams  []string // the backend of each /v1/events request, in order
}

func newBalancer(backends ...string) *balancer {
	lb := &balancer{backends: backends, proxies: map[string]*httputil.ReverseProxy{}}
	for _, b := range backends {
		lb.proxies[b] = httputil.NewSingleHostReverseProxy(&neturl.URL{Scheme: "http", Host: b})
	}
	return lb
}

func (lb *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, b := range lb.backends {
		resp, err := http.Get("http://" + b + "/readyz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		if r.URL.Path == "/v1/events" {
			lb.mu.Lock()
			lb.streams = append(lb.streams, b)
			lb.mu.Unlock()
		}
		lb.proxies[b].ServeHTTP(w, r)
		return
	}
	http.Error(w, "no ready replica", http.StatusBadGateway)
}

func (lb *balancer) streamBackends() []string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return append([]string(nil), lb.streams...)
}

// Behind a load balancer, a page stays live when its replica drains: the
// replica sends reconnect, the page's stream moves to the other replica
// (resuming from its last event id), the page shows the drained replica
// stopped, and a run on the other replica appears within 2 s.
func TestPageBehindALoadBalancerStaysLiveWhenItsReplicaDrains(t *testing.T) {
	in := installation(t)
	lb := newBalancer(in.addrA, in.addrB)
	srv := httptest.NewServer(lb)
	t.Cleanup(srv.Close)
	b := newBrowser(t, 1200, 900) // closed before the server: its stream ends first
	b.do(t, "navigate", chromedp.Navigate(srv.URL+"/"))
	b.waitFor(t, 10*time.Second, "the live stream to open", `document.getElementById("live").textContent === "live"`)
	if by := eval[string](t, b, `document.getElementById("served-by").textContent`); by != "replica-a" {
		t.Fatalf("served by %q, want replica-a", by)
	}
	in.a.Drain("test: drain the page's replica")
	select {
	case <-in.a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("replica-a did not stop")
	}
	b.waitFor(t, 10*time.Second, "the page to show replica-a stopped, served by replica-b",
		`document.querySelector('tr[data-replica="replica-a"]').innerText.includes("stopped") && `+
			`document.getElementById("served-by").textContent === "replica-b"`)
	b.waitFor(t, 10*time.Second, "the live stream to open again", `document.getElementById("live").textContent === "live"`)
	streams := lb.streamBackends()
	if len(streams) < 2 || streams[0] != in.addrA || streams[len(streams)-1] != in.addrB {
		t.Errorf("event streams went to %v, want first %s (replica-a), last %s (replica-b)", streams, in.addrA, in.addrB)
	}
	eval[chromedp.Void](t, b, `window.notReloaded = true`)
	runAppears(t, b, in.pool)
	if !eval[bool](t, b, `window.notReloaded === true`) {
		t.Error("the page was reloaded")
	}
	b.screenshot(t, "status-page-after-drain.png", "")
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
