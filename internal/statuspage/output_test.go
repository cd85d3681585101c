package statuspage_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A failing job's last output is one click away: the page links it, and
// /v1/jobs/{id}/output returns the stored tail as text/plain, as
// `studioctl jobs output` prints it.
func TestPageLinksAFailingJobsOutputServedAsPlainText(t *testing.T) {
	in := installation(t)
	base := "http://" + in.addrA
	resp, body := do(t, http.MethodGet, base+"/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(body, `<a href="v1/jobs/flaky-export/output" data-output="flaky-export">last output</a>`) {
		t.Errorf("the page does not link the failing job's output")
	}
	if strings.Contains(body, `data-output="nightly-report"`) {
		t.Errorf("the page links the output of a job that is not failing")
	}
	if !strings.Contains(body, `data-output-run=`) {
		t.Errorf("the latest runs do not link their output")
	}

	resp, body = do(t, http.MethodGet, base+"/v1/jobs/flaky-export/output")
	if resp.StatusCode != http.StatusOK || body != "upload refused\n" {
		t.Fatalf("GET flaky-export's output: %d %q, want 200 %q", resp.StatusCode, body, "upload refused\n")
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Cache-Control"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	if resp, body := do(t, http.MethodGet, base+"/v1/jobs/compact@eu-west/output"); resp.StatusCode != http.StatusOK || body != "compacted\n" {
		t.Errorf("GET compact@eu-west's output: %d %q", resp.StatusCode, body)
	}
	var reportSeq int64
	if err := in.pool.QueryRow(context.Background(), `SELECT seq FROM studio_job_run WHERE job_id = 'nightly-report' LIMIT 1`).Scan(&reportSeq); err != nil {
		t.Fatal(err)
	}
	if resp, body := do(t, http.MethodGet, base+"/v1/jobs/nightly-report/output?seq="+strconv.FormatInt(reportSeq, 10)); resp.StatusCode != http.StatusOK || body != "report done\n" {
		t.Errorf("GET nightly-report's run %d: %d %q", reportSeq, resp.StatusCode, body)
	}

	for _, tc := range []struct {
		path   string
		status int
		says   string
	}{
		{"/v1/jobs/nope/output", http.StatusNotFound, `job "nope": no such job`},
		{"/v1/jobs/flaky-export/output?seq=" + strconv.FormatInt(reportSeq, 10), http.StatusNotFound, `is a run of job "nightly-report", not of "flaky-export"`},
		{"/v1/jobs/flaky-export/output?seq=99999999", http.StatusNotFound, "run 99999999: no such run"},
		{"/v1/jobs/flaky-export/output?seq=abc", http.StatusBadRequest, `seq: "abc" is not a run's sequence number`},
		{"/v1/jobs/Bad!/output", http.StatusBadRequest, "job id: "},
	} {
		resp, body := do(t, http.MethodGet, base+tc.path)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("GET %s: %d %q, want %d saying %q", tc.path, resp.StatusCode, body, tc.status, tc.says)
		}
	}
	if resp, body := do(t, http.MethodPost, base+"/v1/jobs/flaky-export/output"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST output: %d %q, want 405", resp.StatusCode, body)
	}

	// In Chromium: the link opens the output.
	b := newBrowser(t, 1200, 900)
	b.do(t, "navigate", chromedp.Navigate(base+"/"))
	eval[chromedp.Void](t, b, `document.querySelector('a[data-output="flaky-export"]').click()`)
	b.waitFor(t, 10*time.Second, "the output to open", `location.pathname === "/v1/jobs/flaky-export/output" && document.body.innerText.includes("upload refused")`)
}

// Behind a proxy that serves the page under a path prefix (which
// docs/status-page.md allows: the page's own URLs are relative), the
// output links still reach the output: they were absolute (/v1/jobs/...),
// which left the prefix and hit whatever the proxy serves at /.
func TestOutputLinksWorkUnderAPathPrefix(t *testing.T) {
	in := installation(t)
	target, err := url.Parse("http://" + in.addrA)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	mux := http.NewServeMux()
	mux.Handle("/studio/", http.StripPrefix("/studio", rp))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "another app", http.StatusTeapot) })
	proxy := httptest.NewServer(mux)
	t.Cleanup(proxy.Close)

	page, err := url.Parse(proxy.URL + "/studio/")
	if err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, http.MethodGet, page.String())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /studio/: %d\n%s", resp.StatusCode, body)
	}
	m := regexp.MustCompile(`<a href="([^"]*)" data-output="flaky-export">`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the page does not link the failing job's output")
	}
	ref, err := url.Parse(html.UnescapeString(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	link := page.ResolveReference(ref).String()
	if resp, body := do(t, http.MethodGet, link); resp.StatusCode != http.StatusOK || body != "upload refused\n" {
		t.Errorf("the output link %q (from %q) under the prefix: %d %q, want 200 %q", m[1], link, resp.StatusCode, body, "upload refused\n")
	}
}
