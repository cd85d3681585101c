package statuspage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/statuspage"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// The replica serves the page at / from the database: every section has
// the installation's rows, and text from the database is escaped.
func TestReplicaServesThePageWithEverySectionFromTheDatabase(t *testing.T) {
	in := installation(t)
	addr, pool := in.addrA, in.pool
	addLock(t, pool, hostileLockName, hostileLockHolder)
	resp, body := do(t, http.MethodGet, "http://"+addr+"/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Cache-Control"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	for _, want := range []string{
		`<meta name="viewport"`,
		`data-replica="replica-a"`, `data-replica="replica-b"`, // replicas
		`data-job="nightly-report"`, `data-job="flaky-export"`, `data-job="compact@eu-west"`, // jobs, and a duty per cluster
		`exit status 3`,                                // the failing job's error
		`data-lease="eu-west"`, `data-lease="us-east"`, // leases
		`data-lock="nightly-report"`, // locks
		`data-run=`,                  // runs
		`<script>`,                   // the live script
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// Untrusted text is escaped, in text and in attributes.
	for _, bad := range []string{`<img src=x`, `<script>window.pwned`} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains unescaped %q", bad)
		}
	}
	if !strings.Contains(body, `&lt;img src=x onerror=&#34;window.pwned=1&#34;&gt;`) {
		t.Errorf("page lacks the escaped hostile lock name")
	}
}

// The page changes nothing: only GET and HEAD are served, and the live
// script's fragment is the <main> element alone.
func TestPageIsReadOnlyAndServesItsFragment(t *testing.T) {
	addr := installation(t).addrA
	base := "http://" + addr + "/"
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		resp, body := do(t, m, base)
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /: %d, want 405\n%s", m, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, http.MethodHead, base); resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("HEAD /: %d %q", resp.StatusCode, body)
	}
	resp, body := do(t, http.MethodGet, base+"?fragment=main")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, `<main id="main"`) || !strings.HasSuffix(body, "</main>") ||
		strings.Contains(body, "<html") || !strings.Contains(body, `data-job="nightly-report"`) {
		t.Errorf("fragment: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := do(t, http.MethodGet, base+"?fragment=nosuch"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown fragment: %d, want 400", resp.StatusCode)
	}
	// Other paths are not the page.
	if resp, _ := do(t, http.MethodGet, base+"nosuch"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nosuch: %d, want 404", resp.StatusCode)
	}
}

// A snapshot that cannot be read shows why, with 503, in the same page
// (the live script keeps the last good one); the read runs in a read-only
// transaction.
func TestPageShowsWhyItCannotReadTheDatabase(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := testPool(t, url)
	h := statuspage.New(statuspage.Options{DB: pool, ReplicaID: "r1",
		LockTable: locks.Table{Name: "no_such_locks", NameCol: "name", LockUntil: "lock_until", LockedAt: "locked_at", LockedBy: "locked_by"}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "Cannot read the installation") || !strings.Contains(body, "no_such_locks") {
		t.Fatalf("%d\n%s", rec.Code, body)
	}
	// An empty installation renders every section's empty state.
	h = statuspage.New(statuspage.Options{DB: pool})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("empty installation: %d\n%s", rec.Code, rec.Body.String())
	}
	for _, want := range []string{"No replica has registered.", "No job has reported a status.", "No run yet.", "No cluster is configured.", "The lock table is empty."} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("empty page lacks %q", want)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_audit`).Scan(&n); err != nil || n != 0 {
		t.Errorf("audit rows after reading the page: %d, %v", n, err)
	}
}

// The latest runs are the newest by start time across replicas. Each
// replica numbers its runs from its own block of seqs, so ordering by seq
// (as the first version did) listed one replica's old runs above the
// other's new ones.
func TestLatestRunsAreNewestFirstAcrossReplicas(t *testing.T) {
	in := installation(t)
	addr, pool := in.addrA, in.pool
	ctx := context.Background()
	// A run that started later than another has the smaller seq (it is
	// of the replica with the lower block).
	waitUntil(t, 60*time.Second, "seqs that disagree with start times", func() bool {
		var ok bool
		pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_run a JOIN studio_job_run b ON a.started_at > b.started_at AND a.seq < b.seq)`).Scan(&ok)
		return ok
	})
	var want []string
	rows, err := pool.Query(ctx, `SELECT seq::text FROM studio_job_run ORDER BY started_at DESC, seq DESC LIMIT $1`, statuspage.MaxRuns)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		want = append(want, s)
	}
	_, body := do(t, http.MethodGet, "http://"+addr+"/?fragment=main")
	var got []string
	var started []int64
	for _, m := range regexp.MustCompile(`data-run="(\d+)" data-started="(\d+)"`).FindAllStringSubmatch(body, -1) {
		got = append(got, m[1])
		ms, _ := strconv.ParseInt(m[2], 10, 64)
		started = append(started, ms)
	}
	for i := 1; i < len(started); i++ {
		if started[i] > started[i-1] {
			t.Errorf("run %s (started %d) is listed below run %s (started %d)", got[i], started[i], got[i-1], started[i-1])
		}
	}
	// The page's snapshot may hold a run or two fewer or more than ours,
	// taken a moment apart; the newest it lists is among our newest.
	if len(got) == 0 || !slices.Contains(want[:min(3, len(want))], got[0]) && !slices.Contains(got[:min(3, len(got))], want[0]) {
		t.Errorf("newest runs on the page %v, in the database %v", got, want)
	}
}

// countingDB counts the snapshots the page reads (one transaction each).
type countingDB struct {
	statuspage.Querier
	begins atomic.Int64
}

func (c *countingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	c.begins.Add(1)
	return c.Querier.Begin(ctx)
}

// Many pages refetching at once (one event, every open page) share
// snapshots, yet each gets one read after it asked.
func TestConcurrentRequestsShareSnapshots(t *testing.T) {
	url := pgtest.NewDB(t)
	cdb := &countingDB{Querier: testPool(t, url)}
	h := statuspage.New(statuspage.Options{DB: cdb})
	const pages = 40
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range pages {
		wg.Go(func() {
			<-start
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?fragment=main", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("%d %s", rec.Code, rec.Body.String())
			}
		})
	}
	close(start)
	wg.Wait()
	n := cdb.begins.Load()
	t.Logf("%d concurrent requests read %d snapshots", pages, n)
	if n > pages/4 {
		t.Errorf("%d concurrent requests read %d snapshots; want them shared", pages, n)
	}
	// A request after those gets a new snapshot, not the old one.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if got := cdb.begins.Load(); got != n+1 {
		t.Errorf("a later request read %d snapshots, want 1", got-n)
	}
}
