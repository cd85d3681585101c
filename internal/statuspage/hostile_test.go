package statuspage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/statuspage"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Text from the database that html/template leaves as it is but that still
// misleads a reader: bidirectional overrides reorder what the page shows
// (a lock holder "evil\u202Etxt.exe" reads as "evilexe.txt"), and control
// characters are invisible. The page shows them as escapes, as the CLI does
// (output.Safe), in text and in attributes. And a run's error of a
// megabyte does not make the page a megabyte per row: the cell's title
// holds a bounded part of it.
func TestHostileTextIsShownAsEscapesAndBounded(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := testPool(t, url)
	ctx := context.Background()
	for _, stmt := range []string{
		`INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES (E'web\u202E1', gen_random_uuid(), E'host\x1b]0;pwned\x07', 1, 'v', 'ready')`,
		`INSERT INTO shedlock VALUES (E'report\u202Etxt.exe', timezone('utc', now()) + interval '5 minutes', timezone('utc', now()), E'java\u2066node')`,
		`INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, error)
		 VALUES (E'job\u202Ex', 'r1', now(), now(), 'failed', E'boom\u202E' || repeat('x', 1000000))`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	h := statuspage.New(statuspage.Options{DB: pool})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /: %d\n%.2000s", rec.Code, body)
	}
	for _, bad := range []string{"\u202e", "\u2066", "\x1b", "\x07"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page holds a raw %q", bad)
		}
	}
	for _, want := range []string{`web\u202e1`, `report\u202etxt.exe`, `java\u2066node`, `host\x1b]0;pwned\x07`, `job\u202ex`, `boom\u202e`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if len(body) > 200_000 {
		t.Errorf("the page is %d bytes with one run's megabyte error; want it bounded", len(body))
	}
	// The live script still runs: its CSP hash matches the script sent.
	csp := rec.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'sha256-") {
		t.Fatalf("CSP %q", csp)
	}
}
