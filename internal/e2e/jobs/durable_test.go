package e2ejobs

import (
	"context"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// A real replica with its default configuration writes a run's row before
// the run's command starts (runner.durable_starts, docs/history.md): the
// command finds its own row, running; and a replica killed with SIGKILL
// while the command runs leaves the row behind. The nemesis run found
// executions without a row when the row waited for the once-a-second
// flush.
func TestARunsRowIsWrittenBeforeItsCommandStartsAndOutlivesAKill(t *testing.T) {
	t.Parallel()
	const saw = `psql "$EXP_DB" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO seen (seq, outcome) SELECT $STUDIO_RUN_SEQ, coalesce((SELECT outcome FROM studio_job_run WHERE seq = $STUDIO_RUN_SEQ), 'no row')"; `
	f := newFixture(t, shJob("durable", "instance", "1s", "", notePIDs+saw+"exec sleep 120"))
	f.exec(`CREATE TABLE seen (seq bigint NOT NULL, outcome text NOT NULL)`)
	p := f.startReplica("durable-1")
	p.WaitReady(t)
	var seq int64
	var outcome string
	replicaproc.Eventually(t, 60*time.Second, "the command's look at its own run row", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		return f.pool.QueryRow(ctx, `SELECT seq, outcome FROM seen`).Scan(&seq, &outcome)
	})
	if outcome != "running" {
		t.Fatalf("the command found its run's row: %q; want it there, running", outcome)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	p.WaitExit(t, replicaproc.ExitTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE seq = $1`, seq).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows of run %d after the kill (%v); want 1", n, seq, err)
	}
	t.Logf("run %d: row written before the command, kept after SIGKILL", seq)
}
