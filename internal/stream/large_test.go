package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// A run whose error is a megabyte (a SQL job's RAISE, a command's output)
// must not go out whole to every client and into every replay: the
// 7,500-byte rule of the bus holds for the stream's events too. The event
// keeps its short fields and says truncated; the client refetches.
func TestALargeEventGoesOutTruncated(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the response's body is closed (get)
	err := func() error {
		tx, err := pool.Begin(context.Background())
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if err := addRuns(tx, `INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, error)
VALUES ('big', 'r1', now(), now(), 'failed', repeat('x', 1000000)) RETURNING seq`); err != nil {
			return err
		}
		return tx.Commit(context.Background())
	}()
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, pool, "small", 1)
	all := events(t, pool, 0)
	if len(all) != 2 {
		t.Fatalf("events %v", ids(all))
	}
	for _, e := range all {
		if len(e.Data) > MaxData {
			t.Errorf("Read: event %d has %d bytes of data, want at most %d", e.ID, len(e.Data), MaxData)
		}
	}
	if m := data(t, all[0]); m["truncated"] != true || m["job_id"] != "big" || m["outcome"] != "failed" || m["error"] != nil {
		t.Errorf("the large event's data: %v, want its short fields, no error and truncated", m)
	}
	if m := data(t, all[1]); m["truncated"] != nil || m["job_id"] != "small" {
		t.Errorf("a small event's data: %v, want it whole", m)
	}

	resp := get(t, srv, "/?since=0", nil)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	got := readSSE(t, sc, 2)
	if len(got[0].data) > MaxData || !strings.Contains(got[0].data, `"truncated": true`) {
		t.Fatalf("SSE: the large event has %d bytes of data: %.200s", len(got[0].data), got[0].data)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got[0].data), &m); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m["seq"]) == "" || m["job_id"] != "big" {
		t.Fatalf("SSE: the large event's data %v", m)
	}
}
