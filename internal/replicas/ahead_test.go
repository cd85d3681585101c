package replicas

import (
	"context"
	"errors"
	"testing"
	"time"
)

// insertAhead inserts a ready row for id whose heartbeat is the SQL
// expression at, as any role with the replica's grants could (issue 21,
// finding 4).
func (e env) insertAhead(t *testing.T, id, at string) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at)
VALUES ($1, gen_random_uuid(), 'elsewhere', 4242, 'dev', 'ready', `+at+`)`, id); err != nil {
		t.Fatal(err)
	}
}

// A row whose heartbeat is ahead of database time is not live, lists
// (infinity included), cannot be drained, and is forgotten only with
// force, in the same transaction as its audit row.
func TestARowWithAHeartbeatAheadIsNotLiveAndOnlyForceForgetsIt(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e.register(t, "web-1", Options{})
	e.insertAhead(t, "ghost", "now() + interval '1 hour'")
	e.insertAhead(t, "forever", "'infinity'")
	e.insertAhead(t, "skewed", "now() + interval '3 seconds'") // within liveness.FutureTolerance

	infos, err := List(ctx, e.pool)
	if err != nil {
		t.Fatalf("List with an 'infinity' heartbeat: %v", err)
	}
	got := map[string]Info{}
	for _, in := range infos {
		got[in.ID] = in
	}
	for _, c := range []struct {
		id          string
		live, ahead bool
	}{{"web-1", true, false}, {"skewed", true, false}, {"ghost", false, true}, {"forever", false, true}} {
		in := got[c.id]
		if in.Live != c.live || in.Ahead != c.ahead || in.Gone == c.live {
			t.Errorf("%s: live %v, ahead %v, gone %v; want live %v, ahead %v", c.id, in.Live, in.Ahead, in.Gone, c.live, c.ahead)
		}
	}
	if in := got["ghost"]; in.HeartbeatAge > -59*time.Minute || in.HeartbeatAge < -61*time.Minute {
		t.Errorf("ghost: heartbeat age %s, want about -1h", in.HeartbeatAge)
	}
	if in := got["forever"]; in.HeartbeatAt.Year() != 9999 || in.HeartbeatAge != -maxAge {
		t.Errorf("forever: heartbeat %s (age %s), want 9999-12-31 and -maxAge", in.HeartbeatAt, in.HeartbeatAge)
	}

	// Drain: nobody would claim the request, so none is written.
	if _, _, err := RequestDrain(ctx, e.pool, "ghost", "tester", ""); !errors.Is(err, ErrNotLive) {
		t.Errorf("RequestDrain(ghost) = %v, want ErrNotLive", err)
	}
	var requests int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM studio_request`).Scan(&requests); err != nil || requests != 0 {
		t.Errorf("%d drain requests (%v), want none", requests, err)
	}

	// Without force: refused, nothing changed.
	for _, id := range []string{"ghost", "forever"} {
		if _, err := Forget(ctx, e.pool, id, "tester", ""); !errors.Is(err, ErrAhead) {
			t.Errorf("Forget(%s) = %v, want ErrAhead", id, err)
		}
		if _, err := Get(ctx, e.pool, id); err != nil {
			t.Errorf("after a refused Forget(%s): %v", id, err)
		}
		if n := e.auditRows(t, "replicas.forget", id); n != 0 {
			t.Errorf("%d audit rows for %s, want 0", n, id)
		}
	}
	// Force never removes a live replica.
	if _, err := ForgetForce(ctx, e.pool, "web-1", "tester", ""); !errors.Is(err, ErrLive) {
		t.Errorf("ForgetForce(web-1) = %v, want ErrLive", err)
	}

	// The audit row is in the delete's transaction: when it cannot be
	// written, the row stays.
	if _, err := e.pool.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'audit refused'; END$$;
CREATE TRIGGER refuse BEFORE INSERT ON studio_audit FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if _, err := ForgetForce(ctx, e.pool, "ghost", "tester", ""); err == nil {
		t.Fatal("ForgetForce(ghost) with the audit insert failing: no error")
	}
	if _, err := Get(ctx, e.pool, "ghost"); err != nil {
		t.Errorf("ghost after a failed audit row: %v; want the row kept", err)
	}
	if _, err := e.pool.Exec(ctx, `DROP TRIGGER refuse ON studio_audit`); err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{"ghost", "forever"} {
		in, err := ForgetForce(ctx, e.pool, id, "tester", "planted row")
		if err != nil {
			t.Fatalf("ForgetForce(%s): %v", id, err)
		}
		if !in.Ahead {
			t.Errorf("ForgetForce(%s) returned %+v, want Ahead", id, in)
		}
		if _, err := Get(ctx, e.pool, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("after ForgetForce(%s), Get = %v", id, err)
		}
		var force, ahead bool
		if err := e.pool.QueryRow(ctx, `SELECT (detail->>'force')::bool, (detail->>'ahead')::bool FROM studio_audit
WHERE action = 'replicas.forget' AND target = $1 AND reason = 'planted row'`, id).Scan(&force, &ahead); err != nil || !force || !ahead {
			t.Errorf("audit row of %s: force %v, ahead %v (%v); want both", id, force, ahead, err)
		}
	}
}

// A replica that registers under the id of a row ahead of database time
// takes it over (it is not live), and no crash is recorded: nothing ran
// under that row.
func TestRegisteringOverARowAheadTakesItOverWithoutACrash(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	e.insertAhead(t, "web-2", "'infinity'")
	r := e.register(t, "web-2", Options{})
	if r.Restarted().Crashed {
		t.Errorf("Restart() = %+v, want no crash", r.Restarted())
	}
	in, err := Get(context.Background(), e.pool, "web-2")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Live || in.Ahead || in.LastCrashAt != nil {
		t.Errorf("web-2 after registering: live %v, ahead %v, last crash %v; want live, not ahead, no crash", in.Live, in.Ahead, in.LastCrashAt)
	}
}
