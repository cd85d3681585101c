package host_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Defect 5 of issue 7, end to end: a replica whose sql job changes its
// session on every run (ends the transaction, then SET ROLE, search_path,
// statement_timeout and a read-only default) keeps writing its history,
// stays ready, keeps its pool's sessions as they were, and drains with
// every run recorded. With the task on the replica's pool, history writes
// failed after the first run.
func TestASQLJobCannotPoisonTheReplicasPool(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	list, err := jobs.Parse("test.yaml", []byte(`
jobs:
  - id: poison
    scope: installation
    every: 1s
    run:
      sql: "COMMIT; SET ROLE pg_monitor; SET search_path = nowhere; SET statement_timeout = 1; SET default_transaction_read_only = on"
`))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	h, err := host.New(host.Options{
		ConnString: url, ID: "sql-poison", Version: "test", DrainDelay: -1, NoHousekeeping: true,
		OnReady: func(addr string) { ready <- addr }, Jobs: list,
		// Two connections: a task on the pool would poison them at once.
		PoolConfigHook: func(c *pgxpool.Config) { c.MaxConns = 2 },
	})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- runHost(h, ctx, sigs) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("host stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("host not ready after 30s")
	}
	stopped := false
	defer func() {
		if !stopped {
			sigs <- os.Interrupt
			<-done
		}
	}()

	check, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var user string
	if err := check.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	// Finished runs, whatever their outcome: the job's own 1 ms
	// statement_timeout can cancel its COMMIT on a loaded machine, and a
	// failed run has poisoned its session just as much.
	finished := func() int {
		var n int
		check.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE job_id = 'poison' AND outcome <> 'running'`).Scan(&n)
		return n
	}
	waitUntil(t, 30*time.Second, "three finished runs of the poison job", func() bool { return finished() >= 3 })

	// Every idle connection of the replica's pool has its session as it was.
	conns := h.Pool().AcquireAllIdle(ctx)
	for _, c := range conns {
		var cur, sess, path, timeout, ro string
		err := c.QueryRow(ctx, `SELECT current_user, session_user, current_setting('search_path'),
			current_setting('statement_timeout'), current_setting('default_transaction_read_only')`).Scan(&cur, &sess, &path, &timeout, &ro)
		c.Release()
		if err != nil {
			t.Fatalf("read a pool session: %v", err)
		}
		if cur != user || sess != user || path != `"$user", public` || timeout != "0" || ro != "off" {
			t.Errorf("a pool session after the job: user %s/%s, search_path %s, statement_timeout %s, read-only %s", cur, sess, path, timeout, ro)
		}
	}
	t.Logf("checked %d idle pool connections", len(conns))
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}

	sigs <- os.Interrupt
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("host did not stop")
	}
	// The drain recorded every run: none left running, and none failed but
	// by the job's own 1 ms statement_timeout, which can cancel its COMMIT
	// on a loaded machine (it did in CI: "commit: ERROR: canceling
	// statement due to statement timeout").
	var running, failed int
	if err := check.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'running'),
		count(*) FILTER (WHERE outcome <> 'succeeded' AND outcome <> 'running' AND coalesce(error, '') NOT LIKE '%canceling statement due to statement timeout%')
		FROM studio_job_run WHERE job_id = 'poison'`).Scan(&running, &failed); err != nil {
		t.Fatal(err)
	}
	if running != 0 || failed != 0 {
		rows, _ := check.Query(ctx, `SELECT outcome, error FROM studio_job_run WHERE job_id = 'poison' AND outcome <> 'succeeded'`)
		for rows.Next() {
			var o, e string
			rows.Scan(&o, &e)
			t.Logf("run %s: %s", o, e)
		}
		rows.Close()
		t.Errorf("after the drain: %d runs still running, %d not succeeded", running, failed)
	}
	in, err := replicas.Get(ctx, check, "sql-poison")
	if err != nil || in.State != replicas.StateStopped {
		t.Fatalf("after drain: %+v, %v", in, err)
	}
}
