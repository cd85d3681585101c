package replicas

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestARestartAfterACrashClosesTheOldRunsAndRecordsTheCrash(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx := context.Background()
	first := e.register(t, "web-1", Options{})
	crashed := first.Incarnation()
	// The first process runs a job, and another replica one too; then it is
	// killed: no stop recorded, and the heartbeat goes stale.
	if _, err := e.pool.Exec(ctx, `INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, outcome) VALUES
  (1, 'long', 'web-1', now() - interval '1 minute', 'running'), (2, 'long', 'web-2', now(), 'running'),
  (3, 'short', 'web-1', now() - interval '2 minutes', 'succeeded')`); err != nil {
		t.Fatal(err)
	}
	first.Stop()
	e.age(t, "web-1")

	second := e.register(t, "web-1", Options{})
	got := second.Restarted()
	if !got.Crashed || got.Incarnation != crashed || len(got.Interrupted) != 1 || got.Interrupted[0] != 1 {
		t.Errorf("Restarted() = %+v, want a crash of %s and run 1 interrupted", got, crashed)
	}
	var outcome, errText string
	var finished bool
	if err := e.pool.QueryRow(ctx, `SELECT outcome, error, finished_at IS NOT NULL FROM studio_job_run WHERE seq = 1`).Scan(&outcome, &errText, &finished); err != nil {
		t.Fatal(err)
	}
	want := "replica web-1 restarted (incarnation " + second.Incarnation().String() + ") while the run was going"
	if outcome != "interrupted" || !finished || !strings.HasPrefix(errText, want) {
		t.Errorf("run 1: %s, finished %v, error %q; want interrupted, finished, %q", outcome, finished, errText, want)
	}
	var others int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE seq IN (2, 3) AND outcome IN ('running', 'succeeded') AND error IS NULL`).Scan(&others); err != nil || others != 2 {
		t.Errorf("the runs of another replica, or finished ones, changed (%d unchanged, %v)", others, err)
	}
	// The run event tells watchers (docs/events.md).
	var events int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM studio_event WHERE event = 'run' AND data->>'seq' = '1' AND data->>'outcome' = 'interrupted'`).Scan(&events); err != nil || events != 1 {
		t.Errorf("%d run events of the interrupted run (%v), want 1", events, err)
	}

	// doctor's source: the live row carries the crash.
	in, err := Get(ctx, e.pool, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Live || in.LastCrashAt == nil || in.LastCrashIncarnation != crashed.String() || in.LastCrashAge < 15*time.Second {
		t.Errorf("Get(web-1) = live %v, last crash %v (%s ago) of %q; want live, the crash of %s 20s ago", in.Live, in.LastCrashAt, in.LastCrashAge, in.LastCrashIncarnation, crashed)
	}

	// A recorded stop, then a restart: no new crash, the old one stays.
	if err := second.SetState(ctx, StateStopped); err != nil {
		t.Fatal(err)
	}
	second.Stop()
	third := e.register(t, "web-1", Options{})
	if r := third.Restarted(); r.Crashed || len(r.Interrupted) != 0 {
		t.Errorf("after a clean stop, Restarted() = %+v, want nothing", r)
	}
	if in, err = Get(ctx, e.pool, "web-1"); err != nil || in.LastCrashIncarnation != crashed.String() {
		t.Errorf("after a clean restart the earlier crash record is %q (%v), want it kept", in.LastCrashIncarnation, err)
	}
}

// A start that registered, failed on a transient database error and could
// not record its stop registers again with the same incarnation: its own
// live row is taken again, with no duplicate refusal and no crash, while
// another incarnation is still refused.
func TestARetriedStartRegistersAgainOverItsOwnLiveRow(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx := context.Background()
	first := e.register(t, "web-1", Options{})
	first.Stop() // no stop recorded: the row is live and starting

	again := e.register(t, "web-1", Options{Incarnation: first.Incarnation()})
	if r := again.Restarted(); r.Crashed || len(r.Interrupted) != 0 {
		t.Errorf("the same incarnation registering again: Restarted() = %+v, want nothing", r)
	}
	in, err := Get(ctx, e.pool, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Live || in.State != StateStarting || in.LastCrashAt != nil || e.incarnation(t, "web-1") != first.Incarnation() {
		t.Errorf("after the second registration: %+v, want live, starting, no crash, incarnation %s", in, first.Incarnation())
	}
	other := NewRegistry(e.cfg, e.url, Options{ID: "web-1"})
	defer other.Stop()
	if err := other.Register(ctx); !errors.Is(err, ErrLiveDuplicate) {
		t.Fatalf("another process with the id: %v, want ErrLiveDuplicate", err)
	}
}
