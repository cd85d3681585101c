package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestAReplicaStartingDuringADatabaseRestartComesUpWithoutExiting
// restarts the harness's cluster (pg_ctl restart -m fast) while a real
// `studioctl run` is in the middle of its start: registered, and blocked
// in the runner's first statement on a table the test holds, so the
// restart lands there every time. The replica used to exit 1 ("start
// runner: ... 57P01", docs/reliability.md, "Findings"); it must now wait
// the restart out and end ready, as the same process. Not parallel: the
// restart cuts every database of the cluster.
func TestAReplicaStartingDuringADatabaseRestartComesUpWithoutExiting(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	cluster := pgtest.Cluster(t)
	pool := testPool(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `LOCK TABLE studio_job_status IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	const id = "start-restart"
	r := startReplica(t, dbURL, id)
	replicaproc.Eventually(t, replicaproc.ReadyTimeout, "the replica's start to block in the runner, registered", func() error {
		if r.Exited() {
			t.Fatalf("the replica exited: %v\n%s", r.State(), r.Stderr())
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND application_name <> $1 AND wait_event_type = 'Lock' AND query LIKE '%studio_job_status%'`, testAppName).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no statement of the replica waits on studio_job_status yet")
		}
		return nil
	})
	before, err := readRow(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if before.State != string(replicas.StateStarting) {
		t.Fatalf("state while the runner starts = %q, want starting", before.State)
	}

	began := time.Now()
	if err := cluster.Restart(ctx); err != nil {
		t.Fatalf("restart the cluster: %v", err)
	}
	addr := r.WaitReady(t)
	t.Logf("ready %s after the restart began", time.Since(began).Round(time.Millisecond))
	if r.Exited() {
		t.Fatalf("the replica exited: %v", r.State())
	}
	retries := 0
	for _, l := range r.Logs() {
		if strings.HasPrefix(l.Msg(), "start: a database error that may pass") {
			retries++
			t.Logf("retry: %v", l["error"])
		}
	}
	if retries == 0 {
		t.Errorf("no retry line in the replica's log:\n%s", r.Stderr())
	}
	waitReadyz(t, addr, recoverWithin)
	var after row
	replicaproc.Eventually(t, recoverWithin, "the row after the restart", func() error {
		after, err = readRow(ctx, pool, id)
		return err
	})
	if after.State != string(replicas.StateReady) || after.PID != r.PID() || after.Incarnation != before.Incarnation {
		t.Errorf("row after the retried start %+v, want ready, pid %d, incarnation %s", after, r.PID(), before.Incarnation)
	}
	r.Signal(t, syscall.SIGTERM)
	if code := r.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0:\n%s", code, r.Stderr())
	}
}

// TestAReplicaRestartedOnTheSameMachineAfterItsProcessEndedIsNotRefused:
// a replica whose process ended without recording stopped (here SIGKILL;
// the same holds for a clean stop whose write the database refused) used
// to make a restart with the same id exit 2, "a live replica already has
// this id (its heartbeat is less than 15s old)", until the heartbeat aged
// out. A restart on the same machine proves the old process ended (same
// boot and pid namespace, its pid gone: migration 00021) and starts at
// once, recording the crash. A live holder is still refused
// (testDuplicateID).
func TestAReplicaRestartedOnTheSameMachineAfterItsProcessEndedIsNotRefused(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	pool := testPool(t, dbURL)
	const id = "same-machine"
	a := startReplica(t, dbURL, id)
	a.WaitReady(t)
	before, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	a.Signal(t, syscall.SIGKILL)
	if code := a.WaitExit(t, replicaproc.ExitTimeout); code != -1 {
		t.Fatalf("exit code after SIGKILL = %d, want -1", code)
	}
	b := startReplica(t, dbURL, id)
	b.WaitReady(t)
	after, err := readRow(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.PID != b.PID() || after.Incarnation == before.Incarnation {
		t.Fatalf("row after the restart %+v, want the new process (pid %d)", after, b.PID())
	}
	if age := after.Now.Sub(before.HeartbeatAt); age >= replicas.GoneAfter {
		t.Logf("the old heartbeat was %s old at the restart: the proof was not needed", age)
	}
	in, err := replicas.Get(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.LastCrashIncarnation != before.Incarnation {
		t.Errorf("last crash %q, want the killed process's %s recorded", in.LastCrashIncarnation, before.Incarnation)
	}
	b.Signal(t, syscall.SIGTERM)
	if code := b.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
}
