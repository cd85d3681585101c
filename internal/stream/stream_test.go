package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

const pollEvery = 10 * time.Millisecond

func openPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

func mustExec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertRuns writes n runs of job and their events in one transaction, as
// a run store flush does (jobstore: the upsert, then studio_event_runs).
func insertRuns(t testing.TB, pool *pgxpool.Pool, job string, n int) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return addRuns(tx, `INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome)
SELECT $1, 'r1', now(), 'running' FROM generate_series(1, $2) RETURNING seq`, job, n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addRuns runs a statement that returns run seqs, then writes their events.
func addRuns(tx pgx.Tx, sql string, args ...any) error {
	ctx := context.Background()
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `SELECT studio_event_runs(array_agg(studio_event_run_data(r) ORDER BY r.seq), '{}')
FROM studio_job_run r WHERE r.seq = ANY($1)`, seqs)
	return err
}

func events(t testing.TB, pool *pgxpool.Pool, after int64) []Event {
	t.Helper()
	evs, err := Read(context.Background(), pool, after, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func data(t testing.TB, e Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Data, &m); err != nil {
		t.Fatalf("event %d data %s: %v", e.ID, e.Data, err)
	}
	return m
}

// The triggers and the run store's function write what happened, and
// nothing for a heartbeat or a renewal.
func TestTriggersWriteEventsForChangesOnly(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	mustExec(t, pool, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('r1', gen_random_uuid(), 'h', 1, 'v', 'starting')`)
	mustExec(t, pool, `UPDATE studio_replica SET state = 'ready' WHERE id = 'r1'`)
	mustExec(t, pool, `UPDATE studio_replica SET heartbeat_at = now() WHERE id = 'r1'`) // no event
	mustExec(t, pool, `INSERT INTO cluster_lease (cluster) VALUES ('c1')`)
	mustExec(t, pool, `UPDATE cluster_lease SET owner = 'r1', renewed_at = now(), generation = generation + 1 WHERE cluster = 'c1'`)
	mustExec(t, pool, `UPDATE cluster_lease SET renewed_at = now() WHERE cluster = 'c1'`)                                                          // no event
	mustExec(t, pool, `INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, outcome) VALUES ('j0', 'r1', 'c1', now(), 'running')`) // no event: not through the run store
	for _, stmt := range []string{
		`INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, outcome) VALUES ('j', 'r1', 'c1', '2026-12-01T10:00:00Z', 'running') RETURNING seq`,
		`UPDATE studio_job_run SET outcome = 'failed', finished_at = '2026-12-01T10:00:01.5Z', error = 'boom' WHERE job_id = 'j' RETURNING seq`,
	} {
		if err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error { return addRuns(tx, stmt) }); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, pool, `INSERT INTO studio_audit (actor, action, target, reason) VALUES ('alice', 'locks.release', 'nightly', 'stuck')`)

	var got []string
	for _, e := range events(t, pool, 0) {
		got = append(got, e.Name)
	}
	want := []string{"replica", "replica", "lease", "lease", "run", "run", "audit", "lock"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	evs := events(t, pool, 0)
	if d := data(t, evs[1]); d["id"] != "r1" || d["state"] != "ready" || d["previous_state"] != "starting" {
		t.Errorf("replica event %v", d)
	}
	if d := data(t, evs[3]); d["cluster"] != "c1" || d["owner"] != "r1" || d["generation"] != float64(1) {
		t.Errorf("lease event %v", d)
	}
	if d := data(t, evs[4]); d["outcome"] != "running" || d["started_at"] != "2026-12-01T10:00:00.000000Z" || d["finished_at"] != nil || d["cluster"] != "c1" {
		t.Errorf("run started event %v", d)
	}
	d := data(t, evs[5])
	for _, k := range []string{"seq", "job_id", "replica_id", "cluster", "outcome", "started_at", "finished_at", "duration_seconds"} {
		if _, ok := d[k]; !ok {
			t.Errorf("run finished event lacks %q: %v", k, d)
		}
	}
	if d["outcome"] != "failed" || d["duration_seconds"] != 1.5 || d["error"] != "boom" {
		t.Errorf("run finished event %v", d)
	}
	if d := data(t, evs[7]); d["name"] != "nightly" || d["action"] != "release" || d["actor"] != "alice" {
		t.Errorf("lock event %v", d)
	}
}

// A transaction that writes a thousand events sends one notification: a
// frame without data naming the first id.
func TestOneNotificationPerTransaction(t *testing.T) {
	t.Parallel()
	pool, url := openPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN studio"); err != nil {
		t.Fatal(err)
	}
	insertRuns(t, pool, "many", 1000)
	insertRuns(t, pool, "more", 3)
	var payloads []string
	for len(payloads) < 2 {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("after %d notifications: %v", len(payloads), err)
		}
		payloads = append(payloads, n.Payload)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if n, err := conn.WaitForNotification(wctx); err == nil {
		t.Fatalf("a third notification for two transactions: %s", n.Payload)
	}
	for _, p := range payloads {
		var m map[string]any
		if err := json.Unmarshal([]byte(p), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] != "frame" || m["stream"] != BusStream || m["truncated"] != true || m["data"] != nil {
			t.Errorf("notification %s: want a frame of stream %q without data", p, BusStream)
		}
	}
	if got := len(events(t, pool, 0)); got != 1003 {
		t.Fatalf("%d events, want 1003", got)
	}
}

// Concurrent writers whose transactions commit out of the order they
// began in: a reader that always reads after the last id it has sees
// every event once. Ids are handed out in commit order.
func TestIdsFollowCommitOrder(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers, each = 6, 30
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := addRuns(tx, `INSERT INTO studio_job_run (job_id, replica_id, started_at, outcome) VALUES ($1, 'r', now(), 'running') RETURNING seq`, fmt.Sprintf("w%d-%d", w, i)); err != nil {
						return err
					}
					// Each transaction takes a while between its event and its
					// commit: without the ordering, a later id would often
					// commit first.
					_, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, float64((w*7+i)%5)/1000)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[int64]bool{}
	var cursor int64
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		evs, err := Read(ctx, pool, cursor, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if seen[e.ID] {
				t.Fatalf("event %d twice", e.ID)
			}
			seen[e.ID] = true
			cursor = e.ID
		}
	}
	for { // the rest, after the last commit
		evs, err := Read(ctx, pool, cursor, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			seen[e.ID] = true
			cursor = e.ID
		}
	}
	all := events(t, pool, 0)
	if len(all) != writers*each {
		t.Fatalf("%d events, want %d", len(all), writers*each)
	}
	// What the incremental reader saw must be everything: an event that
	// committed with a lower id after the reader had passed it would be
	// missing here.
	var missed []int64
	for _, e := range all {
		if !seen[e.ID] {
			missed = append(missed, e.ID)
		}
	}
	if len(missed) > 0 {
		t.Fatalf("the incremental reader missed %d events: %v", len(missed), missed)
	}
}

func startHub(t testing.TB, pool *pgxpool.Pool) *Hub {
	t.Helper()
	h := NewHub(HubOptions{DB: pool})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// recv takes n events from the subscription (backlog first), waking the
// hub as the bus would.
func recv(t testing.TB, h *Hub, s *Sub, n int) []Event {
	t.Helper()
	out := append([]Event(nil), s.Backlog...)
	s.Backlog = nil
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for len(out) < n {
		select {
		case e := <-s.C():
			out = append(out, e)
		case <-tick.C:
			h.Wake()
		case <-deadline:
			t.Fatalf("got %d of %d events", len(out), n)
		}
	}
	return out
}

func ids(evs []Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// A client that reconnects after id N is replayed what it missed and then
// follows the hub, while writers go on: every event once, in order.
func TestReplayThenFollowHasNoGapAndNoDuplicate(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	ctx := context.Background()
	// A first client keeps the hub reading.
	first, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	insertRuns(t, pool, "a", 40)
	got := recv(t, h, first, 40)
	resumeAfter := got[9].ID // the second client saw 10, then went away

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // writers go on during the replay
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			insertRuns(t, pool, fmt.Sprintf("b%d", i), 3)
			if i == 20 {
				return
			}
		}
	}()
	second, err := h.Subscribe(ctx, resumeAfter, false)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	wg.Wait()
	close(stop)
	total := len(events(t, pool, resumeAfter))
	seen := recv(t, h, second, total)
	want := ids(events(t, pool, resumeAfter))
	if !slices.Equal(ids(seen), want) {
		t.Fatalf("replay and follow: got %v\nwant %v", ids(seen), want)
	}
}

// More than ReplayMax missed events: a resync, then the live events.
func TestResyncPastTheReplayCap(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	insertRuns(t, pool, "x", 1)
	start := events(t, pool, 0)[0].ID
	insertRuns(t, pool, "y", ReplayMax+1)
	s, err := h.Subscribe(context.Background(), start, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Resync || len(s.Backlog) != 0 {
		t.Fatalf("resync %v, backlog %d: want a resync and no replay", s.Resync, len(s.Backlog))
	}
	latest, _ := Latest(context.Background(), pool)
	if s.Cursor != latest {
		t.Fatalf("resync cursor %d, want the newest id %d", s.Cursor, latest)
	}
	// Exactly ReplayMax missed is still a replay.
	s2, err := h.Subscribe(context.Background(), latest-ReplayMax, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Resync || len(s2.Backlog) != ReplayMax {
		t.Fatalf("resync %v, backlog %d: want %d replayed", s2.Resync, len(s2.Backlog), ReplayMax)
	}
	// An id past the newest is not this stream's: resync.
	s3, err := h.Subscribe(context.Background(), latest+100, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if !s3.Resync {
		t.Fatal("an id past the newest: want a resync")
	}
	insertRuns(t, pool, "z", 2)
	if got := recv(t, h, s, 2); got[0].ID <= latest {
		t.Fatalf("after the resync: %v", ids(got))
	}
}

// A client that never reads is dropped once its buffer is full; the other
// client gets every event, and the hub never waits.
func TestASlowClientIsDroppedAndStallsNothing(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	ctx := context.Background()
	slow, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	const n = ClientBuffer * 3
	var got []Event
	for i := 0; i < n; i += 50 {
		insertRuns(t, pool, fmt.Sprintf("j%d", i), 50)
		h.Wake()
		got = append(got, recv(t, h, fast, 50)...)
	}
	select {
	case <-slow.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the slow client was not dropped")
	}
	if slow.Err() != ErrSlow {
		t.Fatalf("slow client ended with %v, want ErrSlow", slow.Err())
	}
	if len(got) < n || h.Dropped() != 1 {
		t.Fatalf("fast client got %d of %d; dropped %d", len(got), n, h.Dropped())
	}
}

// readSSE parses an SSE response into events (comments dropped).
type sseEvent struct {
	id, name, data string
}

func readSSE(t testing.TB, sc *bufio.Scanner, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	if len(out) < n {
		t.Fatalf("stream ended after %d of %d events: %v", len(out), n, sc.Err())
	}
	return out
}

func get(t testing.TB, srv *httptest.Server, path string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// GET /v1/events: Last-Event-ID wins over ?since=, a bad id is a 400
// naming it, and a drain sends reconnect before the stream ends.
func TestServerSentEvents(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	srv := httptest.NewServer(h)
	defer srv.Close()
	insertRuns(t, pool, "a", 5)
	all := events(t, pool, 0)

	if resp := get(t, srv, "/?since=abc", nil); resp.StatusCode != 400 {
		t.Fatalf("?since=abc: %d, want 400", resp.StatusCode)
	}
	resp := get(t, srv, "/?since=0", map[string]string{"Last-Event-ID": fmt.Sprint(all[2].ID)})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	got := readSSE(t, sc, 2)
	if got[0].id != fmt.Sprint(all[3].ID) || got[1].id != fmt.Sprint(all[4].ID) || got[0].name != "run" {
		t.Fatalf("after Last-Event-ID %d: %v", all[2].ID, got)
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(got[0].data), &d); err != nil || d["job_id"] != "a" {
		t.Fatalf("data %q: %v", got[0].data, err)
	}
	// A live one.
	insertRuns(t, pool, "b", 1)
	h.Wake()
	if live := readSSE(t, sc, 1); live[0].name != "run" || !strings.Contains(live[0].data, `"job_id": "b"`) {
		t.Fatalf("live event %v", live)
	}
	// The drain.
	h.Reconnect()
	if end := readSSE(t, sc, 1); end[0].name != EventReconnect {
		t.Fatalf("after Reconnect: %v, want reconnect", end)
	}
	if sc.Scan() {
		t.Fatalf("the stream goes on after reconnect: %q", sc.Text())
	}
	if resp := get(t, srv, "/", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a new client while draining: %d, want 503", resp.StatusCode)
	}
}
