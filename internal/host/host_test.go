package host_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHostStartsServesProbesAndDrainsWithoutLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url := pgtest.NewDB(t)
	ready := make(chan string, 1)
	quick, err := jobs.Parse("test.yaml", []byte(`
jobs:
  - id: echo
    scope: installation
    every: 1s
    run:
      command: ["sh", "-c", "echo hi"]
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{
		ConnString: url, ID: "leak-check", Version: "test", DrainDelay: 50 * time.Millisecond,
		OnReady: func(addr string) { ready <- addr }, Jobs: quick,
	})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("host stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("host not ready after 30s")
	}
	if code, body := get(t, "http://"+addr+"/livez"); code != 200 {
		t.Fatalf("/livez: %d %s", code, body)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if _, body := get(t, "http://"+addr+"/metrics"); !strings.Contains(body, "studio_replica_ready 1") {
		t.Fatalf("/metrics lacks studio_replica_ready 1:\n%s", body)
	}
	// The overdue sampler's first read (at start, then every 15 s): none
	// overdue, and no per-job series (one job: per-job mode).
	waitUntil(t, 30*time.Second, "studio_jobs_overdue 0 on /metrics", func() bool {
		_, body := get(t, "http://"+addr+"/metrics")
		return strings.Contains(body, "\nstudio_jobs_overdue 0\n") && !strings.Contains(body, "studio_job_overdue_seconds{")
	})
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := replicas.Get(context.Background(), pool, "leak-check")
	if err != nil || in.State != replicas.StateReady || in.HTTPAddr != addr {
		t.Fatalf("registry row: %+v, %v", in, err)
	}
	// A job runs before the host is stopped, so the runner's goroutines are
	// part of the leak check.
	waitUntil(t, 30*time.Second, "a succeeded run of the echo job", func() bool {
		var n int
		pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_job_run WHERE job_id = 'echo' AND outcome = 'succeeded'`).Scan(&n)
		return n > 0
	})
	// /v1/jobs reads the job's skips and misses of 24 h from the database
	// (the DO block: studio_event's CHECK lacks 'occurrence' until a
	// migration adds it).
	if _, err := pool.Exec(context.Background(), `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'studio_event'::regclass AND contype = 'c'
                   AND pg_get_constraintdef(oid) LIKE '%occurrence%') THEN
    ALTER TABLE studio_event DROP CONSTRAINT IF EXISTS studio_event_event_check;
  END IF;
END $$;
INSERT INTO studio_occurrence (job_id, nominal_at, outcome, reason, replica_id, paused_by)
VALUES ('echo', now() - interval '1 hour', 'skipped', 'paused', 'leak-check', 'alice')`); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, "http://"+addr+"/v1/jobs"); code != 200 || !strings.Contains(body, `"id": "echo"`) || !strings.Contains(body, `"skipped_24h": 1`) {
		t.Fatalf("/v1/jobs: %d %s", code, body)
	}
	sigs <- os.Interrupt
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("host did not stop")
	}
	in, err = replicas.Get(context.Background(), pool, "leak-check")
	if err != nil || in.State != replicas.StateStopped || in.StoppedAt == nil {
		t.Fatalf("after drain: %+v, %v", in, err)
	}
}

func TestHostRefusesTheIdOfALiveReplica(t *testing.T) {
	url := pgtest.NewDB(t)
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pool.Exec(context.Background(), `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('dup', gen_random_uuid(), 'h', 1, 'v', 'ready')`)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := host.New(host.Options{ConnString: url, ID: "dup"})
	err = runHost(h, context.Background(), make(chan os.Signal))
	if !errors.Is(err, replicas.ErrLiveDuplicate) {
		t.Fatalf("got %v, want ErrLiveDuplicate", err)
	}
}

func TestSecondSignalStopsAtOnce(t *testing.T) {
	url := pgtest.NewDB(t)
	ready := make(chan string, 1)
	h, _ := host.New(host.Options{ConnString: url, ID: "impatient", DrainDelay: time.Hour, OnReady: func(a string) { ready <- a }})
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host stopped before ready: %v", err)
	}
	sigs <- os.Interrupt
	waitUntil(t, 10*time.Second, "state draining", func() bool { return h.State() == replicas.StateDraining })
	sigs <- os.Interrupt
	select {
	case err := <-done:
		if !errors.Is(err, host.ErrInterrupted) {
			t.Fatalf("got %v, want ErrInterrupted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second signal did not stop the host at once")
	}
}
