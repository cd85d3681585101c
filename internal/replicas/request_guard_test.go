package replicas_test

import (
	"context"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Found by the adversarial pass over issue 7: a role that may INSERT into
// studio_request (the operator) could drain a replica with no audit row, or
// with an old one; a role that may UPDATE it (the replica) could reopen a
// claimed request. migrations/00005 refuses both, for every role.
func TestARequestNeedsItsOwnAuditRowAndIsClaimedOnce(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	exec := func(sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}
	if err := exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'dev', 'ready')`); err != nil {
		t.Fatal(err)
	}
	const spoof = `INSERT INTO studio_request (kind, target, replica_id, incarnation, requested_by, audit_seq, expires_at)
SELECT 'replica.drain', id, id, incarnation, 'ceo', $1, now() + interval '1 hour' FROM studio_replica WHERE id = 'web-1'`

	// No audit row at all.
	if err := exec(spoof, nil); err == nil || !strings.Contains(err.Error(), "needs its own studio_audit row") {
		t.Errorf("a request without an audit row = %v, want refused", err)
	}
	// An audit row of an earlier transaction.
	var old int64
	if err := pool.QueryRow(ctx, `INSERT INTO studio_audit (actor, action, target) VALUES ('ana', 'replicas.drain', 'web-1') RETURNING seq`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if err := exec(spoof, old); err == nil || !strings.Contains(err.Error(), "same transaction") {
		t.Errorf("a request pointing at an old audit row = %v, want refused", err)
	}
	// An audit row of this transaction, but for another target.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var other int64
	if err := tx.QueryRow(ctx, `INSERT INTO studio_audit (actor, action, target) VALUES ('ana', 'replicas.drain', 'web-2') RETURNING seq`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, spoof, other); err == nil {
		t.Error("a request whose audit row names another target was accepted")
	}
	tx.Rollback(ctx)

	// The operator command's way works, and the replica claims it once.
	if _, _, err := replicas.RequestDrain(ctx, pool, "web-1", "ana@ops", "kernel"); err != nil {
		t.Fatal(err)
	}
	var inc string
	if err := pool.QueryRow(ctx, `SELECT incarnation::text FROM studio_replica WHERE id = 'web-1'`).Scan(&inc); err != nil {
		t.Fatal(err)
	}
	if err := exec(`UPDATE studio_request SET done_at = now(), done_by = 'web-1' WHERE done_at IS NULL`); err != nil {
		t.Fatalf("claim: %v", err)
	}
	for _, sql := range []string{
		`UPDATE studio_request SET done_at = NULL, done_by = NULL`,
		`UPDATE studio_request SET requested_by = 'someone-else'`,
		`UPDATE studio_request SET done_at = now(), done_by = 'web-2'`,
	} {
		if err := exec(sql); err == nil || !strings.Contains(err.Error(), "claimed once") {
			t.Errorf("%s = %v, want refused", sql, err)
		}
	}
	// Pruning the audit log still works: audit_seq becomes NULL.
	if err := exec(`DELETE FROM studio_audit`); err != nil {
		t.Errorf("prune the audit log: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM studio_request WHERE audit_seq IS NULL AND done_by = 'web-1'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("after pruning the audit log: %d requests with audit_seq NULL (err %v), want 1", n, err)
	}
}
