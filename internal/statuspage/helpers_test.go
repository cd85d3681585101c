package statuspage_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Lock rows of other writers of the lock table: a Java node's (ShedLock
// shares the table), and a hostile one whose name and holder are markup.
const (
	javaLockName      = "billing.invoice-export"
	javaLockHolder    = "billing-node-7"
	hostileLockName   = `<img src=x onerror="window.pwned=1">`
	hostileLockHolder = `java-1 "><script>window.pwned=2</script>`
)

// testJobs are the jobs of the page's replicas: one that succeeds and one
// that fails, both installation jobs that fire when the replicas start
// (jobstore's shared schedule finds no earlier run) and not again within a
// test; a backup that runs only when the browser test triggers it while
// the page is open (scope instance: its first fire is a random part of the
// hour away, and no lock held since an earlier run makes the triggered run
// a skip); and a duty per owned cluster every 5s.
const testJobs = `
jobs:
  - id: nightly-report
    scope: installation
    every: 1h
    run:
      command: ["sh", "-c", "echo report done"]
  - id: flaky-export
    scope: installation
    every: 1h
    run:
      command: ["sh", "-c", "echo 'upload refused' >&2; exit 3"]
  - id: backup
    scope: instance
    every: 1h
    run:
      command: ["sh", "-c", "echo backed up"]
  - id: compact
    scope: instance
    clusters: owned
    every: 5s
    run:
      command: ["sh", "-c", "echo compacted"]
`

func parseJobs(t *testing.T) []jobs.Job {
	t.Helper()
	list, err := jobs.Parse("test.yaml", []byte(testJobs))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// startHost starts a replica (its HTTP server serves the page) and drains
// it at the end of the test. It returns the replica's HTTP address.
func startHost(t *testing.T, url, id string, clusters []string) (string, *host.Host) {
	t.Helper()
	ready := make(chan string, 1)
	h, err := host.New(host.Options{ConnString: url, ID: id, Version: "v0.12.0-test", DrainDelay: host.NoDrainDelay,
		Clusters: clusters, Jobs: parseJobs(t), OnReady: func(a string) { ready <- a }})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() {
		h.Drain("test end")
		<-h.Done()
	})
	select {
	case a := <-ready:
		return a, h
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", id)
		return "", nil
	}
}

func testPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
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

func do(t *testing.T, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// finishedRuns counts job's finished runs.
func finishedRuns(t *testing.T, pool *pgxpool.Pool, job string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_job_run WHERE job_id = $1 AND finished_at IS NOT NULL`, job).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// inst is a test installation: two replicas and a pool of the test's.
type inst struct {
	addrA, addrB string
	a, b         *host.Host
	pool         *pgxpool.Pool
}

// installation starts two replicas sharing two clusters, waits until each
// job has run once, and adds a Java node's lock row, so that every section
// of the page has rows.
func installation(t *testing.T) inst {
	t.Helper()
	url := pgtest.NewDB(t)
	clusters := []string{"eu-west", "us-east"}
	var in inst
	in.addrA, in.a = startHost(t, url, "replica-a", clusters)
	in.addrB, in.b = startHost(t, url, "replica-b", clusters)
	pool := testPool(t, url)
	in.pool = pool
	ctx := context.Background()
	waitUntil(t, 30*time.Second, "both clusters owned", func() bool {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM cluster_lease WHERE owner IS NOT NULL`).Scan(&n)
		return n == len(clusters)
	})
	waitUntil(t, 30*time.Second, "a finished run of every job", func() bool {
		return finishedRuns(t, pool, "nightly-report") > 0 && finishedRuns(t, pool, "flaky-export") > 0 && finishedRuns(t, pool, "compact") > 0
	})
	addLock(t, pool, javaLockName, javaLockHolder)
	return in
}

// addLock stores a lock row held for an hour, as another writer would.
func addLock(t *testing.T, pool *pgxpool.Pool, name, holder string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ($1, now() + interval '1 hour', now(), $2)`,
		name, holder); err != nil {
		t.Fatal(err)
	}
}

// trigger asks for a run of job now, as `studioctl jobs trigger` does.
func trigger(t *testing.T, pool *pgxpool.Pool, job string) {
	t.Helper()
	waitUntil(t, 30*time.Second, "a replica reporting job "+job, func() bool {
		return jobstore.Known(context.Background(), pool, job) == nil
	})
	if _, err := jobstore.Trigger(context.Background(), pool, job, "statuspage-test", "test"); err != nil {
		t.Fatalf("trigger %s: %v", job, err)
	}
}
